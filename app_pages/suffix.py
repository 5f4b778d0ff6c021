"""Suffix drafting page: each step's match in the text it came from, and the draft tree with its scores."""

import streamlit as st

from app_pages.common import ui
from viz import sampling, suffix

st.title("Suffix drafting")
st.markdown("Suffix drafting (SuffixDecoding, NeurIPS 2025; SAM-Decoding, ACL 2025) keeps every stretch of up to D "
            "tokens of prompt + output in a suffix trie, with how often it occurred. Each step finds the ends of the "
            "text that occurred before and drafts what followed them there, as a tree: the most frequent "
            "continuations first (a node's score is the product of count ratios along its path), at most alpha x the "
            "match length + offset tokens; it keeps the match whose draft promises the most accepted tokens (the sum "
            "of its scores), usually the longest. Under min_match tokens Token Recycling's matrix drafts too, in the "
            "same tree (SAM-Decoding's fallback). "
            "The tree is verified in one forward, like every draft here: greedy output stays AR's.")
t = ui.trace_for("suffix")
if t is not None:
    steps = suffix.suffix_steps(t)
    if not steps:
        st.warning("This trace has no suffix-drafting steps: recording was off, or the run ended at the prefill's "
                   "token (Max new tokens 1).")
        st.stop()
    st.markdown(suffix.summary_sentence(t))
    si = st.select_slider("Step (it opens on the step whose draft matched furthest)", options=steps,
                          value=suffix.best_step(t), key="suffix_step")
    st.markdown(suffix.match_sentence(t, si))
    st.markdown(suffix.match_html(t, si), unsafe_allow_html=True)  # model text escaped by match_html
    ui.chart(suffix.tree_figure, t, si, key="suffix_tree")
    ui.budget_section(t, "suffix")
    if t.sampled:
        st.subheader("Sampling: the verification decisions")
        st.markdown("Under sampling each branch's token t is accepted with probability p(t); a rejected token's p is "
                    "set to 0 before the next sibling is tried, so the text is distributed exactly as AR sampling.")
        ui.chart(sampling.decisions_figure, t, ui.step_page(steps, key="suffix_page"), key="suffix_sampling")
