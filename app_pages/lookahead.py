"""Lookahead page: the window / candidates animation, the n-gram pool, the attention mask."""

import streamlit as st

from app_pages.common import ui
from viz import lookahead, sampling

st.title("Lookahead decoding")
st.markdown("Each step feeds the current token, a 2D window of guesses (N-1 levels × W columns) and up to G "
            "candidate n-grams from the pool, in one forward pass. The window's columns become n-grams in the "
            "pool; candidates that match the model's own predictions are accepted. Press **Play**.")
t = ui.trace_for("lookahead")
if t is not None:
    steps = lookahead.lookahead_steps(t)
    if not steps:
        st.warning("This trace has no lookahead steps: recording was off, or the run ended at the prefill's token "
                   "(Max new tokens 1).")
        st.stop()
    page = ui.step_page(steps, key="la_page")
    views = {"positions (the paper's figure)": lookahead.position_animation, "compact (columns)": lookahead.step_animation}
    view = st.radio("Window view", list(views), key="la_view", horizontal=True,
                    help="Positions: x is the sequence position, so each harvested n-gram is a diagonal. Compact: "
                         "x is the window column (level l of column j sits at position t+1+l+j).")
    ui.chart(views[view], t, page, key="la_anim")
    st.markdown(lookahead.pool_sources_sentence(t))
    with st.expander("What W, N and G change, in this run's numbers"):
        st.markdown(lookahead.wng_text(t))  # numbers only, no model text
        ui.chart(lookahead.g_figure, t, key="la_g")
    ui.budget_section(t, "la")
    if t.sampled:
        st.subheader("Sampling: the verification decisions")
        st.markdown("Under sampling a candidate token t is accepted with probability p(t). A rejected token's p is "
                    "set to 0 and the rest renormalised before the next candidate that shares the accepted prefix "
                    "is tried; when none is left, a token is drawn from what remains. This keeps the text "
                    "distributed exactly as AR sampling. The window still moves by the model's argmax.")
        ui.chart(sampling.decisions_figure, t, page, key="la_sampling")
    st.subheader("One step, everything at once")
    st.markdown("One step control for the window (the position view: each column's n-gram is a diagonal), the "
                "pool's n-grams for the current token, which of them were verified as candidates, and the "
                "attention mask this step really used, labelled with the tokens it fed.")
    si = ui.step_picker("Step", steps, key="la_step", start=lookahead.telling_step(t))
    ui.chart(lookahead.position_still, t, si, key="la_still")
    left, right = st.columns([2, 3])
    with left:
        ui.chart(lookahead.pool_entries_figure, t, si, key="la_entries")
    with right:
        ui.chart(lookahead.step_mask_figure, t, si, key="la_step_mask")
    with st.expander("The whole pool before this step (every key)"):
        rows = lookahead.pool_rows(t, si)
        st.caption(f"{len(rows)} n-grams under {len({r['key id'] for r in rows})} keys (oldest first per key); "
                   "the graph: each key token with its continuations, the current token's in black.")
        ui.chart(lookahead.pool_graph_still, t, si, key="la_pool_graph")
        st.dataframe(rows, hide_index=True, height=360)
    with st.expander("The mask for any W, N and number of candidates"):
        W, N, G = (t.params[k] for k in ("W", "N", "G"))  # as the run had them (defaults filled in on loading)
        c1, c2 = st.columns(2)
        levels = c1.slider("Window levels (fewer while the window fills)", 1, max(N - 1, 1), max(N - 1, 1),
                           key="la_levels") if N > 2 else 1
        cands = c2.slider("Candidates verified this step", 0, max(G, 1), min(G, 2), key="la_cands")
        ui.chart(lookahead.mask_figure, W, N, cands, levels, key="la_mask")
