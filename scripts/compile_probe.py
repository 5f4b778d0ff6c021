"""What a compiled decode step could gain on this machine (issue 21, item 2, the decision's data):
transformers' ``generate`` (greedy, the bundled model) per token, eager with the dynamic cache, eager
with a static cache, and with ``torch.compile`` (inductor's CPU code generation) over the static
cache, for the skinny and the stock linear kernels; plus the time to read the weights once. The
compiled runs' tokens are checked against the eager run's.

    python scripts/compile_probe.py [--kernels skinny,stock] [--mode default|max-autotune-no-cudagraphs]
                                    [--max-new-tokens 64]

Each kernel runs in its own process (a compiled forward replaces the model's); each figure is the
median of 5 generates. Run it on an idle machine: it prints the load average. The compile itself takes a minute on 2 cores (the first call).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time

PROMPT = "Write a Python function is_prime(n) that checks whether n is a prime number."


def one(kernel: str, mode: str, max_new_tokens: int) -> dict:
    import torch

    from decoding.kernels import weight_read_seconds
    from decoding.model import load_model

    lm = load_model(None, device="cpu", progress=lambda m: None, kernel=kernel)
    model = lm.model.eval()
    ids = torch.tensor([lm.encode(PROMPT, chat=True)])

    def gen(repeats: int = 5, **kw):
        """Median ms per token over ``repeats`` generates (one run is too noisy on a shared machine)."""
        times = []
        for _ in range(repeats):
            t = time.perf_counter()
            out = model.generate(ids, max_new_tokens=max_new_tokens, min_new_tokens=max_new_tokens, do_sample=False, **kw)
            times.append((time.perf_counter() - t) / max_new_tokens * 1000)
        return sorted(times)[len(times) // 2], out

    row = {"kernel": lm.kernel, "mode": mode, "weights_read_ms": round(weight_read_seconds(model) * 1000, 1)}
    with torch.inference_mode():
        gen(1)
        row["eager_dynamic_ms"], ref = gen()
        row["eager_static_ms"], _ = gen(cache_implementation="static")
        model.forward = torch.compile(model.forward, dynamic=False, mode=None if mode == "default" else mode)
        t = time.perf_counter()
        gen(1, cache_implementation="static")
        row["compile_s"] = round(time.perf_counter() - t, 1)
        row["compiled_static_ms"], out = gen(cache_implementation="static")
    row["same_tokens"] = bool(torch.equal(ref, out))
    return {k: round(v, 1) if isinstance(v, float) else v for k, v in row.items()}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--kernels", default="skinny,stock")
    ap.add_argument("--mode", default="default")
    ap.add_argument("--max-new-tokens", type=int, default=64)
    ap.add_argument("--one", default="", help=argparse.SUPPRESS)  # a child process: one kernel, JSON out
    a = ap.parse_args()
    if a.one:
        print("ROW " + json.dumps(one(a.one, a.mode, a.max_new_tokens)), flush=True)
        return
    print(f"load average before: {os.getloadavg()[0]:.2f} (2 cores: under 0.5 is idle)")
    for k in a.kernels.split(","):
        p = subprocess.run([sys.executable, __file__, "--one", k, "--mode", a.mode, "--max-new-tokens", str(a.max_new_tokens)],
                           capture_output=True, text=True)
        rows = [json.loads(x[4:]) for x in p.stdout.splitlines() if x.startswith("ROW ")]
        if not rows:
            print(f"{k}: failed\n{p.stderr[-2000:]}")
            continue
        r = rows[0]
        print(f"{r['kernel']:7s} {r['mode']}: eager dynamic {r['eager_dynamic_ms']} ms/token, eager static "
              f"{r['eager_static_ms']}, compiled static {r['compiled_static_ms']} (compile {r['compile_s']} s, same "
              f"tokens: {r['same_tokens']}); weights read once {r['weights_read_ms']} ms; compiled / eager dynamic "
              f"{r['compiled_static_ms'] / r['eager_dynamic_ms']:.2f}")
    print(f"load average after: {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
