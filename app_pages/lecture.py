"""Lecture page: a guided walkthrough of Jacobi or lookahead decoding on any trace: the one just run
from the sidebar, an uploaded one, or the shipped example."""

import streamlit as st

from app_pages.common import ui
from decoding import analysis
from viz import lecture

st.title("Lecture")
ss = st.session_state
kinds = {"Jacobi decoding": "jacobi", "Lookahead decoding": "lookahead"}
sources = ("Current trace (the sidebar's last run or an upload)", "Shipped example")
c1, c2, c3 = st.columns([2, 2, 1])
with c1:
    method = kinds[st.radio("Walkthrough", list(kinds), key="lecture_kind", horizontal=True)]
with c2:
    source = st.radio("Trace", sources, key="lecture_source", horizontal=True)
with c3:
    large = st.toggle("Large type (projector)", key="lecture_large")
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


b1, b2, b3 = st.columns([1, 1, 4])
b1.button("◀ Back", key="lecture_back", on_click=move, args=(-1,), disabled=i == 0, width="stretch")
b2.button("Next ▶", key="lecture_next", on_click=move, args=(1,), disabled=i == len(steps) - 1, width="stretch",
          type="primary")
b3.progress((i + 1) / len(steps), text=f"Step {i + 1} of {len(steps)}")
step = steps[i]
size = "1.7rem" if large else "1.15rem"
st.markdown(f'<div data-testid="lecture-text" style="font-size:{size};line-height:1.5;margin:0.4rem 0 0.8rem 0">'
            f'<div style="font-weight:700;font-size:1.25em">{step.title}</div>{step.text}</div>', unsafe_allow_html=True)
ui.chart(lecture.lecture_figure, t, step, large, key="lecture_fig")
st.caption("The dashed black frame marks what the narration talks about.")
ui.caption(t, where, fallback_note=source == sources[0])
