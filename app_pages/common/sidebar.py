"""The shared sidebar: prompt, method and its registry parameters, sampling, model, Run / Stop; and
the check of its settings that Run makes before anything loads."""

from __future__ import annotations

import streamlit as st

from decoding.methods import REGISTRY
from viz.style import METHOD_NAMES

from .assets import gallery, gallery_trace
from .demo import public_demo
from .keys import (APP_MAX_NEW_TOKENS, EXAMPLE_PROMPTS, METHODS, SAMPLING_METHODS, method_params, param_widgets,
                   selected_method, whole, widget_key)
from .models import model_refused, model_split
from .presets import preset_buttons
from .text import md


def _use_example() -> None:
    prompt, chat = EXAMPLE_PROMPTS[st.session_state.example]
    st.session_state.prompt, st.session_state.chat = prompt, chat


def sidebar() -> bool:
    """Draw the shared controls; True when Run was pressed in this rerun."""
    with st.sidebar:
        st.markdown("### Prompt")
        st.selectbox("Example prompt", list(EXAMPLE_PROMPTS), key="example", on_change=_use_example)
        st.text_area("Prompt", key="prompt", height=150)
        st.checkbox("Chat mode (the model's chat template)", key="chat")
        st.markdown("### Method")
        preset_buttons()
        st.selectbox("Method", [METHOD_NAMES[m] for m in METHODS], key="method_label")
        method = selected_method()
        method_widgets(method)
        number_field("Max new tokens", "max_new_tokens", help=f"1 to {APP_MAX_NEW_TOKENS} in the app")
        shared_param_widgets()
        sampling_controls(method)
        st.markdown("### Model")
        st.text_input("Model", key="model_name", placeholder="bundled SmolLM2-135M-Instruct",
                      help="Empty: the bundled offline model. Or a Hugging Face model id already in the local "
                           "cache" + (" (a public demo: nothing else)." if public_demo() else ", or a local model folder."))
        if not public_demo():  # server paths, devices and minutes of compiling: not for a public demo's visitors
            step_control()
            with st.expander("Advanced: split the model (accelerate)"):
                st.text_input("Device map", key="device_map", placeholder="whole model on one device",
                              help="auto, balanced, sequential, or a JSON {module: device} (0, cuda:1, cpu, disk): "
                                   "layers over several GPUs, the CPU and disk. Same tokens as unsplit.")
                st.text_input("Max memory", key="max_memory", placeholder="0=70GiB,1=70GiB,cpu=200GiB")
                st.text_input("Offload folder", key="offload_folder", help="where layers mapped to disk are kept")
        c1, c2 = st.columns(2)
        run = c1.button("Run", type="primary", key="run_button", width="stretch")
        c2.button("Stop", key="stop_button", width="stretch", help="ends a run after its current step")
        gallery_picker()
    return run


STEP_LABELS = {"eager": "eager (PyTorch as written)", "compiled": "compiled (torch.compile)"}


def step_control() -> None:
    """The decode step: eager, or compiled over a static KV cache (decoding.compiled), and why a
    compiled step cannot run here or with a split model."""
    from decoding.compiled import compile_possible

    st.selectbox("Decode step", list(STEP_LABELS), key="decode_step", format_func=STEP_LABELS.get,
                 help="compiled: every decode step runs through torch.compile (inductor's C++ code) over a static "
                      "KV cache, about 1.2-1.3x faster on a CPU (docs/benchmarks.md). Its first run compiles each "
                      "graph it needs (a fed size over a cache length: tens of seconds each on a small CPU, kept on "
                      "disk for the next start); that time is shown and left out of the run's timings. "
                      "Same tokens as eager, up to float rounding.")
    if st.session_state.get("decode_step") != "compiled":
        return
    why = compile_possible()
    if why is not None:
        st.caption(f"Not on this machine ({md(why)}): runs use the eager step.")
    elif model_split()[0]:
        st.caption("Not with a split model (the device map below): runs use the eager step.")


def _show_gallery() -> None:
    from .session import put_trace

    ss = st.session_state
    entry = gallery()[ss.gallery_pick]
    t = gallery_trace(entry["file"])
    put_trace(t, f"what-if gallery: {ss.gallery_pick}")
    ss.gallery_note = (f"Showing {ss.gallery_pick} ({entry['tokens_per_step']:.2f} tokens/step) on the "
                       f"{METHOD_NAMES[t.method]}, Explain and Lecture pages.")


def gallery_picker() -> None:
    """The what-if gallery: pre-recorded runs (assets/gallery) shown at once, as an upload would be."""
    runs = gallery()
    if not runs:
        return
    with st.expander("What-if gallery: pre-recorded runs, instant"):
        st.selectbox("Prompt · setting", list(runs), key="gallery_pick",
                     help="The same two prompts under the settings a class asks about (the paper's W=15, N=5, G=15, "
                          "a small window, the budget, Jacobi n = 8 / 16 / 32), suffix drafting on an edit of a file, "
                          "and the CLLM page's base and CLLM traces of one problem, recorded by scripts/make_gallery.py: "
                          "no decoding, no wait.")
        st.button("Show it", key="gallery_show", on_click=_show_gallery, width="stretch")
        if st.session_state.get("gallery_note"):
            st.caption(st.session_state.gallery_note)


def sampling_controls(method: str) -> None:
    """Temperature, top-k, top-p and the sampling seed; disabled for the greedy-only methods (Jacobi)."""
    greedy_only = method not in SAMPLING_METHODS
    with st.expander("Sampling: temperature, top-k, top-p", expanded=st.session_state.s_temperature != 0):
        if greedy_only:
            st.caption(f"{METHOD_NAMES[method]} decodes greedily only: sampling is not an exact method for it. "
                       f"These settings apply to {', '.join(METHOD_NAMES[m] for m in SAMPLING_METHODS)}.")
        number_field("Temperature (0 = greedy)", "s_temperature", step=0.1, disabled=greedy_only,
                     help="0 to 100. Above 0 the method samples. Lookahead and prompt lookup accept a candidate "
                          "token t with probability p(t); their output is distributed exactly as AR sampling.")
        off = greedy_only or st.session_state.s_temperature == 0
        number_field("Top-k (0 = off)", "s_top_k", disabled=off, help="0 to 1000000")
        st.slider("Top-p (1 = off)", min_value=0.05, max_value=1.0, step=0.05, key="s_top_p", disabled=off)
        number_field("Sampling seed", "s_seed", disabled=off,
                     help="0 or more. The same seed gives the same text again.")


def number_field(label: str, key: str, help: str, step: float = 1.0, disabled: bool = False) -> None:
    """A number field with no bounds in the browser, so that any number typed reaches Run, which
    checks it with the registry's bounds (check_inputs) and refuses with a sentence. Float-typed
    because an integer field keeps the browser bounds +-2^53: 99999999999999999999 stayed in the
    field with a red mark while Run used the last valid value. '%g' shows the value Run gets."""
    st.number_input(label, key=key, step=step, format="%g", disabled=disabled, help=help)


def shown(v) -> str:
    """A number as the field shows it ('%g' in the browser: whole numbers in full up to 1e21)."""
    return f"{v:g}" if isinstance(v, float) and not (v.is_integer() and abs(v) < 1e21) else str(v)


def _widget(prm, label: str, key: str) -> None:
    if prm.is_choice:
        st.selectbox(label, list(prm.choices), key=key, help=prm.help)
    elif prm.is_bool:
        st.checkbox(label, key=key, help=prm.help)
    else:
        number_field(label, key, help=f"{prm.help} ({prm.lo} to {prm.hi}; default {prm.default})")


def method_widgets(method: str) -> None:
    """One expander per method with parameters, its widgets and bounds from the registry."""
    shared = {key for _, _, key, sh in param_widgets() if sh}
    for m, spec in REGISTRY.items():
        own = [prm for prm in spec.params if widget_key(m, prm.name) not in shared]
        if not own:
            continue
        with st.expander(f"{spec.label}: {', '.join(p.name for p in own if not (p.is_bool or p.is_choice))}", expanded=method == m):
            for prm in own:
                _widget(prm, prm.label or prm.name, widget_key(m, prm.name))


def shared_param_widgets() -> None:
    """Widgets of parameters several methods take (the seed of the initial guesses, the budget)."""
    for _, prm, key, sh in param_widgets():
        if sh:
            who = " / ".join(spec.label for spec in REGISTRY.values() if prm.name in spec.defaults)
            label = prm.label or prm.name.capitalize()
            _widget(prm, f"{label} ({who}: {prm.help})" if len(prm.help) < 40 else f"{label} ({who})", key)


def check_inputs(methods: list[str] | None = None) -> list[str]:
    """Problems with the sidebar's settings for ``methods`` (default: the selected one), each as one
    sentence (empty: fine). The number fields have no bounds in the browser (number_field), so
    that what a visitor typed is what Run checks here, with the registry's bounds."""
    from decoding.methods import ConfigError, resolve_params

    ss = st.session_state
    errs = []
    if not str(ss.prompt).strip():
        errs.append("The prompt is empty: type one or pick an example.")
    mnt = whole(ss.max_new_tokens)
    is_int = isinstance(mnt, int) and not isinstance(mnt, bool)
    if not is_int and not (isinstance(mnt, float) and mnt.is_integer()):
        errs.append(f"Max new tokens must be a whole number from 1 to {APP_MAX_NEW_TOKENS}, not {md(shown(mnt))}.")
    elif not is_int or not 1 <= mnt <= APP_MAX_NEW_TOKENS:
        errs.append(f"Max new tokens must be between 1 and {APP_MAX_NEW_TOKENS}, not {md(shown(mnt))}.")
    for m in methods or [selected_method()]:
        try:
            resolve_params(m, method_params(m))
        except ConfigError as e:
            errs.append(f"{METHOD_NAMES[m]}: {md(str(e))}.")
    err = model_refused(str(ss.model_name).strip())
    if err:
        errs.append(err)
    if public_demo() and any(model_split()):
        errs.append("This public demo loads models whole: device map, max memory and offload folder are off.")
    return errs


def inputs_ok(methods: list[str] | None = None) -> bool:
    """Show each problem of the sidebar's settings as an error; True when there is none."""
    errs = check_inputs(methods)
    for e in errs:
        st.error(e)
    return not errs
