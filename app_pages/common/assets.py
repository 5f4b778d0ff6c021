"""The app's files: where assets/ is, the shipped example traces and the shipped CLLM pair (read once
per process, shared read-only by every session)."""

from __future__ import annotations

from pathlib import Path

import streamlit as st

from decoding.methods import METHODS
from decoding.trace import Trace

ROOT = Path(__file__).resolve().parents[2]
ASSETS = ROOT / "assets"
CLLM_ASSETS = ASSETS / "cllm"
SHIPPED_ADAPTER = CLLM_ASSETS / "adapter"
EXAMPLE_SOURCE = "example trace"  # the source of the shipped traces a new session (a reload too) starts from
SHIPPED_ADAPTER_NAME = SHIPPED_ADAPTER.relative_to(ROOT).as_posix()  # as a page names it: no server path


def app_relative(text: str) -> str:
    """``text`` with this app's folder left out of every path in it (a page shows no server path:
    /srv/lab/assets/cllm/adapter -> assets/cllm/adapter)."""
    return text.replace(str(ROOT) + "/", "")


@st.cache_resource(show_spinner=False)
def example_traces() -> dict[str, Trace]:
    """The traces shipped in assets/ (read once per process, shared read-only)."""
    out = {}
    for m in METHODS:
        p = ASSETS / f"example_{m}.json"
        try:
            out[m] = Trace.load(str(p))
        except (OSError, ValueError):
            continue
    return out


@st.cache_resource(show_spinner=False)
def shipped_pair() -> tuple[Trace, Trace] | None:
    """The precomputed base and CLLM Jacobi traces in assets/cllm (None if missing)."""
    try:
        return Trace.load(str(CLLM_ASSETS / "base_jacobi.json")), Trace.load(str(CLLM_ASSETS / "cllm_jacobi.json"))
    except (OSError, ValueError):
        return None


GALLERY = ASSETS / "gallery"  # the what-if gallery (scripts/make_gallery.py)


@st.cache_resource(show_spinner=False)
def gallery() -> dict[str, dict]:
    """The what-if gallery's runs: "prompt · setting" -> its index entry (empty if not shipped)."""
    import json

    try:
        runs = json.loads((GALLERY / "index.json").read_text(encoding="utf-8"))["runs"]
    except (OSError, ValueError, KeyError, TypeError):
        return {}
    return {f"{e['prompt']} · {e['setting']}": e for e in runs if (GALLERY / e["file"]).is_file()}


@st.cache_resource(show_spinner=False, max_entries=32)
def gallery_trace(file: str) -> Trace:
    """One gallery run (read once per process; a file name from the index, never a visitor's path)."""
    return Trace.load(str(GALLERY / Path(file).name))
