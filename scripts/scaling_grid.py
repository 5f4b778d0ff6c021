"""The lookahead paper's scaling law on the lab's model: tokens per step against the window width W
for each n-gram size N, and against the tokens fed per step (a FLOPs proxy), with the paper's pool
(window n-grams only: no prompt seeding, no output harvesting) and G = W as in the paper.

    python scripts/scaling_grid.py --prompts ../shared/benchmarks/spec_bench/question.jsonl \
        --per-category 1 --chat --max-new-tokens 64 --out assets/scaling_cpu.json

Any model (--model, default the bundled one) and device (--device). Tokens per step depends on the
model and the prompts, not on the machine; the step cost beside it in the app comes from the
measured step-cost curve of the hardware (scripts/measure_cost_curve.py).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path


PAPER_POOL = {"seed_pool_prompt": False, "harvest_output": False}


def grid_row(traces: list, W: int, N: int, G: int) -> dict:
    """One setting over its prompts: tokens/step pooled (tokens committed by steps / steps) and
    the mean tokens fed per step."""
    steps = sum(t.n_steps for t in traces)
    fed = [s.fed for t in traces for s in t.steps]
    return {"W": W, "N": N, "G": G, "prompts": len(traces), "steps": steps,
            "tokens_per_step": sum(t.step_tokens for t in traces) / steps if steps else 0.0,
            "fed_per_step": sum(fed) / len(fed) if fed else 0.0}


def run_grid(lm, prompts: list[list[int]], Ws: list[int], Ns: list[int], max_new_tokens: int, progress=print) -> list[dict]:
    from decoding.loop import decode

    rows = []
    for N in Ns:
        for W in Ws:
            params = {"W": W, "N": N, "G": W, **PAPER_POOL}
            traces = [decode(lm, ids, "lookahead", params, max_new_tokens, record=False) for ids in prompts]
            rows.append(grid_row(traces, W, N, W))
            progress(f"N={N} W={W}: {rows[-1]['tokens_per_step']:.3f} tokens/step, {rows[-1]['fed_per_step']:.1f} fed")
    return rows


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--prompts", required=True)
    ap.add_argument("--per-category", type=int, default=1)
    ap.add_argument("--chat", action="store_true")
    ap.add_argument("--max-new-tokens", type=int, default=64)
    ap.add_argument("--W", default="1,2,4,8,16")
    ap.add_argument("--N", default="2,3,4,5")
    ap.add_argument("--model", default=None)
    ap.add_argument("--device", default=None)
    ap.add_argument("--out", required=True)
    a = ap.parse_args(argv)
    from decoding.io import read_prompts
    from decoding.model import load_model

    t0 = time.perf_counter()
    lm = load_model(a.model, device=a.device)
    rows = read_prompts(a.prompts, per_category=a.per_category)
    prompts = [lm.encode(r["prompt"], chat=a.chat) for r in rows]
    grid = run_grid(lm, prompts, [int(x) for x in a.W.split(",")], [int(x) for x in a.N.split(",")], a.max_new_tokens)
    out = {"model": lm.model_id, "device": lm.device, "dtype": lm.dtype,
           "parameters": sum(p.numel() for p in lm.model.parameters()),
           "prompts": [r["id"] for r in rows], "chat": a.chat, "max_new_tokens": a.max_new_tokens, "pool": PAPER_POOL,
           "rows": grid, "seconds": round(time.perf_counter() - t0, 1),
           "load_avg": os.getloadavg()[0] if hasattr(os, "getloadavg") else None,
           "measured_at": time.strftime("%Y-%m-%d %H:%M"),
           "command": "python scripts/scaling_grid.py " + " ".join(sys.argv[1:] if argv is None else argv)}
    Path(a.out).write_text(json.dumps(out, indent=1) + "\n", encoding="utf-8")
    print(f"{len(grid)} settings -> {a.out} ({out['seconds']} s)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
