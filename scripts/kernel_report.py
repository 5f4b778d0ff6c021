"""The skinny kernel against the stock one, in one process: per prompt, back to back, our AR loop
on the skinny kernel, our AR loop on the stock kernel (F.linear) and transformers' greedy
`generate` on the stock kernel (the peer a user would run), the same model loaded twice.

    python scripts/kernel_report.py --prompts ../shared/benchmarks/spec_bench/question.jsonl \
        --per-category 1 --chat --max-new-tokens 128

Prints tokens/s per run, the median per-prompt ratios, and whether the outputs are identical
(the kernels differ by float rounding only). Speed is a ratio of runs in this process: quote it
with the machine's load average, which it prints.
"""

from __future__ import annotations

import argparse
import os
import statistics

from decoding.bench import generate_baseline
from decoding.io import read_prompts
from decoding.loop import decode
from decoding.model import load_model


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--prompts", required=True)
    ap.add_argument("--per-category", type=int, default=1)
    ap.add_argument("--chat", action="store_true")
    ap.add_argument("--max-new-tokens", type=int, default=128)
    a = ap.parse_args(argv)
    skinny = load_model(None, kernel="skinny")
    stock = load_model(None, kernel="stock")
    prompts = read_prompts(a.prompts, a.per_category)
    ratios: dict[str, list[float]] = {"skinny AR / stock AR": [], "skinny AR / stock generate": [], "stock AR / stock generate": []}
    same = 0
    print(f"{'category':<16}{'skinny AR':>11}{'stock AR':>10}{'generate':>10}  tokens/s")
    for i, r in enumerate(prompts):
        ids = skinny.encode(r["prompt"], chat=a.chat)
        if i == 0:  # warm both models up (first-call allocations)
            decode(skinny, ids, "ar", {}, 8), decode(stock, ids, "ar", {}, 8)
        fast = decode(skinny, ids, "ar", {}, a.max_new_tokens, record=False)
        slow = decode(stock, ids, "ar", {}, a.max_new_tokens, record=False)
        gen, gen_s = generate_baseline(stock, ids, a.max_new_tokens)
        gen_tps = len(gen) / gen_s
        same += fast.output_ids == slow.output_ids == gen
        ratios["skinny AR / stock AR"].append(fast.tokens_per_s / slow.tokens_per_s)
        ratios["skinny AR / stock generate"].append(fast.tokens_per_s / gen_tps)
        ratios["stock AR / stock generate"].append(slow.tokens_per_s / gen_tps)
        print(f"{r['category'][:15]:<16}{fast.tokens_per_s:>11.1f}{slow.tokens_per_s:>10.1f}{gen_tps:>10.1f}", flush=True)
    print(f"\n{len(prompts)} prompts, {a.max_new_tokens} tokens at most; identical output on all three: {same} of {len(prompts)}")
    for k, v in ratios.items():
        print(f"{k:<28} median {statistics.median(v):.3f}  (min {min(v):.3f}, max {max(v):.3f})")
    if hasattr(os, "getloadavg"):
        print("load average after the run: %.2f %.2f %.2f" % os.getloadavg())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
