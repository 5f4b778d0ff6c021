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
from viz.style import METHOD_NAMES, esc

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


def step_picker(label: str, steps: list[int], key: str, start: int | None = None) -> int:
    """One step of ``steps`` for a whole section: a slider with -1 / +1 buttons beside it; opens on
    ``start`` (a step of ``steps``; default the first)."""
    ss = st.session_state
    if ss.get(key) not in steps:
        ss[key] = start if start in steps else steps[0]

    def move(d: int) -> None:
        ss[key] = steps[max(0, min(len(steps) - 1, steps.index(ss[key]) + d))]

    back, slider, fwd = st.columns([1, 12, 1], vertical_alignment="bottom")
    back.button("◀", key=f"{key}_back", on_click=move, args=(-1,), disabled=ss[key] == steps[0], help="-1 step")
    slider.select_slider(label, options=steps, key=key)
    fwd.button("▶", key=f"{key}_next", on_click=move, args=(1,), disabled=ss[key] == steps[-1], help="+1 step")
    return ss[key]


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
               f"{' (' + md(params) + ')' if params else ''} · {md(t.device)}, {md(t.kernel)} kernel{', compiled step' if t.step == 'compiled' else ''}"
               f" · {len(t.output_ids)} tokens in {t.n_steps} steps "
               f"({t.tokens_per_step:.2f} tokens/step) · stop: {md(t.stop_reason or '?')}")
    st.caption(f"Prompt{' (chat)' if t.chat else ''}: {md(short)}")


# Projector mode (the Lecture): no sidebar, no page header, little padding: the slide fits the window.
PROJECTOR_CSS = """<style>
[data-testid="stSidebar"], [data-testid="stSidebarCollapsedControl"], header[data-testid="stHeader"] {display: none !important;}
[data-testid="stMainBlockContainer"] {padding-top: 0.8rem !important; padding-bottom: 0.2rem !important;
  max-width: 100% !important;}
</style>"""

# Keys for the Lecture, installed once per browser tab in the page itself (not in the component's
# iframe, which Streamlit replaces): PageDown / space / down arrow press Next, PageUp / up arrow
# Back (what presenters' clickers send; left and right arrows are the buttons' own shortcuts), and
# the auto-advance timer. Keys typed into a field are left alone.
_LECTURE_KEYS = """
(() => {
  const btn = (k) => document.querySelector('.st-key-' + k + ' button');
  const click = (k) => { const b = btn(k); if (b && !b.disabled) { b.click(); return true; } return false; };
  const typing = (e) => { const t = e.target; return t && (t.isContentEditable || /^(INPUT|TEXTAREA|SELECT)$/.test(t.tagName)); };
  const NEXT = ['PageDown', ' ', 'ArrowDown'], BACK = ['PageUp', 'ArrowUp'];
  let space = false;
  document.addEventListener('keydown', (e) => {
    if (typing(e) || !btn('lecture_next')) return;
    const k = NEXT.includes(e.key) ? 'lecture_next' : BACK.includes(e.key) ? 'lecture_back' : null;
    if (!k) return;
    e.preventDefault(); e.stopPropagation();
    space = e.key === ' ';
    if (!e.repeat) click(k);
  }, true);
  document.addEventListener('keyup', (e) => { if (e.key === ' ' && space) { e.preventDefault(); space = false; } }, true);
  setInterval(() => {
    const s = window.__pdlLecture || {};
    if (s.every > 0 && btn('lecture_next') && Date.now() - s.since >= s.every) { s.since = Date.now(); click('lecture_next'); }
  }, 200);
})();
"""


def legend_html(items: list[dict], title: str = "") -> str:
    """A figure's legend (viz.style.legend_items) as HTML swatches, for beside the figure."""
    rows = []
    for it in items:
        hollow = "open" in it["symbol"]
        fill = "transparent" if hollow else it["fill"]
        edge = it["fill"] if hollow else it["line"]
        rows.append(f'<div style="display:flex;align-items:center;gap:0.5rem;margin:0.1rem 0">'
                    f'<span style="display:inline-block;width:1rem;height:1rem;flex:none;background:{fill};'
                    f'border:{max(1, min(int(it["width"]), 3))}px solid {edge}"></span>{esc(it["label"])}</div>')
    head = f'<div style="font-weight:600">{esc(title)}</div>' if title else ""
    return f'<div data-testid="lecture-legend" style="font-size:0.95rem;line-height:1.35">{head}{"".join(rows)}</div>'


def lecture_keys(every_s: float, slide: int) -> None:
    """Keyboard and clicker stepping for the Lecture, and auto-advance every ``every_s`` seconds
    (0: off); ``slide`` restarts the timer when the step changes."""
    import json

    box = st.container(key="lecture_keys")  # hidden: the script needs no room on the slide
    box.markdown("<style>.st-key-lecture_keys {display: none !important}</style>", unsafe_allow_html=True)
    box.iframe(f"""<style>html, body {{margin: 0; height: 0; overflow: hidden}}</style><script>
const w = window.parent;
w.__pdlLecture = {{every: {int(every_s * 1000)}, since: Date.now(), slide: {int(slide)}}};
if (!w.__pdlLectureKeys) {{
  w.__pdlLectureKeys = true;
  const s = w.document.createElement('script');
  s.textContent = {json.dumps(_LECTURE_KEYS)};
  w.document.head.appendChild(s);
}}
</script>""", height=1, alt="keyboard and clicker steps for the lecture")


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


def figure(builder, *args, **kw):
    """Build a figure; a trace the builder cannot draw gets a message instead of a traceback (None)."""
    try:
        return builder(*args, **kw)
    except Exception as e:  # noqa: BLE001 - an uploaded trace may be valid JSON yet inconsistent
        st.error(f"Cannot draw this view from the trace: {type(e).__name__}: {md(str(e))}")
        return None


def chart(builder, *args, key: str | None = None, **kw) -> None:
    """Draw a figure (``figure``: a message where the builder fails)."""
    fig = figure(builder, *args, **kw)
    if fig is not None:
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
