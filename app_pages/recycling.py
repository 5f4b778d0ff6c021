"""Token Recycling page: the draft tree of each step, the matrix rows that produced it."""

import streamlit as st

from app_pages.common import ui
from viz import recycling, sampling

st.title("Token Recycling")
st.markdown("Token Recycling (Luo et al., ACL 2025) keeps, for every token, the top-k tokens the model predicted "
            "after it the last time that token was fed: an adjacency matrix. Each step walks the matrix breadth-first "
            "from the current token into a draft tree of a fixed shape, verifies the whole tree in one forward "
            "(tree attention), and overwrites the row of every fed token with its new top-k, so the predictions "
            "of rejected branches become later drafts. Like lookahead it recycles the model's own guesses: "
            "lookahead keeps n-grams from a Jacobi window, Token Recycling top-k successor lists. Press **Play**.")
t = ui.trace_for("tr")
if t is not None:
    steps = recycling.recycling_steps(t)
    if not steps:
        st.warning("This trace has no Token Recycling steps: recording was off, or the run ended at the prefill's "
                   "token (Max new tokens 1).")
        st.stop()
    st.markdown(recycling.summary_sentence(t))
    page = ui.step_page(steps, key="tr_page")
    ui.chart(recycling.tree_animation, t, page, key="tr_tree")
    st.subheader("The matrix rows behind a step's tree")
    si = st.select_slider("Step", options=steps, key="tr_step")
    st.caption("One row per token the walk expanded (the current token first): its successors, best first, as the "
               "matrix held them before the step. A node's children are the first columns of its row.")
    ui.chart(recycling.matrix_figure, t, si, key="tr_matrix")
    ui.budget_section(t, "tr")
    if t.sampled:
        st.subheader("Sampling: the verification decisions")
        st.markdown("Under sampling each branch's token t is accepted with probability p(t); a rejected token's p is "
                    "set to 0 before the next sibling is tried, so the text is distributed exactly as AR sampling. "
                    "The matrix still learns each row's top-k logits.")
        ui.chart(sampling.decisions_figure, t, page, key="tr_sampling")
