"""Compare page: the methods side by side on one prompt."""

import streamlit as st

from app_pages.common import keys, models, runs, ui
from decoding.exactness import compare_to_ar, describe
from viz import compare, sampling
from viz.style import METHOD_NAMES

st.title("Compare methods")
st.markdown("The same prompt decoded by each method. Greedy decoding gives the same text every time; what changes "
            "is how many forward passes (steps) it takes and where each token came from.")
if st.button(f"Run all {len(keys.METHODS)} methods on the sidebar prompt", key="compare_run",
             help=", ".join(METHOD_NAMES[m] for m in keys.METHODS) + ", one after the other"):
    runs.run_methods(list(keys.METHODS))

res = ui.results()
traces = {}
latest = res.latest
for m in keys.METHODS:
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
ar_trace = next((t for t in traces.values() if t.method == "ar"), None)
agreements = {label: compare.ar_agreement(t, ar_trace) for label, t in traces.items() if t is not ar_trace}
for label, info in agreements.items():
    if info is None or info["first_divergence"] is None:
        continue
    t = traces[label]
    try:  # AR's logit gap at the divergence: one forward of the AR prefix, on the model these runs used
        lm = models.loaded_model(str(st.session_state.get("model_name", "")).strip())
        if lm.model_id == t.model_id and str(lm.dtype) == t.dtype:
            info = compare_to_ar(lm, t.prompt_ids, t.output_ids, ar_trace.output_ids, t.dtype)
    except Exception:  # a saved trace of a model not loaded here: the position without the gap
        pass
    st.caption(f"{label}: {describe(info)}. In {t.dtype}, a forward over several tokens does not give bit-identical "
               "logits to one-token forwards, so where AR's top two tokens are nearly tied a parallel method can "
               "take the other one; in float32 the tests find every method token for token equal to AR.")
if ar_trace is None:
    st.caption("No AR run of this prompt: no method here was compared with AR, so nothing is claimed exact.")
st.caption("Tokens/s and speedup are measured on the device named in the table. On a CPU every extra token fed "
           "costs real time; on a GPU extra tokens per forward are nearly free, so tokens/step tells more there.")
st.subheader("Where each token came from")
st.markdown(compare.provenance_legend_html(), unsafe_allow_html=True)
for label, t in traces.items():
    st.markdown(f"**{label}** · {t.tokens_per_step:.2f} tokens/step")
    st.markdown(compare.provenance_html(t, max_tokens=600), unsafe_allow_html=True)
ui.chart(compare.provenance_figure, traces, key="cmp_prov")
sampled = {label: t for label, t in traces.items() if t.sampled and t.method != "ar"}  # every method that samples verifies drafts
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
