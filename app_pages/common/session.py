"""This session's traces and settings, set up first thing in every script run.

Results live in ``st.session_state.results`` (state.Results: method -> Trace and what it is), so
moving a widget re-renders from stored traces and never re-runs the model.
"""

from __future__ import annotations

import streamlit as st

from decoding.trace import Trace

from . import live
from .assets import EXAMPLE_SOURCE, SHIPPED_ADAPTER, example_traces, shipped_pair
from .keys import settings_defaults
from .state import CllmPair, Results, keep_settings


def init_state() -> None:
    """First thing in every script run: the session's Results, the sidebar's settings carried
    over (state.keep_settings), and a decode this session left running stopped and stored
    (live.settle)."""
    ss = st.session_state
    if "results" not in ss:
        res = Results()
        for m, t in example_traces().items():
            res.put(t, f"{EXAMPLE_SOURCE} (assets/example_{m}.json)")
        pair = shipped_pair()
        if pair is not None:
            res.cllm = CllmPair(*pair, "shipped traces (assets/cllm)", str(SHIPPED_ADAPTER))
        ss.results = res
    keep_settings(ss, settings_defaults())
    live.settle(ss)


def results() -> Results:
    """This session's traces (one object per session, never replaced)."""
    return st.session_state.results


def put_trace(trace: Trace, source: str) -> None:
    results().put(trace, source)
