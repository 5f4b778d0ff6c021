"""Markdown tables for docs/benchmarks.md from `python -m decoding bench --out FILE.jsonl` rows.

    python scripts/bench_report.py out/bench.jsonl
"""

from __future__ import annotations

import json
import sys

from decoding.bench import exact_label, summarize
from decoding.exactness import format_share_table
from decoding.methods import REGISTRY


def fmt(v, spec: str) -> str:
    return "–" if v is None else format(v, spec)


def count(row: dict | None, n: int | None) -> str:
    """' (k)' when a method ran on fewer prompts than the row's AR count."""
    return "" if row is None or row.get("prompts") == n else f" ({row.get('prompts')})"


def main(path: str) -> None:
    rows = [json.loads(line) for line in open(path, encoding="utf-8") if line.strip()]
    table = [r for r in summarize(rows) if not r["method"].endswith("/norec")]
    order = ["ar", "generate", *REGISTRY]  # variants (lookahead:auto) right after their method
    methods = sorted({r["method"] for r in table}, key=lambda m: (order.index(m.split(":")[0]), m))
    cats = sorted({r["category"] for r in table if r["category"] != "ALL"}) + ["ALL"]
    by = {(r["method"], r["category"]): r for r in table}
    n = {c: by.get(("ar", c), {}).get("prompts") for c in cats}
    print("Tokens per step (compression ratio vs AR; '(k)': that method ran on k prompts only):\n")
    print("| category | prompts | " + " | ".join(methods) + " | lookahead / pld |")
    print("|---|---:|" + "---:|" * (len(methods) + 1))
    for c in cats:
        vals = [fmt(by.get((m, c), {}).get("tokens_per_step"), ".2f") + count(by.get((m, c)), n[c]) for m in methods]
        la, pl = by.get(("lookahead", c)), by.get(("pld", c))
        ratio = fmt(la["tokens_per_step"] / pl["tokens_per_step"], ".2f") if la and pl and pl["tokens_per_step"] else "–"
        print(f"| {c} | {n[c]} | " + " | ".join(vals) + f" | {ratio} |")
    print("\nTokens per second, and speedup (median per-prompt ratio of tokens/s) vs our AR and vs `model.generate`:\n")
    print("| method | prompts | tokens/s | vs ar | vs generate | exact (= AR output) |")
    print("|---|---:|---:|---:|---:|---|")
    for m in methods:
        r = by[(m, "ALL")]
        print(f"| {m} | {r['prompts']} | {r['tokens_per_s']:.2f} | {fmt(r['vs_ar'], '.3f')} | {fmt(r['vs_generate'], '.3f')} | {exact_label(r, '–')} |")
    print("\nAgreement with AR per method and dtype (greedy runs with an AR twin; the logit gap is AR's own "
          "token minus the method's token at the first divergence, from a forward of the AR prefix):\n")
    print(format_share_table(rows))
    over = [r for r in summarize(rows) if r["category"] == "ALL" and r["record_overhead"] is not None]
    if over:
        print("\nRecording overhead (median over prompts of time with recording on / off - 1):\n")
        print("| method | overhead |")
        print("|---|---:|")
        for r in over:
            print(f"| {r['method']} | {r['record_overhead']:+.1%} |")
    print("\nSpeedup vs AR per category (median per-prompt ratio of tokens/s):\n")
    print("| category | " + " | ".join(m for m in methods if m != "ar") + " |")
    print("|---|" + "---:|" * (len(methods) - 1))
    for c in cats:
        print(f"| {c} | " + " | ".join(fmt(by.get((m, c), {}).get("vs_ar"), ".2f") + count(by.get((m, c)), n[c])
                                      for m in methods if m != "ar") + " |")
    budget = budget_table(rows)
    if budget:
        print("\nCost-aware budgets: the guessing steps (cost as each run calibrated it):\n")
        print(budget)


def budget_table(rows: list[dict], target: float = 1.25) -> str:
    """For runs with a cost-aware budget (rows with step_costs): how often a step guessed, what a
    guessing step committed and cost (in AR steps, as the run calibrated it), and what a guessing
    step would have had to commit for ``target`` x AR at that cost and that share of guessing steps
    (plain steps: 1 token at cost 1; the loop's own overhead left out)."""
    by: dict[str, list[dict]] = {}
    for r in rows:
        if r.get("step_costs") and r.get("fed"):
            by.setdefault(r["method"], []).append(r)
    if not by:
        return ""
    out = [f"| method | runs | steps that guessed | tokens per guessing step | its cost (AR steps) | needed for {target}x |",
           "|---|---:|---:|---:|---:|---:|"]
    for m, rs in sorted(by.items()):
        plain = sum(f == 1 for r in rs for f in r["fed"])
        steps = sum(len(r["fed"]) for r in rs)
        guess = steps - plain
        tokens = sum(len(r["output_ids"]) - 1 for r in rs) - plain
        cost = sum(c for r in rs for f, c in zip(r["fed"], r["step_costs"]) if f > 1)
        if not guess:
            out.append(f"| {m} | {len(rs)} | 0 | – | – | – |")
            continue
        # (plain + guess * t) / (plain + cost_total) = target  ->  t
        need = (target * (plain + cost) - plain) / guess
        out.append(f"| {m} | {len(rs)} | {guess / steps:.0%} | {tokens / guess:.2f} | {cost / guess:.2f} | {need:.2f} |")
    return "\n".join(out)


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "out/bench.jsonl")
