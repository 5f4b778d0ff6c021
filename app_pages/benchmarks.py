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

DRAFTERS = ui.ASSETS / "bench_drafters_cpu.json"
try:
    drafters = json.loads(DRAFTERS.read_text(encoding="utf-8"))
except (OSError, ValueError):
    drafters = None
if drafters is not None:
    st.subheader("The drafters side by side, and the edit workload")
    st.markdown("Suffix drafting (a suffix trie over prompt + output: earlier matches of the text's end and what "
                "followed them, "
                "a draft sized by the match) against prompt lookup, Token Recycling and lookahead, with fixed and "
                "cost-aware (`:auto`) budgets, on one Spec-Bench prompt per category and on the edit workload "
                "(`edit_code`, `edit_doc`: the same file rewritten with one small change per turn, the prompt carrying "
                "it; benchmarks/edits). The edit workload is where a drafter that copies long spans should win.")
    dsrc = drafters["source"]
    st.caption(" · ".join(esc(f"{k}: {dsrc[k]}") for k in ("model", "date", "machine", "prompts", "settings") if k in dsrc))
    ui.chart(bench.tokens_per_step_figure, drafters, key="bench_drafters_tps")
    ui.chart(bench.speedup_figure, drafters, key="bench_drafters_speedup")
    with st.expander("How these numbers were made"):
        st.markdown(esc(dsrc.get("command", "")))

st.subheader("The scaling law (lookahead paper)")
st.markdown("The lookahead paper shows the steps compression growing with the window width W for each n-gram size "
            "N, and with the FLOPs spent per step (log scale). The same grid on the lab's model, with the paper's "
            "pool (window n-grams only) and G = W; the dotted lines are what a step of that size costs on this "
            "hardware (the measured step-cost curve): the extra FLOPs pay where tokens per step is above them.")
try:
    grid = json.loads((ui.ASSETS / "scaling_cpu.json").read_text(encoding="utf-8"))
except (OSError, ValueError):
    grid = None
if grid is None:
    st.info("No scaling grid measured yet. It takes about 20 lookahead settings × the prompts; make it with "
            "`python scripts/scaling_grid.py --prompts ../shared/benchmarks/spec_bench/question.jsonl --per-category 1 "
            "--chat --max-new-tokens 64 --out assets/scaling_cpu.json` (any model with --model, any device with --device).")
else:
    from decoding.perf.costs import CostCurve
    from viz import scaling

    try:
        curve = CostCurve.load(ui.ASSETS / "cost_curve_cpu.json")
    except (OSError, ValueError):
        curve = None
    ui.chart(scaling.by_window_figure, grid, key="bench_scaling_w")
    ui.chart(scaling.by_flops_figure, grid, curve, key="bench_scaling_flops")
    st.markdown(scaling.law_sentence(grid))  # numbers and our own words only: no model text
    st.markdown(esc(scaling.pays_sentence(grid, curve)))
    st.caption(esc(f"{grid['model']} on {grid['device']} · {len(grid['prompts'])} prompts, {grid['max_new_tokens']} new "
                   f"tokens · measured {grid['measured_at']} in {grid['seconds']} s (load {grid['load_avg']}) · "
                   f"{grid['command']}"))
