"""Jacobi page: one block's trajectory animated, the block as CLLM's figure, per-block counts."""

import streamlit as st

from decoding import analysis
from decoding.budget import is_auto
from app_pages.common import ui
from viz import jacobi, style

st.title("Jacobi decoding")
st.markdown("A block of n tokens (the current one and n − 1 guesses) is refined in parallel: each iteration feeds "
            "the block in one forward pass "
            "and replaces every guess with the model's prediction at the position before it. The longest prefix "
            "that stops changing is committed. Press **Play**.")
t = ui.trace_for("jacobi")
if t is not None:
    blocks = [b.index for b in t.blocks] or sorted({s.record.block for s in t.steps if s.record})
    if not blocks:
        st.warning("This trace has no Jacobi iterations: recording was off, or the run ended at the prefill's token "
                   "(Max new tokens 1).")
        st.stop()
    iters = {c["block"]: c["iterations"] for c in analysis.jacobi_counts(t)}  # as the counts figure
    block = ui.pick("Block", {f"block {b} · {iters.get(b, '?')} iterations": b for b in blocks}, key="jacobi_block")
    spans = style.pages(len(analysis.jacobi_iterations(t, block)) + 1)
    page = 0
    if len(spans) > 1:
        page = ui.pick("Iterations", {f"{a}–{b - 1}": i for i, (a, b) in enumerate(spans)}, key="jacobi_page")
    ui.chart(jacobi.block_animation, t, block, page, key="jacobi_anim")
    if is_auto(t.params):
        st.caption("Step budget auto: each iteration fed a window of the first unconverged guesses, its width "
                   "kept for a few steps and chosen by the tokens each width committed per step against its cost on "
                   "this machine (the step budget below). The Jacobi update refined the fed guesses and the next one; "
                   "the guesses past the window kept their values until the window slid over them.")
    st.caption(jacobi.HINDSIGHT)
    st.markdown(jacobi.DEFINITIONS)
    ui.chart(jacobi.block_figure, t, block, key="jacobi_block_fig")
    st.markdown(jacobi.counts_sentence(t))
    left, right = st.columns([3, 2])
    with left:
        ui.chart(jacobi.counts_figure, t, key="jacobi_counts")
    with right:
        st.markdown("**Per block: tokens, iterations, fast-forwarded and stationary tokens** (extra_committed: "
                    "tokens committed beyond one per iteration)")
        st.dataframe(analysis.jacobi_counts(t), hide_index=True)
    ui.budget_section(t, "jacobi")
