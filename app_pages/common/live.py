"""Decodes started from the app: stoppable within one step, and a stopped one keeps its partial trace.

How Streamlit stops a script run (a Stop press, a page click, any widget change): it raises an
exception in the running script thread at its next ``st.*`` call or ``st.session_state`` access.
With the default ``runner.fastReruns`` the next run starts at once in another thread, and in the
stopped thread *every* later ``st.*`` call and session-state access raises again: code after a
``finally`` that reads or writes session state never runs (the partial trace was lost that way).
And a decode loop that makes no ``st.*`` call (the CLLM page's) is not stopped at all.

So a decode here:
- writes only to plain Python objects taken before its loop: a ``LiveRun`` (kept in session
  state, so that the next run finds it) and the session's ``Results``;
- checks ``LiveRun.stopped`` between steps (``Run.stop`` ends a Run after its current step);
- releases the model lock and stores its traces in ``finally`` blocks without any ``st.*`` call,
  then sets ``LiveRun.done``.
The next script run (``settle``, called first thing by app.py) stops a LiveRun still going and
waits for ``done`` before it draws, so the page shows the stopped run's partial trace.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

import streamlit as st

STOP_WAIT_S = 120.0  # the longest the next run waits for a stopped decode (one step; a model load)


@dataclass
class LiveRun:
    """A decode in progress in one session."""

    runs: list = field(default_factory=list)  # the decoding.Run objects it steps
    stopped: bool = False
    done: threading.Event = field(default_factory=threading.Event)
    kept: list[str] = field(default_factory=list)  # what a stopped decode stored (the next run says so)
    told: bool = False

    def stop(self) -> None:
        self.stopped = True
        for r in self.runs:
            r.stop()


def tokens(k: int) -> str:
    return f"{k} token" + ("" if k == 1 else "s")


def stopped_source(trace, when: float | None = None) -> str:
    """The source label of a live run's trace: finished, or stopped after k tokens."""
    what = f"stopped after {tokens(len(trace.output_ids))}" if trace.stop_reason in ("stopped", "") else "finished"
    return f"live run ({what}, {time.strftime('%H:%M:%S', time.localtime(when))})"


def settle(ss) -> None:
    """Stop this session's decode if one is still going (the visitor pressed Stop or moved on)
    and wait until it has stored its partial trace; say once what was kept."""
    live = ss.get("live")
    if live is None:
        return
    if not live.done.is_set():
        live.stop()
        with st.spinner("Stopping the run: it ends after its current step…"):
            live.done.wait(STOP_WAIT_S)
    if live.kept and not live.told:
        live.told = True
        st.info("Stopped: " + "; ".join(live.kept) + ". The partial run is kept and shown on every page.")


def start(ss, runs: list) -> LiveRun:
    """Register a new decode of ``runs`` in this session (before its loop)."""
    live = LiveRun(runs=list(runs))
    ss.live = live
    return live


@contextmanager
def model_held(lock: threading.Lock, live: LiveRun, waiting: Callable[[], None]) -> Iterator[bool]:
    """Hold the model lock for a decode; ``waiting()`` draws the waiting message (it may raise
    Streamlit's stop). Yields False if the decode was stopped before it got the lock."""
    acquired = False
    try:
        while not live.stopped and not (acquired := lock.acquire(timeout=0.25)):
            waiting()
        yield acquired
    finally:
        if acquired:
            lock.release()


def drive(runs: list, live: LiveRun, on_step: Callable[[int, object], None]) -> None:
    """Advance ``runs`` in turn, one step each (side by side), until all are done or ``live`` is
    stopped. ``on_step(i, step)`` draws (it may raise Streamlit's stop). The runs' generators are
    closed in any case, which finishes their traces (stop_reason "stopped" when cut short)."""
    its = [iter(r) for r in runs]
    active = list(range(len(runs)))
    try:
        while active and not live.stopped:
            for i in list(active):
                try:
                    step = next(its[i])
                except StopIteration:
                    active.remove(i)
                    continue
                on_step(i, step)
    finally:
        for it in its:
            it.close()
