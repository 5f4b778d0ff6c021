"""Lecture page: a guided walkthrough of Jacobi and lookahead decoding on the example traces."""

import streamlit as st

from app_pages.common import ui
from viz import lecture

st.title("Lecture")
ss = st.session_state
ex = ui.example_traces()
kinds = {"Jacobi decoding": "jacobi", "Lookahead decoding": "lookahead"}
c1, c2 = st.columns([2, 1])
with c1:
    method = kinds[st.radio("Walkthrough", list(kinds), key="lecture_kind", horizontal=True)]
with c2:
    large = st.toggle("Large type (projector)", key="lecture_large")
t = ex.get(method)
steps = lecture.lecture(t) if t is not None else []
if not steps:
    st.info("The example trace for this walkthrough is missing (assets/).")
    st.stop()
pos = ss.setdefault("lecture_pos", {})
i = min(pos.get(method, 0), len(steps) - 1)


def move(d: int) -> None:
    pos[method] = max(0, min(len(steps) - 1, i + d))


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
st.caption("Example trace: " + ("the bundled SmolLM2-135M, greedy, on the prompt below. "
                                "The dashed black frame marks what the narration talks about."))
ui.caption(t, "example trace")
