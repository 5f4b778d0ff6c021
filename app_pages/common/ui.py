"""What a page uses: the session's traces, the asset paths, and the page helpers (pickers, the
caption of a trace, a chart that survives an inconsistent trace, the budget section).

The rest of common/: keys.py (the sidebar's session keys and run settings), sidebar.py (the
shared controls and the check Run makes), models.py (the shared model and its lock), runs.py
(decodes started from the app), session.py (set up first in every script run), live.py (stoppable
decodes), state.py (what a session keeps), demo.py (the public-demo switch), text.py (user text).
"""

from __future__ import annotations

import streamlit as st

from decoding.trace import Trace
from viz.style import METHOD_NAMES

from .assets import (ASSETS, CLLM_ASSETS, EXAMPLE_SOURCE, ROOT, SHIPPED_ADAPTER, SHIPPED_ADAPTER_NAME,  # noqa: F401
                     example_traces)  # (the pages' imports)
from .session import put_trace, results  # noqa: F401 (the pages' imports)
from .text import md

UPLOAD_CAP_MB = 20


def pick(label: str, options: dict[str, object], key: str):
    """A selectbox over display labels (AppTest-friendly: no format_func); returns the value."""
    choice = st.selectbox(label, list(options), key=key)
    return options.get(choice, next(iter(options.values())))


def pick_trace(label: str, methods: list[str], key: str) -> str:
    """A picker over this session's traces of ``methods``, in the order given (the first is the
    default); a trace put since its last drawing (a run, an upload) opens it on the first again,
    not on an older choice."""
    res, ss = results(), st.session_state
    if ss.get(f"{key}_puts") != res.puts:
        ss.pop(key, None)
        ss[f"{key}_puts"] = res.puts
    return pick(label, {f"{METHOD_NAMES.get(m, m)} · {res.sources.get(m, '')}": m for m in methods}, key=key)


# the pages that show a method's trace, besides Compare (every method) and Explain (all but AR)
METHOD_PAGES = {"jacobi": ("Jacobi", "Lecture"), "lookahead": ("Lookahead", "Lecture"), "tr": ("Token Recycling",)}


def pages_showing(method: str) -> str:
    """'The Lookahead, Lecture, Compare and Explain pages': where a trace of ``method`` is shown."""
    pages = [*METHOD_PAGES.get(method, ()), "Compare", *(("Explain",) if method != "ar" else ())]
    return "The " + (f"{', '.join(pages[:-1])} and {pages[-1]} pages" if len(pages) > 1 else f"{pages[0]} page")


def step_page(steps: list[int], key: str) -> int:
    """Which page of an animation's steps to show (viz.style.pages): a picker when there are several."""
    from viz import style

    spans = style.pages(len(steps))
    if len(spans) < 2:
        return 0
    return pick("Steps", {f"steps {steps[a]}–{steps[b - 1]}": i for i, (a, b) in enumerate(spans)}, key=key)


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


def caption(t: Trace, source: str, fallback_note: bool = True) -> None:
    """What the page shows: source, model, method, counts, prompt. A page that falls back on the
    shipped example (a new session: also after a reload, which keeps no runs) says so in a box
    (``fallback_note``; off where the visitor picked the example)."""
    if fallback_note and source.startswith(EXAMPLE_SOURCE):
        st.info(f"Showing the example trace ({md(source[len(EXAMPLE_SOURCE):].strip(' ()'))}): this session has no "
                f"{md(METHOD_NAMES.get(t.method, t.method))} run of its own (a reload starts a new session, and runs "
                "are not kept). Run one from the sidebar, or upload a trace on the Traces page.")
    prompt = t.prompt_text or "".join(t.prompt_pieces)
    short = prompt if len(prompt) <= 160 else prompt[:157] + "…"
    params = ", ".join(f"{k}={v}" for k, v in t.params.items())
    st.caption(f"Showing: {md(source)} · {md(t.model_id)} · {md(METHOD_NAMES.get(t.method, t.method))}"
               f"{' (' + md(params) + ')' if params else ''} · {md(t.device)}, {md(t.kernel)} kernel"
               f" · {len(t.output_ids)} tokens in {t.n_steps} steps "
               f"({t.tokens_per_step:.2f} tokens/step) · stop: {md(t.stop_reason or '?')}")
    st.caption(f"Prompt{' (chat)' if t.chat else ''}: {md(short)}")


def load_now() -> str:
    """The machine's load average now, against its cores (os.getloadavg; a trace carries none)."""
    import os

    try:
        one, _, _ = os.getloadavg()
    except (OSError, AttributeError):
        return "This machine's load average is not available here."
    cores = os.cpu_count() or 1
    state = "busy" if one > cores else "quiet" if one < 0.5 * cores else "partly busy"
    return (f"This machine now: load average {one:.1f} on {cores} cores ({state}). A live run just made here ran "
            "under about this load; a shipped or uploaded trace ran elsewhere.")


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
