"""Shared Streamlit pieces: session state, the sidebar, the shared model, streamed runs.

Results live in ``st.session_state.results`` (state.Results: method -> Trace and what it is), so
moving a widget re-renders from stored traces and never re-runs the model. The model is loaded
once per process (``st.cache_resource``) and shared by all sessions; a lock lets one decode use it
at a time, the others wait with a message. Decoding state (the KV cache, the pool) lives in the
Run, never in the cache. Every decode is stoppable within one step and keeps its partial trace
(live.py says how, and why session state is not touched while decoding).
"""

from __future__ import annotations

import threading
import time
from pathlib import Path

import streamlit as st

from decoding.trace import Trace
from decoding.methods import METHODS as REGISTRY_METHODS
from decoding.methods import REGISTRY
from decoding.methods import SAMPLING_METHODS as REGISTRY_SAMPLING
from viz.style import GREEN, METHOD_NAMES, esc, text_colour
from app_pages.common.presets import preset_buttons

from . import live
from .demo import model_refused as _model_refused
from .demo import public_demo
from .text import md
from .state import CllmPair, CurveFound, Results, keep_settings  # noqa: F401 (CurveFound: the pages' import)

ROOT = Path(__file__).resolve().parents[2]
ASSETS = ROOT / "assets"
METHODS = REGISTRY_METHODS  # every method of the registry (decoding/methods/)
APP_MAX_NEW_TOKENS = 512  # the app's cap (the core allows more from the CLI)
UPLOAD_CAP_MB = 20
CLLM_ASSETS = ASSETS / "cllm"
SHIPPED_ADAPTER = CLLM_ASSETS / "adapter"

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


# ---- example traces and session state -----------------------------------------------------------
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


def settings_defaults() -> dict:
    """The sidebar's widget keys and their first values."""
    first = next(iter(EXAMPLE_PROMPTS))
    return {"model_name": "", "example": first, "prompt": EXAMPLE_PROMPTS[first][0],
            "chat": EXAMPLE_PROMPTS[first][1], "method_label": METHOD_NAMES["lookahead"], "max_new_tokens": 64,
            **{key: prm.default for _, prm, key, _ in param_widgets()},
            "s_temperature": 0.0, "s_top_k": 0, "s_top_p": 1.0, "s_seed": 0}


def init_state() -> None:
    """First thing in every script run: the session's Results, the sidebar's settings carried
    over (state.keep_settings), and a decode this session left running stopped and stored
    (live.settle)."""
    ss = st.session_state
    if "results" not in ss:
        res = Results()
        for m, t in example_traces().items():
            res.put(t, f"example trace (assets/example_{m}.json)")
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


# ---- the sidebar ------------------------------------------------------------------------------------
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
        st.number_input("Max new tokens", key="max_new_tokens", step=1,
                        help=f"1 to {APP_MAX_NEW_TOKENS} in the app")
        shared_param_widgets()
        sampling_controls(method)
        st.markdown("### Model")
        st.text_input("Model", key="model_name", placeholder="bundled SmolLM2-135M-Instruct",
                      help="Empty: the bundled offline model. Or a Hugging Face model id already in the local "
                           "cache" + (" (a public demo: nothing else)." if public_demo() else ", or a local model folder."))
        if not public_demo():  # server paths and devices: not for a public demo's visitors
            with st.expander("Advanced: split the model (accelerate)"):
                st.text_input("Device map", key="device_map", placeholder="whole model on one device",
                              help="auto, balanced, sequential, or a JSON {module: device} (0, cuda:1, cpu, disk): "
                                   "layers over several GPUs, the CPU and disk. Same tokens as unsplit.")
                st.text_input("Max memory", key="max_memory", placeholder="0=70GiB,1=70GiB,cpu=200GiB")
                st.text_input("Offload folder", key="offload_folder", help="where layers mapped to disk are kept")
        c1, c2 = st.columns(2)
        run = c1.button("Run", type="primary", key="run_button", width="stretch")
        c2.button("Stop", key="stop_button", width="stretch", help="ends a run after its current step")
    return run


SAMPLING_METHODS = REGISTRY_SAMPLING


def sampling_controls(method: str) -> None:
    """Temperature, top-k, top-p and the sampling seed; disabled for the greedy-only methods (Jacobi)."""
    greedy_only = method not in SAMPLING_METHODS
    with st.expander("Sampling: temperature, top-k, top-p", expanded=float(st.session_state.s_temperature) > 0):
        if greedy_only:
            st.caption(f"{METHOD_NAMES[method]} decodes greedily only: sampling is not an exact method for it. "
                       f"These settings apply to {', '.join(METHOD_NAMES[m] for m in SAMPLING_METHODS)}.")
        st.number_input("Temperature (0 = greedy)", min_value=0.0, max_value=5.0, step=0.1, key="s_temperature",
                        disabled=greedy_only,
                        help="Above 0 the method samples. Lookahead and prompt lookup accept a candidate token t "
                             "with probability p(t); their output is distributed exactly as AR sampling.")
        off = greedy_only or float(st.session_state.s_temperature) <= 0
        st.number_input("Top-k (0 = off)", min_value=0, max_value=100_000, key="s_top_k", disabled=off)
        st.slider("Top-p (1 = off)", min_value=0.05, max_value=1.0, step=0.05, key="s_top_p", disabled=off)
        st.number_input("Sampling seed", min_value=0, max_value=2**31 - 1, key="s_seed", disabled=off,
                        help="The same seed gives the same text again.")


def sampling_params(method: str) -> dict:
    """The sidebar's sampling settings as params for ``method`` (empty: greedy)."""
    ss = st.session_state
    t = float(ss.get("s_temperature", 0.0) or 0.0)
    if method not in SAMPLING_METHODS or t <= 0:
        return {}
    return {"temperature": t, "top_k": int(ss.s_top_k), "top_p": float(ss.s_top_p), "sample_seed": int(ss.s_seed)}


def selected_method() -> str:
    label = st.session_state.get("method_label")
    return next((m for m in METHODS if METHOD_NAMES[m] == label), "lookahead")


def pick(label: str, options: dict[str, object], key: str):
    """A selectbox over display labels (AppTest-friendly: no format_func); returns the value."""
    choice = st.selectbox(label, list(options), key=key)
    return options.get(choice, next(iter(options.values())))


def step_page(steps: list[int], key: str) -> int:
    """Which page of an animation's steps to show (viz.style.pages): a picker when there are several."""
    from viz import style

    spans = style.pages(len(steps))
    if len(spans) < 2:
        return 0
    return pick("Steps", {f"steps {steps[a]}–{steps[b - 1]}": i for i, (a, b) in enumerate(spans)}, key=key)


def method_params(method: str) -> dict:
    """The sidebar's settings for ``method``: exactly its registry parameters, plus sampling."""
    ss = st.session_state
    out = {}
    for prm in REGISTRY[method].params:
        v = ss[widget_key(method, prm.name)]
        out[prm.name] = str(v) if prm.is_choice else bool(v) if prm.is_bool else int(v)
    return out | sampling_params(method)


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


def _widget(prm, label: str, key: str) -> None:
    if prm.is_choice:
        st.selectbox(label, list(prm.choices), key=key, help=prm.help)
    elif prm.is_bool:
        st.checkbox(label, key=key, help=prm.help)
    else:
        st.number_input(label, key=key, step=1,  # no browser bounds: Run checks (check_inputs)
                        help=f"{prm.help} ({prm.lo} to {prm.hi}; default {prm.default})")


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


# ---- the model and runs ----------------------------------------------------------------------------
def model_refused(name: str) -> str | None:
    """Why a public demo (PDL_PUBLIC_DEMO=1) refuses this model or CLLM folder (None: allowed)."""
    return _model_refused(name, also=(str(SHIPPED_ADAPTER),))


@st.cache_resource(show_spinner=False, max_entries=2)
def get_model(name: str, device_map: str = "", max_memory: str = "", offload_folder: str = ""):
    """One LoadedModel per name (and split) per process, shared by all sessions (read-only: weights only)."""
    from decoding.model import load_model

    split = {"device_map": device_map, "max_memory": max_memory, "offload_folder": offload_folder} if device_map else {}
    return load_model(name or None, **split)


def model_split() -> tuple[str, str, str]:
    """The model field's advanced options: device map, max memory, offload folder (accelerate)."""
    ss = st.session_state
    return tuple(str(ss.get(k, "") or "").strip() for k in ("device_map", "max_memory", "offload_folder"))


def loaded_model(name: str):
    """get_model with the sidebar's split, if one is set (plain get_model(name) otherwise)."""
    split = model_split()
    return get_model(name, *split) if split[0] else get_model(name)


@st.cache_resource(show_spinner=False)
def model_lock() -> threading.Lock:
    return threading.Lock()


def check_inputs(methods: list[str] | None = None) -> list[str]:
    """Problems with the sidebar's settings for ``methods`` (default: the selected one), each as one
    sentence (empty: fine). The number fields have no bounds in the browser, so that what a
    visitor typed is what Run checks here (a bounded field kept showing an out-of-range number
    while Run used the last valid one)."""
    from decoding.methods import ConfigError, resolve_params

    ss = st.session_state
    errs = []
    if not str(ss.prompt).strip():
        errs.append("The prompt is empty: type one or pick an example.")
    mnt = ss.max_new_tokens
    if isinstance(mnt, bool) or not isinstance(mnt, int) or not 1 <= mnt <= APP_MAX_NEW_TOKENS:
        errs.append(f"Max new tokens must be between 1 and {APP_MAX_NEW_TOKENS}, not {md(str(mnt))}.")
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


def chunks_html(chunks: list[tuple[str, int]]) -> str:
    """Committed chunks as they landed (the first: the prefill's token): a multi-token step is one
    highlighted chunk."""
    out = []
    for i, (text, n) in enumerate(chunks):
        bg = GREEN if n > 1 and i else ("#EEEEEE" if i % 2 else "#DDDDDD")
        what = f"step {i}: {n} token(s)" if i else "prefill: the first token"
        out.append(f'<span title="{what}" style="background:{bg};color:{text_colour(bg)};'
                   f'border-radius:3px;padding:0 1px;white-space:pre-wrap">{esc(text)}</span>')
    return '<div style="font-family:monospace;font-size:15px;line-height:1.8">' + "".join(out) + "</div>"


def run_methods(methods: list[str]) -> None:
    """Decode the sidebar's prompt with each method, streaming committed chunks; store the traces."""
    from decoding.model import ModelError
    from decoding.loop import ConfigError, Run

    ss = st.session_state
    if not inputs_ok(methods):
        return
    name = str(ss.model_name).strip()
    try:
        with st.spinner(f"Loading {name or 'the bundled model'} (once per server)…"):
            lm = loaded_model(name)
        ids = lm.encode(ss.prompt, chat=bool(ss.chat))
    except (ModelError, ValueError) as e:
        st.error(f"Cannot run: {md(str(e))}")
        return
    runs = []
    for method in methods:
        try:
            runs.append((method, Run(lm, ids, method, method_params(method), int(ss.max_new_tokens),
                                     prompt_text=ss.prompt, chat=bool(ss.chat))))
        except (ConfigError, ValueError) as e:
            st.error(f"{METHOD_NAMES[method]}: {md(str(e))}")
    if not runs:
        return
    res, lock = results(), model_lock()  # plain objects, taken before decoding (live.py)
    lv = live.start(ss, [r for _, r in runs])
    try:
        for method, run in runs:
            if lv.stopped:
                break
            stream(run, lm, ids, method, lv, lock, res)
    finally:
        lv.done.set()


def stream(run, lm, ids: list[int], method: str, lv: live.LiveRun, lock: threading.Lock, res: Results) -> None:
    """Decode ``run`` holding the model lock, drawing each committed chunk; store its trace, also a
    partial one when the run is stopped (no st.* call and no session state in the finally)."""
    box = st.container(border=True)
    how = f"sampling at temperature {run.params['temperature']:g}" if run.params.get("temperature") else "greedy"
    box.markdown(f"**{METHOD_NAMES[method]}** ({how}) · {md(lm.model_id)} on {md(str(lm.device))}")
    prog = box.progress(0.0, text="waiting for the model…")
    out = box.empty()
    chunks: list[tuple[str, int]] = []
    done: list[int] = []
    t0 = time.perf_counter()

    def waiting() -> None:
        prog.progress(0.0, text="another session is decoding; waiting for it to finish…")

    def on_step(_: int, step) -> None:
        nonlocal done
        if not chunks:  # the prefill's token came with the first step
            done = list(run.output[: len(run.output) - len(step.tokens)])
            chunks.append(("".join(lm.pieces(done, ids)), len(done)))
        chunks.append(("".join(lm.pieces(step.tokens, ids + done)), len(step.tokens)))
        done += step.tokens
        out.markdown(chunks_html(chunks), unsafe_allow_html=True)
        n = len(done)
        prog.progress(min(1.0, n / run.max_new_tokens),
                      text=f"{n} tokens · {len(chunks) - 1} steps · {n / max(time.perf_counter() - t0, 1e-9):.1f} tokens/s")

    try:
        with live.model_held(lock, lv, waiting) as held:
            if held:
                live.drive([run], lv, on_step)
    finally:  # also when Stop, a page click or any widget stopped this script run: keep what was decoded
        trace = run.trace
        if trace.output_ids:
            res.put(trace, live.stopped_source(trace))
            if trace.stop_reason == "stopped":
                lv.kept.append(f"{METHOD_NAMES[method]} after {live.tokens(len(trace.output_ids))}")
    if not chunks and run.output:  # only the prefill's token (max_new_tokens 1, or EOS at once)
        out.markdown(chunks_html([("".join(lm.pieces(list(run.output), ids)), len(run.output))]), unsafe_allow_html=True)
    prog.progress(1.0, text=f"done: {len(trace.output_ids)} tokens in {trace.n_steps} steps "
                            f"({trace.tokens_per_step:.2f} tokens/step, {trace.seconds:.1f} s)")


def decode_pair(folder: str) -> None:
    """The CLLM page's decode: the sidebar's prompt with Jacobi by the sidebar's model and by the
    CLLM in ``folder``, side by side (one step each in turn), stoppable; stores a CllmPair."""
    from decoding.model import ModelError
    from decoding.loop import ConfigError, Run

    ss = st.session_state
    if not inputs_ok(["jacobi"]):
        return
    if model_refused(folder):
        st.error(model_refused(folder))
        return
    base_name = str(ss.model_name).strip()
    try:
        with st.spinner("Loading the base model and the CLLM (once per server)…"):
            lms = [get_model(base_name), get_model(folder)]
        ids = lms[0].encode(ss.prompt, chat=bool(ss.chat))
        runs = [Run(lm, ids, "jacobi", {"n": int(ss.p_n), "seed": int(ss.p_seed)}, int(ss.max_new_tokens),
                    prompt_text=ss.prompt, chat=bool(ss.chat)) for lm in lms]
    except (ModelError, ConfigError, ValueError) as e:
        st.error(f"Cannot run: {md(str(e))}")
        return
    res, lock = results(), model_lock()
    lv = live.start(ss, runs)
    bars = [st.progress(0.0, text=f"{who}: waiting for the model…") for who in ("Base", "CLLM")]

    def waiting() -> None:
        bars[0].progress(0.0, text="another session is decoding; waiting for it to finish…")

    def on_step(i: int, step) -> None:
        r = runs[i]
        bars[i].progress(min(1.0, len(r.output) / r.max_new_tokens),
                         text=f"{('Base', 'CLLM')[i]}: {len(r.output)} tokens · {len(r.trace.steps)} Jacobi iterations")

    try:
        with live.model_held(lock, lv, waiting) as held:
            if held:
                live.drive(runs, lv, on_step)
    finally:  # no st.* call and no session state here (live.py)
        a, b = runs[0].trace, runs[1].trace
        if a.output_ids and b.output_ids:
            cut = [t for t in (a, b) if t.stop_reason in ("stopped", "")]
            what = (f"stopped after {len(a.output_ids)} / {len(b.output_ids)} tokens" if cut else "finished")
            res.cllm = CllmPair(a, b, f"live run ({what}, {time.strftime('%H:%M:%S')})", folder)
            if cut:
                lv.kept.append(f"the CLLM page's decode after {len(a.output_ids)} / {len(b.output_ids)} tokens")
        lv.done.set()
    for bar in bars:
        bar.empty()


# ---- the step-cost curve (Explain) ------------------------------------------------------------------
def cost_curve(model_id: str, device: str, dtype: str, kernel: str = "stock", shipped: tuple = ()) -> CurveFound | None:
    """The step-cost curve of a model on a device (this session's, the cache folder's or a shipped
    one; looked up once per session)."""
    from decoding.perf import costs

    curves = results().curves
    key = (model_id, device, dtype, kernel)
    if key not in curves:
        found = costs.find_curve(model_id, device, dtype, shipped, kernel)
        curves[key] = CurveFound(*found) if found is not None else None
    return curves[key]


def measure_cost_curve(expected: tuple[str, str, str, str], made_with: str) -> None:
    """Measure the sidebar's model's step-cost curve now (holding the model lock) and keep it for
    this session; says so when the sidebar's model is not the one ``expected``."""
    from decoding.perf.measure import load_or_measure

    name = str(st.session_state.model_name).strip()
    if model_refused(name):
        st.error(model_refused(name))
        return
    with st.spinner(f"Loading {name or 'the bundled model'}…"):
        lm = loaded_model(name)
    if (lm.model_id, str(lm.device), str(lm.dtype), getattr(lm, "kernel", "stock")) != tuple(expected):
        st.warning(f"The sidebar's model is {md(lm.model_id)} on {md(str(lm.device))}; this trace was made with "
                   f"{md(made_with)}. Measuring the sidebar's model.")
    bar = st.progress(0.0, text="measuring the step cost…")
    curves, lock = results().curves, model_lock()
    lv = live.start(st.session_state, [])
    try:
        with live.model_held(lock, lv, lambda: bar.progress(0.0, text="another session is decoding; waiting…")) as held:
            if not held:
                return
            c = load_or_measure(lm, progress=lambda f, m: bar.progress(min(f, 1.0), text=m), force=True)
        curves[(c.model_id, c.device, c.dtype, c.kernel)] = CurveFound(c, "measured on this machine just now")
    finally:
        lv.done.set()
    bar.empty()


# ---- page helpers ----------------------------------------------------------------------------------
def trace_for(method: str) -> Trace | None:
    """The trace a page shows for ``method``, with a caption saying which one it is."""
    res = results()
    t = res.traces.get(method)
    if t is None:
        st.info(f"No {METHOD_NAMES[method]} trace yet: choose {METHOD_NAMES[method]} in the sidebar and press Run, "
                "or upload a trace on the Traces page.")
        return None
    caption(t, res.sources.get(method, ""))
    return t


def caption(t: Trace, source: str) -> None:
    prompt = t.prompt_text or "".join(t.prompt_pieces)
    short = prompt if len(prompt) <= 160 else prompt[:157] + "…"
    params = ", ".join(f"{k}={v}" for k, v in t.params.items())
    st.caption(f"Showing: {md(source)} · {md(t.model_id)} · {md(METHOD_NAMES.get(t.method, t.method))}"
               f"{' (' + md(params) + ')' if params else ''} · {len(t.output_ids)} tokens in {t.n_steps} steps "
               f"({t.tokens_per_step:.2f} tokens/step) · stop: {md(t.stop_reason or '?')}")
    st.caption(f"Prompt{' (chat)' if t.chat else ''}: {md(short)}")


def chart(builder, *args, key: str | None = None, **kw) -> None:
    """Draw a figure; a trace the builder cannot draw gets a message instead of a traceback."""
    try:
        fig = builder(*args, **kw)
    except Exception as e:  # noqa: BLE001 - an uploaded trace may be valid JSON yet inconsistent
        st.error(f"Cannot draw this view from the trace: {type(e).__name__}: {md(str(e))}")
        return
    st.plotly_chart(fig, theme=None, key=key, config={"displaylogo": False})


def budget_section(t: Trace, key: str) -> None:
    """The cost-aware budget's decisions of a budget=auto run (nothing for a fixed-budget run)."""
    from viz import budget

    if budget.summary(t) is None:
        return
    st.subheader("The step budget: what each step chose to feed")
    st.markdown(budget.sentence(t))
    ui_steps = [s.index for s in budget.budget_steps(t)]
    chart(budget.decisions_figure, t, key=f"{key}_budget")
    si = st.select_slider("Choices weighed at step", options=ui_steps, key=f"{key}_budget_step")
    chart(budget.options_figure, t, si, key=f"{key}_budget_options")
