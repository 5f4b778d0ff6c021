"""Decodes started from the app: the sidebar's runs (streamed), the CLLM page's pair decode, and
Explain's step-cost measurement; all three through one scaffold, ``LockedDecode``.

The model is shared by all sessions (models.py); a lock lets one decode use it at a time, the
others wait with a message. Every decode is stoppable within one step and keeps its partial trace
(live.py says how, and why session state is not touched while decoding).
"""

from __future__ import annotations

import time
from collections.abc import Callable

import streamlit as st

from viz.style import GREEN, METHOD_NAMES, esc, text_colour

from . import live, models
from .keys import method_params
from .session import results
from .sidebar import inputs_ok
from .state import CllmPair, CurveFound
from .text import md


class LockedDecode:
    """The one scaffold of a decode from the app: registered in this session as a ``live.LiveRun``
    (so that the next script run can stop it and wait for it), holding the shared model lock while
    it works, and storing what it made in code that makes no st.* call (live.py).

        with LockedDecode(runs) as dec:       # registers; marks the decode done on the way out
            dec.hold(waiting, work, keep)     # waits for the lock, work(); keep() in a finally
    """

    def __init__(self, runs: list):
        self.res, self.lock = results(), models.model_lock()  # plain objects, taken before decoding
        self.live = live.start(st.session_state, runs)

    def __enter__(self) -> LockedDecode:
        return self

    def __exit__(self, *exc) -> None:
        self.live.done.set()

    def hold(self, waiting: Callable[[], None], work: Callable[[], None], keep: Callable[[], None] | None = None) -> bool:
        """Wait for the model lock (``waiting()`` draws the message; it may raise Streamlit's stop),
        ``work()`` holding it, then ``keep()`` in any case (no st.* call and no session state in it).
        False when the decode was stopped before it got the lock."""
        try:
            with live.model_held(self.lock, self.live, waiting) as held:
                if held:
                    work()
            return held
        finally:
            if keep is not None:
                keep()


# ---- the sidebar's runs ----------------------------------------------------------------------------
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
            lm = models.loaded_model(name)
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
    with LockedDecode([r for _, r in runs]) as dec:
        for method, run in runs:
            if dec.live.stopped:
                break
            stream(run, lm, ids, method, dec)


def stream(run, lm, ids: list[int], method: str, dec: LockedDecode) -> None:
    """Decode ``run`` holding the model lock, drawing each committed chunk; store its trace, also a
    partial one when the run is stopped."""
    box = st.container(border=True)
    how = f"sampling at temperature {run.params['temperature']:g}" if run.params.get("temperature") else "greedy"
    step = " · compiled step" if getattr(lm, "compiled", None) is not None else ""
    box.markdown(f"**{METHOD_NAMES[method]}** ({how}) · {md(lm.model_id)} on {md(str(lm.device))}{step}")
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

    def compiling(message: str) -> None:  # the compiled step builds a graph (decoding.compiled): minutes, said
        prog.progress(min(1.0, len(run.output) / run.max_new_tokens), text=message + "…")

    def keep() -> None:  # also when Stop, a page click or any widget stopped this script run
        if stepper is not None:
            stepper.progress = None
        trace = run.trace
        if trace.output_ids:
            dec.res.put(trace, live.stopped_source(trace))
            if trace.stop_reason == "stopped":
                dec.live.kept.append(f"{METHOD_NAMES[method]} after {live.tokens(len(trace.output_ids))}")

    stepper = getattr(lm, "compiled", None)
    if stepper is not None:  # one decode holds the model at a time (the lock): this run's bar hears it
        stepper.progress = compiling
    dec.hold(waiting, lambda: live.drive([run], dec.live, on_step), keep)
    if not chunks and run.output:  # only the prefill's token (max_new_tokens 1, or EOS at once)
        out.markdown(chunks_html([("".join(lm.pieces(list(run.output), ids)), len(run.output))]), unsafe_allow_html=True)
    trace = run.trace
    built = f"; {trace.compile_seconds:.0f} s compiling the decode step, not counted" if trace.compile_seconds else ""
    prog.progress(1.0, text=f"done: {len(trace.output_ids)} tokens in {trace.n_steps} steps "
                            f"({trace.tokens_per_step:.2f} tokens/step, {trace.seconds:.1f} s{built})")


# ---- the CLLM page's pair -------------------------------------------------------------------------
def decode_pair(folder: str) -> None:
    """The CLLM page's decode: the sidebar's prompt with Jacobi by the sidebar's model and by the
    CLLM in ``folder``, side by side (one step each in turn), stoppable; stores a CllmPair."""
    from decoding.model import ModelError
    from decoding.loop import ConfigError, Run

    ss = st.session_state
    if not inputs_ok(["jacobi"]):
        return
    folder = models.canonical(folder)
    if models.model_refused(folder):
        st.error(models.model_refused(folder))
        return
    base_name = str(ss.model_name).strip()
    try:
        with st.spinner("Loading the base model and the CLLM (once per server)…"):
            lms = [models.get_model(base_name), models.get_model(folder)]
        ids = lms[0].encode(ss.prompt, chat=bool(ss.chat))
        runs = [Run(lm, ids, "jacobi", {"n": int(ss.p_n), "seed": int(ss.p_seed)}, int(ss.max_new_tokens),
                    prompt_text=ss.prompt, chat=bool(ss.chat)) for lm in lms]
    except (ModelError, ConfigError, ValueError) as e:
        st.error(f"Cannot run: {md(str(e))}")
        return
    with LockedDecode(runs) as dec:
        bars = [st.progress(0.0, text=f"{who}: waiting for the model…") for who in ("Base", "CLLM")]

        def waiting() -> None:
            bars[0].progress(0.0, text="another session is decoding; waiting for it to finish…")

        def on_step(i: int, step) -> None:
            r = runs[i]
            bars[i].progress(min(1.0, len(r.output) / r.max_new_tokens),
                             text=f"{('Base', 'CLLM')[i]}: {len(r.output)} tokens · {len(r.trace.steps)} Jacobi iterations")

        def keep() -> None:
            a, b = runs[0].trace, runs[1].trace
            if a.output_ids and b.output_ids:
                cut = [t for t in (a, b) if t.stop_reason in ("stopped", "")]
                what = (f"stopped after {len(a.output_ids)} / {len(b.output_ids)} tokens" if cut else "finished")
                dec.res.cllm = CllmPair(a, b, f"live run ({what}, {time.strftime('%H:%M:%S')})", folder)
                if cut:
                    dec.live.kept.append(f"the CLLM page's decode after {len(a.output_ids)} / {len(b.output_ids)} tokens")

        dec.hold(waiting, lambda: live.drive(runs, dec.live, on_step), keep)
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
    from decoding.perf.costs import curve_kernel
    from decoding.perf.measure import load_or_measure

    name = str(st.session_state.model_name).strip()
    if models.model_refused(name):
        st.error(models.model_refused(name))
        return
    with st.spinner(f"Loading {name or 'the bundled model'}…"):
        lm = models.loaded_model(name)
    if (lm.model_id, str(lm.device), str(lm.dtype), curve_kernel(lm)) != tuple(expected):
        st.warning(f"The sidebar's model is {md(lm.model_id)} on {md(str(lm.device))}; this trace was made with "
                   f"{md(made_with)}. Measuring the sidebar's model.")
    bar = st.progress(0.0, text="measuring the step cost…")
    with LockedDecode([]) as dec:

        def work() -> None:
            c = load_or_measure(lm, progress=lambda f, m: bar.progress(min(f, 1.0), text=m), force=True)
            dec.res.curves[(c.model_id, c.device, c.dtype, c.kernel)] = CurveFound(c, "measured on this machine just now")

        if not dec.hold(lambda: bar.progress(0.0, text="another session is decoding; waiting…"), work):
            return
    bar.empty()
