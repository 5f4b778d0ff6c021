"""The model: loaded once per process (``st.cache_resource``) and shared by all sessions, used by
one decode at a time (``model_lock``); the public demo's rule on which models a visitor may name.
Decoding state (the KV cache, the pool) lives in the Run, never in the cache."""

from __future__ import annotations

import threading
from dataclasses import replace
from pathlib import Path

import streamlit as st

from .assets import ROOT, SHIPPED_ADAPTER, app_relative
from .demo import model_refused as _model_refused
from .demo import public_demo


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


@st.cache_resource(show_spinner=False, max_entries=2)
def compiled_model(name: str):
    """get_model's model with a compiled decode step (decoding.compiled): the same weights, its own
    static caches and graphs (built on first use, kept on disk by inductor). Where this machine
    cannot compile, the eager step (``compile_possible`` says why)."""
    from decoding.model import with_step

    return with_step(replace(get_model(name)), "compiled")


def model_step() -> str:
    """The sidebar's decode step: "compiled" or "eager" (always eager in a public demo, where a
    first run would compile for minutes on the shared server, and for a split model)."""
    if public_demo() or model_split()[0]:
        return "eager"
    return "compiled" if st.session_state.get("decode_step") == "compiled" else "eager"


def loaded_model(name: str):
    """The sidebar's model: split (get_model with the split) if one is set, else with the sidebar's
    decode step."""
    name, split = canonical(name), model_split()
    if split[0]:
        return get_model(name, *split)
    return compiled_model(name) if model_step() == "compiled" else get_model(name)


@st.cache_resource(show_spinner=False)
def model_lock() -> threading.Lock:
    return threading.Lock()
