"""The compiled decode step against the eager one, in one process (issue 21, item 2).

Per prompt and method, back to back (the order alternating from prompt to prompt): the method on
the eager step and on the compiled step (decoding/compiled.py), both on this machine's kernel
(``--kernel``, default auto), and transformers' greedy ``generate`` on a stock twin of the model
(the peer a user would run). The compiled graphs are built (or loaded from inductor's disk cache)
in an untimed pass over every prompt and method first; a timed run that still compiles is run again.

    python scripts/step_report.py --prompts ../shared/benchmarks/spec_bench/question.jsonl \
        --per-category 1 --chat --max-new-tokens 128 --methods ar,pld:auto,tr:auto,lookahead:auto,suffix:auto

Prints tokens/s per run and, per method, the median per-prompt ratio compiled / eager; the
speedup of each method over AR on the same step; our AR over ``generate``; and whether every
output is identical to ``generate``'s. Speed is a ratio of runs in this process: quote it with the
machine's load average, which it prints.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

from decoding.bench import generate_baseline, parse_methods, variant_params
from decoding.io import read_prompts
from decoding.kernels import KERNELS
from decoding.loop import decode
from decoding.model import load_model, with_step


def _run(lm, ids, method, params, max_new, step):
    saved = lm.compiled
    lm.compiled = saved if step == "compiled" else None
    try:
        return decode(lm, ids, method, params, max_new, record=False)
    finally:
        lm.compiled = saved


def _warm(lm, prompts, methods, params, max_new) -> float:
    """One untimed pass of every method on every prompt on the compiled step (and one eager run), so
    the graphs the steps use are compiled (or loaded from disk) before anything is timed."""
    t = time.perf_counter()
    _run(lm, prompts[0], "ar", {}, 16, "eager")
    for ids in prompts:
        for m in methods:
            _run(lm, ids, m.split(":")[0], params[m], max_new, "compiled")
    return time.perf_counter() - t


def _summary(methods, tps, same, n, gen):
    print(f"\n{n} prompts; identical to generate: {same} of {n * len(methods) * 2} runs")
    for m in methods:
        r = [c / e for e, c in zip(tps[(m, "eager")], tps[(m, "compiled")])]
        line = f"{m:<18} compiled / eager median {statistics.median(r):.3f} (min {min(r):.3f}, max {max(r):.3f})"
        if m != "ar":
            for step in ("eager", "compiled"):
                s = [x / a for x, a in zip(tps[(m, step)], tps[("ar", step)])]
                line += f"; vs AR {step} {statistics.median(s):.3f}"
        print(line)
    for step in ("eager", "compiled"):
        print(f"AR {step} / generate median {statistics.median([a / g for a, g in zip(tps[('ar', step)], gen)]):.3f}")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--prompts", required=True)
    ap.add_argument("--per-category", type=int, default=1)
    ap.add_argument("--chat", action="store_true")
    ap.add_argument("--max-new-tokens", type=int, default=128)
    ap.add_argument("--methods", default="ar,pld:auto,tr:auto,lookahead:auto,suffix:auto")
    ap.add_argument("--kernel", default="auto", choices=list(KERNELS))
    a = ap.parse_args(argv)
    methods = parse_methods(a.methods)
    if "ar" not in methods:
        methods.insert(0, "ar")
    lm = with_step(load_model(None, kernel=a.kernel, progress=print), "compiled", print)
    if lm.compiled is None:
        print("this machine cannot compile: nothing to compare")
        return 1
    stock = load_model(None, kernel="stock")
    params = {m: variant_params(m, {}) for m in methods}
    prompts = read_prompts(a.prompts, a.per_category)
    print(f"kernel {lm.kernel}; warming up (compiling) ...", flush=True)
    warm = _warm(lm, [lm.encode(r["prompt"], chat=a.chat) for r in prompts], methods, params, a.max_new_tokens)
    print(f"warm-up {warm:.0f} s, of which compiling {lm.compiled.compile_seconds:.0f} s "
          f"({len(lm.compiled.compiled)} graphs)", flush=True)
    tps: dict[tuple[str, str], list[float]] = {}
    gen_tps, same = [], 0
    for i, r in enumerate(prompts):
        ids = lm.encode(r["prompt"], chat=a.chat)
        gen, gen_s = generate_baseline(stock, ids, a.max_new_tokens)
        gen_tps.append(len(gen) / gen_s)
        cells = []
        for m in methods:
            for step in (("eager", "compiled") if i % 2 == 0 else ("compiled", "eager")):
                built = len(lm.compiled.compiled)
                t = _run(lm, ids, m.split(":")[0], params[m], a.max_new_tokens, step)
                if len(lm.compiled.compiled) > built:  # a size the warm-up did not use: compiled in this run
                    print(f"  ({m}: compiled a new graph in this run; not timed)")
                    t = _run(lm, ids, m.split(":")[0], params[m], a.max_new_tokens, step)
                tps.setdefault((m, step), []).append(t.tokens_per_s)
                same += t.output_ids == gen
            cells.append(f"{m} {tps[(m, 'eager')][-1]:.1f}/{tps[(m, 'compiled')][-1]:.1f}")
        print(f"{r['category'][:15]:<16} generate {gen_tps[-1]:.1f}  " + "  ".join(cells) + "  (tokens/s eager/compiled)", flush=True)
    _summary(methods, tps, same, len(prompts), gen_tps)
    if hasattr(os, "getloadavg"):
        print("load average after the run: %.2f %.2f %.2f" % os.getloadavg())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
