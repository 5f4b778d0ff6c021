"""Explain page: why a run sped up (or did not) on this hardware.

The step-cost curve of the model on this device, the speedup account of the shown trace
(tokens/step, step cost, overhead, predicted vs measured), where the extra tokens came from, and
which settings should pay off here.
"""

import streamlit as st

from decoding.perf.costs import SHIPPED_CURVES, curve_kernel, flat_curve
from decoding.perf import tune
from decoding.perf.account import account, reasons
from decoding.perf.load import machine_load, why_they_part
from app_pages.common import runs, ui
from decoding.perf.shipped import prediction_lines, shipped_curves
from viz import compare, explain
from viz.style import METHOD_NAMES, esc

SHIPPED_TUNE = (ui.ASSETS / "tune_cpu.json",)

st.title("Explain")
st.markdown("Tokens per step alone does not make a run fast: a step that feeds many tokens costs more than a "
            "one-token AR step, by how much depends on the hardware. This page weighs the two.")
res = ui.results()


def example(m: str) -> bool:
    return res.sources.get(m, "").startswith("example")


# live runs and uploads first (latest first), then the examples with lookahead first
shown = sorted((m for m in res.order if m in res.traces and m != "ar"),
               key=lambda m: (example(m), example(m) and m != "lookahead", -res.order.index(m)))
if not shown:
    st.info(f"No {', '.join(METHOD_NAMES[m] for m in METHOD_NAMES if m != 'ar')} trace yet: run one from the sidebar.")
    st.stop()
t = res.traces[ui.pick_trace("Trace to explain", shown, key="explain_trace")]
ui.caption(t, res.sources.get(t.method, ""))
ar = res.traces.get("ar")
if ar is not None and (ar.prompt_ids != t.prompt_ids or ar.model_id != t.model_id or ar.device != t.device):
    ar = None

ui.budget_section(t, "explain")  # budget=auto: the decisions (no curve needed: the run calibrated its own)

# ---- the step-cost curve ------------------------------------------------------------------------------
key = (t.model_id, t.device, t.dtype, curve_kernel(t))  # "+compiled": the compiled step's own curve
found = runs.cost_curve(*key, shipped=tuple(SHIPPED_CURVES))  # the curves in assets/, matched by model, device, dtype, kernel


def measure() -> None:
    runs.measure_cost_curve(expected=key, made_with=f"{t.model_id} on {t.device}")


if found is None:
    st.warning(f"No step-cost curve for {ui.md(t.model_id)} on {ui.md(t.device)} ({ui.md(t.dtype)}) yet. Measuring it "
               "times one forward over 1 to 256 new tokens (about a minute on 2 CPU cores, once per model and device).")
    if st.button("Measure the step-cost curve", key="explain_measure", type="primary"):
        measure()
        st.rerun()
    st.stop()
curve, where = found.curve, found.where
if not t.steps:  # Max new tokens 1, or an end-of-sequence token at once: nothing to account for
    st.info(f"This run has no decoding steps: it ended at the prefill's token ({len(t.output_ids)} token, stop: "
            f"{ui.md(t.stop_reason or '?')}). Tokens per step, step cost and speedup need at least one step; "
            "run it with more new tokens.")
    st.subheader("What a step costs here")
    ui.chart(explain.cost_curve_figure, curve, [], f"{METHOD_NAMES[t.method]} steps", key="explain_curve")
    st.stop()
acc = account(t, curve, ar)

# ---- the account ------------------------------------------------------------------------------------
st.subheader("The account")
regimes = {"this machine (its measured step-cost curve)": None,
           "a GPU-like flat cost (any step up to 256 tokens costs one AR step)": flat_curve(curve)}
regimes.update({f"{s.gpu} with a {s.config} model (a step-cost curve measured there)": s.curve
                for s in shipped_curves(ui.ASSETS)})
priced = regimes[st.radio("Price this run's steps with", list(regimes), key="explain_regime", horizontal=True,
                          help="The same run (its tokens per step, what each step fed) at another hardware's step "
                               "costs: a what-if, no run was measured there.")]
if priced is not None:
    acc = account(t, priced, None)  # a prediction only: no measurement exists in that regime
    st.info(f"A what-if: this run's tokens per step and fed tokens priced at {ui.md(priced.regime)}. Nothing was "
            "measured there, so there is no measured speedup; this machine's Python overhead share is kept. "
            "Lookahead's W, N and G that lose here can pay in that regime (the paper's A100 figures).")
st.markdown(f'<div style="font-size:1.35rem;line-height:1.5"><b>{esc(METHOD_NAMES[t.method])}</b>: '
            f"{esc(acc.sentence())}</div>", unsafe_allow_html=True)
load, ar_load = machine_load(t, curve), (machine_load(ar, curve) if ar is not None and priced is None else None)
if acc.disagrees:
    st.warning(acc.warning(why_they_part(load, ar_load)))
for who, reading in (("This run", load), ("The AR run", ar_load)):
    if reading is not None and reading.busy:
        st.warning(f"**Machine load.** {who}: {ui.md(reading.sentence())}")
    elif reading is not None and who == "This run":
        st.caption(f"Machine load: {ui.md(reading.sentence())}")
st.caption(ui.load_now())
if ar is not None and ar.kernel != t.kernel:
    st.warning(f"This run used the {ui.md(t.kernel)} kernel and the AR run the {ui.md(ar.kernel)} kernel: the "
               "measured speedup compares two kernels as well as two methods (decoding/kernels.py).")
if ar is not None and ar.step != t.step:
    st.warning(f"This run used the {ui.md(t.step)} decode step and the AR run the {ui.md(ar.step)} one: the "
               "measured speedup compares two step implementations as well as two methods (decoding/compiled.py).")
if ar is None:
    st.caption("No AR trace of this prompt: run AR on the same prompt for the measured speedup.")
st.caption(f"Step costs: {ui.md(curve.model_id)} on {ui.md(curve.regime)}, {ui.md(where)}."
           + (f" The machine's load average was {curve.load_avg:.1f} while measuring." if curve.load_avg else ""))
left, right = st.columns([3, 2])
with left:
    ui.chart(explain.account_figure, acc, key="explain_account")
with right:
    st.dataframe(acc.rows(), hide_index=True)
for line in prediction_lines(t, shipped_curves(ui.ASSETS)):  # GPU curves shipped by scripts/gpu_check (none yet)
    st.info(line)

st.subheader("What a step costs here")
ui.chart(explain.cost_curve_figure, curve, [s.fed for s in t.steps], f"{METHOD_NAMES[t.method]} steps", key="explain_curve")
with st.expander("Measure the curve again (this model and device)"):
    st.caption("Measure on a quiet machine: other programs running on the same cores bend the curve.")
    if st.button("Measure again", key="explain_remeasure"):
        measure()
        st.rerun()

st.subheader("Where the extra tokens came from")
for r in reasons(t):
    st.markdown(f"- {ui.md(r)}")
ui.chart(compare.provenance_figure, {METHOD_NAMES[t.method]: t}, key="explain_prov")

# ---- tuning ---------------------------------------------------------------------------------------------
st.subheader("Settings for this hardware")
st.markdown("A setting pays off when its tokens per step beat the cost of its steps. **Break-even** is the tokens "
            "per step a setting needs just to match AR here.")
rows = tune.what_if(t, priced or curve, ar if priced is None else None)  # the regime chosen above
if rows:
    best = rows[0]
    st.markdown(f"Replaying this run's candidates with smaller N and G (same W): **{ui.md(best['setting'])}** "
                f"is predicted at {best['predicted speedup']:.2f}× AR "
                f"(this run's setting: {next(r['predicted speedup'] for r in rows if r['this run']):.2f}×).")
    ui.chart(explain.what_if_figure, rows, key="explain_whatif")
    st.dataframe(rows, hide_index=True)
    W, N, G = (int(t.params[k]) for k in ("W", "N", "G"))
    if W < 15 or N < 5 or G < 15:
        st.caption(f"A replay can only leave guesses out, so it reaches settings up to this run's (W = {W}, N = {N}, "
                   f"G = {G}). Run the paper's W = 15, N = 5, G = 15 (the sidebar's “Paper settings” preset) and this "
                   "table replays every N ≤ 5 and G ≤ 15 from it; the table below prices the paper's setting on this curve.")
# this run's share of step time outside the forward; a trace without forward times (all 0) says
# nothing about it: AR's share then
overhead = acc.overhead if acc.overhead < 1 else acc.ar_overhead if acc.ar_overhead < 1 else 0.0
st.dataframe(tune.break_even_rows(priced or curve, overhead), hide_index=True)
res = tune.find_tune_result(t.model_id, t.device, SHIPPED_TUNE)
if res is not None:
    d, src = res
    st.markdown(f"Measured by `python -m decoding tune` on {d['prompts']} prompts ({ui.md(src)}): recommended "
                + ", ".join(f"**{ui.md(v)}**" for v in d["recommended"].values()) + ".")
    st.dataframe([{k: r[k] for k in ("category", "setting", "default", "prompts", "tokens_per_step", "fed_per_step",
                                     "step_cost", "predicted", "measured")} for r in d["ranking"] if r["category"] == "ALL"],
                 hide_index=True)
else:
    st.caption("Run `python -m decoding tune --prompts FILE.jsonl --chat` to measure a grid of settings on your prompts.")
