"""The sidebar's session keys and what they mean as run settings: the example prompts, the
widgets' keys and first values, and the settings of a method read back from them (no drawing here;
sidebar.py draws the widgets)."""

from __future__ import annotations

import streamlit as st

from decoding.methods import METHODS as REGISTRY_METHODS
from decoding.methods import REGISTRY
from decoding.methods import SAMPLING_METHODS as REGISTRY_SAMPLING
from viz.style import METHOD_NAMES

METHODS = REGISTRY_METHODS  # every method of the registry (decoding/methods/)
SAMPLING_METHODS = REGISTRY_SAMPLING
APP_MAX_NEW_TOKENS = 512  # the app's cap (the core allows more from the CLI)

EXAMPLE_PROMPTS: dict[str, tuple[str, bool]] = {  # label -> (prompt, chat mode)
    "Code: primes": ("Write a Python function is_prime(n) that checks whether n is a prime number, "
                     "then use it to print all the primes below 50.", True),
    "Math: word problem": ("A train leaves at 3:15 pm and travels 180 km at 60 km/h. Then it waits 20 minutes "
                           "and travels another 90 km at 45 km/h. When does it arrive? Explain step by step.", True),
    "Chat: advice": ("I have a job interview tomorrow for a junior data analyst position. "
                     "What should I prepare tonight?", True),
    "Summarise a text": ("Summarise the following text in three sentences.\n\n"
                         "The Jacobi method is an iterative algorithm for solving a system of linear equations. "
                         "Each diagonal element is solved for, and an approximate value is plugged in. The process "
                         "is then iterated until it converges. Applied to language models, Jacobi decoding guesses "
                         "a block of future tokens, runs the model over the whole block in one forward pass, and "
                         "replaces every guess with the model's prediction at the previous position. Tokens that "
                         "stop changing are accepted. Greedy Jacobi decoding returns exactly the text that plain "
                         "autoregressive decoding would, but it may need fewer forward passes.", True),
    "Plain text (no chat)": ("The three laws of thermodynamics are", False),
}


def settings_defaults() -> dict:
    """The sidebar's widget keys and their first values."""
    first = next(iter(EXAMPLE_PROMPTS))
    return {"model_name": "", "example": first, "prompt": EXAMPLE_PROMPTS[first][0],
            "chat": EXAMPLE_PROMPTS[first][1], "method_label": METHOD_NAMES["lookahead"], "max_new_tokens": 64,
            **{key: prm.default for _, prm, key, _ in param_widgets()},
            "s_temperature": 0.0, "s_top_k": 0, "s_top_p": 1.0, "s_seed": 0, "decode_step": "eager"}


def selected_method() -> str:
    label = st.session_state.get("method_label")
    return next((m for m in METHODS if METHOD_NAMES[m] == label), "lookahead")


def widget_key(method: str, name: str) -> str:
    """The session key of a parameter's widget: ``p_<name>``, one widget for every method that
    declares the very same parameter (the seed, the step budget); ``p_<method>_<name>`` where
    methods give one name different defaults or bounds (k of prompt lookup and of another method)."""
    same = [prm for spec in REGISTRY.values() for prm in spec.params if prm.name == name]
    return f"p_{name}" if all(p == same[0] for p in same) else f"p_{method}_{name}"


def param_widgets() -> list[tuple[str, object, str, bool]]:
    """(method, Param, widget key, shared) once per widget; shared: several methods read it."""
    seen: dict[str, list] = {}
    for m, spec in REGISTRY.items():
        for prm in spec.params:
            seen.setdefault(widget_key(m, prm.name), [m, prm, 0])[2] += 1
    return [(m, prm, key, n > 1) for key, (m, prm, n) in seen.items()]


def whole(v):
    """A number field's value as an int when it is a whole number (the fields are float-typed, see
    sidebar.number_field) and shown in full there (below 1e21); anything else as it is, for the
    registry's check to name."""
    if isinstance(v, float) and v.is_integer() and abs(v) < 1e21:
        return int(v)
    return v


def sampling_params(method: str) -> dict:
    """The sidebar's sampling settings as params for ``method`` (empty: greedy). A temperature that
    is not 0 goes as typed, with the other three, so that the registry checks them all (-1 and 1000
    are refused, not read as greedy)."""
    ss = st.session_state
    t = ss.get("s_temperature", 0.0)
    t = 0.0 if t is None else whole(t)
    if method not in SAMPLING_METHODS or t == 0:
        return {}
    return {"temperature": t, "top_k": whole(ss.s_top_k), "top_p": float(ss.s_top_p), "sample_seed": whole(ss.s_seed)}


def method_params(method: str) -> dict:
    """The sidebar's settings for ``method``: exactly its registry parameters, plus sampling (as
    typed: resolve_params checks them)."""
    ss = st.session_state
    out = {}
    for prm in REGISTRY[method].params:
        v = ss[widget_key(method, prm.name)]
        out[prm.name] = str(v) if prm.is_choice else bool(v) if prm.is_bool else whole(v)
    return out | sampling_params(method)
