"""Lecture page: a guided walkthrough of Jacobi or lookahead decoding on any trace: the one just run
from the sidebar, an uploaded one, or the shipped example.

Projector mode: the slide fits the window (1400x1000 and larger) without scrolling: no sidebar or
header, the narration beside the figure, cells sized to the screen. Both modes step with the
buttons, the keyboard or a presenter's clicker (ui.lecture_keys) and can advance on their own."""

import streamlit as st

from app_pages.common import ui
from decoding import analysis
from viz import lecture, style

ss = st.session_state
kinds = {"Jacobi decoding": "jacobi", "Lookahead decoding": "lookahead", "Suffix drafting": "suffix"}
sources = ("Current trace (the sidebar's last run or an upload)", "Shipped example")
SPEEDS = {"off": 0, "3 s": 3, "5 s": 5, "8 s": 8, "12 s": 12}  # auto-advance: seconds per slide
projector = bool(ss.get("lecture_large", False))


def setup() -> tuple[str, str]:
    method = kinds[st.radio("Walkthrough", list(kinds), key="lecture_kind", horizontal=True)]
    source = st.radio("Trace", sources, key="lecture_source", horizontal=True)
    return method, source


if projector:
    st.markdown(ui.PROJECTOR_CSS, unsafe_allow_html=True)
    top = st.columns([1, 1, 2.2, 1.5, 1, 1.5], vertical_alignment="center")
    with top[4].popover("Setup", width="stretch"):
        method, source = setup()
        where_block = st.container()
    with top[5]:
        st.toggle("Projector mode", key="lecture_large", help="Off: the sidebar and page header come back.")
    nav = top[:4]
else:
    st.title("Lecture")
    c1, c2, c3 = st.columns([2, 2, 1])
    with c1:
        method = kinds[st.radio("Walkthrough", list(kinds), key="lecture_kind", horizontal=True)]
    with c2:
        source = st.radio("Trace", sources, key="lecture_source", horizontal=True)
    with c3:
        st.toggle("Projector mode", key="lecture_large",
                  help="Fits the slide to a 1400x1000 or larger window: no sidebar, narration beside the figure.")
    where_block = st.container()
    nav = st.columns([1, 1, 2.2, 1.5])
if source == sources[0]:
    res = ui.results()
    t, where = res.traces.get(method), res.sources.get(method, "")
else:
    t, where = ui.example_traces().get(method), "example trace"
if t is None:
    st.info(f"No {method} trace yet: run it from the sidebar, upload one on the Traces page, or pick the example.")
    st.stop()
block = None
if method == "jacobi" and len(t.blocks) > 1:
    counts = {c["block"]: c for c in analysis.jacobi_counts(t)}
    best = lecture.pick_block(t)
    options = {f"block {b} · {c['fast_forwarded']} fast-forwarded, {c['stationary']} stationary"
               + (" (the most to talk about)" if b == best else ""): b for b, c in counts.items()}
    labels = sorted(options, key=lambda k: options[k] != best)  # the suggested block first
    with where_block:
        block = ui.pick("Block", {k: options[k] for k in labels}, key="lecture_block")
steps = lecture.jacobi_lecture(t, block) if method == "jacobi" else lecture.lecture(t)
if not steps:
    st.info("This trace has nothing to narrate (recording was off, or it has no steps).")
    st.stop()
pos = ss.setdefault("lecture_pos", {})
at = f"{method}:{source}:{block}:{id(t)}"  # a new trace or block starts from its first step
i = min(pos.get(at, 0), len(steps) - 1)


def move(d: int) -> None:
    pos[at] = max(0, min(len(steps) - 1, i + d))


nav[0].button("◀ Back", key="lecture_back", on_click=move, args=(-1,), disabled=i == 0, width="stretch",
              shortcut="Left", help="-1 step (also PageUp, ↑)")
nav[1].button("Next ▶", key="lecture_next", on_click=move, args=(1,), disabled=i == len(steps) - 1, width="stretch",
              type="primary", shortcut="Right", help="+1 step (also PageDown, ↓, space: a presenter's clicker)")
nav[2].progress((i + 1) / len(steps), text=f"Step {i + 1} of {len(steps)}")
speed = SPEEDS[nav[3].selectbox("Auto-advance", list(SPEEDS), key="lecture_speed", label_visibility="collapsed",
                                format_func=lambda s: "auto-advance: off" if s == "off" else f"auto-advance: {s} per step")]
step = steps[i]
text = (f'<div data-testid="lecture-text" style="font-size:{"1.4rem" if projector else "1.15rem"};line-height:1.45;'
        f'margin:0.2rem 0 0.6rem 0"><div style="font-weight:700;font-size:1.2em">{step.title}</div>{step.text}</div>')
if projector:
    left, right = st.columns([5, 8])
    fig = ui.figure(lecture.lecture_figure, t, step, True)  # its legend goes beside it: the height is the cells'
    with left:
        st.markdown(text, unsafe_allow_html=True)
        if fig is not None:
            title = fig.layout.legend.title.text if fig.layout.legend.title else ""
            st.markdown(ui.legend_html(style.legend_items(fig), title or ""), unsafe_allow_html=True)
        st.caption("Dashed black frame: what the narration talks about. Hover a cell for its whole token.")
        ui.caption(t, where, fallback_note=source == sources[0])
    if fig is not None:
        right.plotly_chart(fig, theme=None, key="lecture_fig", config={"displaylogo": False})
else:
    st.markdown(text, unsafe_allow_html=True)
    ui.chart(lecture.lecture_figure, t, step, False, key="lecture_fig")
    st.caption("The dashed black frame marks what the narration talks about; wine-red rings mark the cells that "
               "changed since the previous iteration. Keys: ← → (or PageUp / PageDown / space) step.")
    ui.caption(t, where, fallback_note=source == sources[0])
ui.lecture_keys(speed, i)
