"""Sidebar presets: one button sets a method and its registry parameters (the ``p_<name>`` keys
of the sidebar's widgets) to a published configuration.

"Paper settings" is the lookahead paper's (Fu et al., ICML 2024) configuration for 7B models on an
A100: W = 15, N = 5, G = 15, and a pool fed by the window only (no prompt seeding, no harvesting of
the committed output, which the lab's defaults add).
"""

from __future__ import annotations

import streamlit as st

from decoding.methods import REGISTRY
from viz.style import METHOD_NAMES

from .keys import widget_key

PRESETS: dict[str, tuple[str, dict]] = {  # button label -> (method, parameters)
    "Paper settings (lookahead W=15, N=5, G=15, window-only pool)":
        ("lookahead", {"W": 15, "N": 5, "G": 15, "seed_pool_prompt": False, "harvest_output": False}),
}


def check(method: str, params: dict) -> None:
    """Every preset parameter is one of the method's registry parameters, within its bounds
    (ConfigError otherwise)."""
    REGISTRY[method].check_params(params)


def apply(label: str) -> None:
    """Select the preset's method and set its parameters' widget keys (an on_click callback: it runs
    before the widgets are drawn, so they show the new values)."""
    method, params = PRESETS[label]
    check(method, params)
    ss = st.session_state
    ss.method_label = METHOD_NAMES[method]
    for k, v in params.items():
        ss[widget_key(method, k)] = v


def preset_buttons() -> None:
    for i, (label, (method, params)) in enumerate(PRESETS.items()):
        st.button(label, key=f"preset_{i}", on_click=apply, args=(label,), width="stretch",
                  help=f"{METHOD_NAMES[method]} with " + ", ".join(f"{k}={v}" for k, v in params.items()))
