"""Predicted vs measured speedup per method, from bench rows and a step-cost curve, as Markdown
for docs/benchmarks.md (section "Explain: predicted vs measured").

    python scripts/explain_report.py out/bench.jsonl [--curve assets/cost_curve_cpu.json] [--per-prompt]
    python scripts/explain_report.py out/tune.json   (the runs of `python -m decoding tune --out`)

For every (prompt, method) row with per-step fed counts and an AR row of the same prompt (same
recording setting), decoding.perf.account.account gives the predicted speedup (tokens/step over the
curve's step cost, with the row's own overhead outside the forward and the prefill) and the
measured one (tokens/s over AR's). Pure Python: no model is run.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics

from decoding.perf.account import DISAGREE, account
from decoding.perf.costs import CostCurve


def gmean(xs):
    xs = [x for x in xs if x and x > 0]
    return math.exp(sum(map(math.log, xs)) / len(xs)) if xs else None


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("bench")
    ap.add_argument("--curve", default="assets/cost_curve_cpu.json")
    ap.add_argument("--per-prompt", action="store_true", help="also print one line per (prompt, method)")
    a = ap.parse_args()
    curve = CostCurve.load(a.curve)
    text = open(a.bench, encoding="utf-8").read()
    if a.bench.endswith(".json"):  # `python -m decoding tune --out FILE.json`: its runs
        rows = [r | {"record": False} for r in json.loads(text)["runs"]]
    else:  # `python -m decoding bench --out FILE.jsonl`
        rows = [json.loads(line) for line in text.splitlines() if line.strip()]
    ar = {(r["id"], r.get("record", True)): r for r in rows if r["method"] == "ar"}
    accs: dict[str, list] = {}
    lines = []
    for r in rows:
        if r["method"] in ("ar", "generate") or r.get("fed") is None:
            continue
        base = ar.get((r["id"], r.get("record", True)))
        if base is None:
            continue
        acc = account(r, curve, base)
        key = r.get("setting") or r["method"]
        key += "" if r.get("record", True) else " (recording off)"
        accs.setdefault(key, []).append((r, acc))
        lines.append(f"| {r['id']} | {r['category']} | {key} | {acc.tokens_per_step:.2f} | {acc.step_cost:.2f} | "
                     f"{acc.measured_step_cost:.2f} | {acc.overhead:.0%} | {acc.best_prediction:.2f} | {acc.measured:.2f} | "
                     f"{acc.error:+.0%} |")
    print(f"Step costs: {curve.model_id} on {curve.regime}, measured {curve.measured_at}"
          f"{f' (load average {curve.load_avg:.1f})' if curve.load_avg else ''}; "
          f"c(k) = {', '.join(f'{k}: {v:.2f}' for k, v in zip(curve.ks, curve.relative()) if k in (2, 16, 32, 64, 128))}.\n")
    print("| method | prompts | tokens/step | step cost (curve) | step cost (measured) | overhead | AR overhead | "
          "predicted | measured | median error | within 15% |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for key in sorted(accs):
        xs = [acc for _, acc in accs[key]]
        within = sum(abs(acc.error) <= DISAGREE for acc in xs)
        pred, meas = gmean([x.best_prediction for x in xs]), gmean([x.measured for x in xs])
        print(f"| {key} | {len(xs)} | {statistics.mean(x.tokens_per_step for x in xs):.2f} | "
              f"{statistics.mean(x.step_cost for x in xs):.2f} | {statistics.mean(x.measured_step_cost for x in xs):.2f} | "
              f"{statistics.mean(x.overhead for x in xs):.0%} | {statistics.mean(x.ar_overhead for x in xs):.0%} | "
              f"{pred:.2f} | {meas:.2f} | {statistics.median(x.error for x in xs):+.0%} | {within}/{len(xs)} |")
    print("\n(predicted and measured: geometric means over prompts of the per-prompt speedup over AR; error = "
          "predicted / measured - 1 per prompt; step cost (measured) = forward seconds per step over AR's. "
          "budget=auto rows are predicted from the step costs the run calibrated online, not from the curve.)")
    if a.per_prompt:
        print("\n| id | category | method | tokens/step | step cost | measured step cost | overhead | predicted | measured | error |")
        print("|---|---|---|---:|---:|---:|---:|---:|---:|---:|")
        print("\n".join(lines))


if __name__ == "__main__":
    main()
