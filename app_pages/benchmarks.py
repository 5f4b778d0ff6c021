"""Benchmarks page: the papers' per-category tables on the lab's own numbers (a shipped Spec-Bench
run), beside the papers' published figures, marked as theirs."""

import json

import streamlit as st

from app_pages.common import ui
from viz import bench
from viz.style import esc

ASSET = ui.ASSETS / "bench_spec_bench_cpu.json"

st.title("Benchmarks")
st.markdown("Tokens per step and speedup over AR for every method, category by category, on Spec-Bench: the "
            "tables of the lookahead and CLLM papers, measured here on the lab's own model and machine. Tokens per "
            "step depends only on the model, the prompts and the settings; the speedup also on what a step costs on "
            "the hardware (see Explain).")
try:
    asset = json.loads(ASSET.read_text(encoding="utf-8"))
except (OSError, ValueError):
    st.info(f"No benchmark asset ({ASSET.name}): make one with scripts/bench_asset.py from a bench run.")
    st.stop()
src = asset["source"]
st.caption(" · ".join(esc(f"{k}: {src[k]}") for k in ("model", "date", "machine", "prompts", "settings") if k in src))
ui.chart(bench.tokens_per_step_figure, asset, key="bench_tps")
ui.chart(bench.speedup_figure, asset, key="bench_speedup")
st.subheader("Category by category")
st.dataframe([{k: "–" if v is None else f"{v:.2f}" if isinstance(v, float) else str(v) for k, v in r.items()}
              for r in bench.table_rows(asset)], hide_index=True)
st.markdown("\n".join(f"- {esc(bench.category_sentence(asset, c))}" for c in bench.categories(asset)))
st.subheader("What the papers report (not measured here)")
st.markdown("For orientation only: numbers published by the papers, on 7B models and an A100 GPU, where a "
            "forward over many tokens costs about as much as over one. They are not comparable with the CPU "
            "figures above.")
st.dataframe(bench.published_rows(), hide_index=True)
with st.expander("How these numbers were made"):
    st.markdown(esc(src.get("command", "")))
    st.markdown(esc(src.get("speedup", "")))
    st.markdown(esc(src.get("file", "")))
