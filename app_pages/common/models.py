"""The model: loaded once per process (``st.cache_resource``) and shared by all sessions, used by
one decode at a time (``model_lock``); the public demo's rule on which models a visitor may name.
Decoding state (the KV cache, the pool) lives in the Run, never in the cache."""

from __future__ import annotations

import threading
from pathlib import Path

import streamlit as st

from .assets import ROOT, SHIPPED_ADAPTER, app_relative
from .demo import model_refused as _model_refused


def canonical(name: str) -> str:
    """The shipped CLLM adapter's folder however it is written (relative to the app, absolute, with
    ./ or a trailing /): its absolute path, one cache entry; any other name as it is."""
    if not name:
        return name
    try:
        p = Path(name)
        same = (p if p.is_absolute() else ROOT / p).resolve() == SHIPPED_ADAPTER.resolve()
    except (OSError, ValueError, RuntimeError):
        return name
    return str(SHIPPED_ADAPTER) if same else name


def model_refused(name: str) -> str | None:
    """Why a public demo (PDL_PUBLIC_DEMO=1) refuses this model or CLLM folder (None: allowed)."""
    return _model_refused(canonical(name), also=(str(SHIPPED_ADAPTER),))


@st.cache_resource(show_spinner=False, max_entries=2)
def get_model(name: str, device_map: str = "", max_memory: str = "", offload_folder: str = ""):
    """One LoadedModel per name (and split) per process, shared by all sessions (read-only: weights only)."""
    from decoding.model import load_model

    split = {"device_map": device_map, "max_memory": max_memory, "offload_folder": offload_folder} if device_map else {}
    lm = load_model(name or None, **split)
    lm.model_id = app_relative(lm.model_id)  # a folder of the app (the shipped adapter) named without the server path
    return lm


def model_split() -> tuple[str, str, str]:
    """The model field's advanced options: device map, max memory, offload folder (accelerate)."""
    ss = st.session_state
    return tuple(str(ss.get(k, "") or "").strip() for k in ("device_map", "max_memory", "offload_folder"))


def loaded_model(name: str):
    """get_model with the sidebar's split, if one is set (plain get_model(name) otherwise)."""
    name, split = canonical(name), model_split()
    return get_model(name, *split) if split[0] else get_model(name)


@st.cache_resource(show_spinner=False)
def model_lock() -> threading.Lock:
    return threading.Lock()
