"""Compare page: the methods side by side on one prompt."""

import streamlit as st

from app_pages.common import ui
from viz import compare, sampling
from viz.style import METHOD_NAMES

st.title("Compare methods")
st.markdown("The same prompt decoded by each method. Greedy decoding gives the same text every time; what changes "
            "is how many forward passes (steps) it takes and where each token came from.")
if st.button("Run all four methods on the sidebar prompt", key="compare_run"):
    ui.run_methods(list(ui.METHODS))

res = ui.results()
traces = {}
latest = res.latest
for m in ui.METHODS:
    t = res.traces.get(m)
    if t is not None and latest is not None and t.prompt_ids == latest.prompt_ids and t.model_id == latest.model_id:
        traces[METHOD_NAMES[m]] = t
if not traces:
    st.info("No runs yet: press the button above.")
    st.stop()
others = [METHOD_NAMES[m] for m in res.traces if METHOD_NAMES[m] not in traces]
if others:
    st.caption(f"Not shown (another prompt or model): {', '.join(others)}. Run all methods to compare them.")
ui.caption(latest, res.sources.get(latest.method, ""))
st.dataframe(compare.summary_rows(traces), hide_index=True)
st.caption("Tokens/s and speedup are measured on the device named in the table. On a CPU every extra token fed "
           "costs real time; on a GPU extra tokens per forward are nearly free, so tokens/step tells more there.")
st.subheader("Where each token came from")
st.markdown(compare.provenance_legend_html(), unsafe_allow_html=True)
for label, t in traces.items():
    st.markdown(f"**{label}** · {t.tokens_per_step:.2f} tokens/step")
    st.markdown(compare.provenance_html(t, max_tokens=600), unsafe_allow_html=True)
ui.chart(compare.provenance_figure, traces, key="cmp_prov")
sampled = {label: t for label, t in traces.items() if t.sampled and t.method in ("lookahead", "pld")}
if sampled:
    st.subheader("Sampling: the verification decisions")
    st.caption("Sampled runs draw different text, each distributed as AR sampling; Jacobi always decodes greedily. "
               "Each step's candidate tokens were accepted with probability p or rejected (p set to 0).")
    for tab, (label, t) in zip(st.tabs(list(sampled)), sampled.items()):
        with tab:
            ui.chart(sampling.decisions_figure, t, key=f"cmp_sampling_{t.method}")
left, right = st.columns(2)
with left:
    ui.chart(compare.accepted_histogram_figure, traces, key="cmp_hist")
with right:
    ui.chart(compare.committed_curve_figure, traces, key="cmp_curve")
