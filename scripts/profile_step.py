"""Where a decoding step's time goes (issue 21, item 1): torch.profiler over decode steps that feed
1 (AR), 4 and 8 tokens after a cached context, the operators' self CPU time grouped as linear
products, attention, norms and rotary, KV-cache operations, the logits head's softmax/argmax, and
the rest (dispatch, Python, small ops), beside the time to read the weights once.

    python scripts/profile_step.py [--kernel auto|skinny|stock] [--step eager|compiled] [--context 256] [--steps 40]

With ``--step compiled`` the steps run through the compiled step (decoding/compiled.py) over its
static cache: inductor's fused C++ code has no operator events, so its time shows as "other ops"
(the compiled region) beside the linear products it calls (``decoding::onednn_linear``).

Run it on an idle machine (it prints the load average): the shares are what the issue decides from.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

import torch
from transformers import DynamicCache

from decoding.kernels import KERNELS, weight_read_seconds
from decoding.model import cache_kw, load_model

# operator name (substring, lower case) -> group; the first match wins
GROUPS = (
    ("linear", ("aten::linear", "aten::addmm", "aten::mm", "aten::matmul", "aten::bmm", "skinny", "mkl", "onednn", "fewrows")),
    ("attention", ("scaled_dot_product", "flash_attention", "aten::_softmax", "aten::softmax", "baddbmm")),
    ("norms and rotary", ("rms", "aten::pow", "aten::rsqrt", "aten::mean", "aten::cos", "aten::sin", "rotate",
                          "aten::neg")),
    ("kv cache", ("aten::cat", "aten::copy_", "aten::index_select", "aten::slice", "aten::narrow", "aten::contiguous")),
    ("activations", ("aten::silu", "aten::mul", "aten::add", "aten::gelu")),
)


def group(name: str) -> str:
    low = name.lower()
    for g, keys in GROUPS:
        if any(k in low for k in keys):
            return g
    return "other ops"


def step_fn(lm, context: int, k: int):
    """(one, done): ``one()`` runs one k-token step after ``context`` cached tokens and leaves the
    cache as it found it (the eager forward over a DynamicCache, or the compiled step over its
    static cache); ``done()`` releases the cache."""
    model = lm.model
    kw = cache_kw(type(model))
    ids = torch.randint(100, 1000, (1, context))
    step = torch.randint(100, 1000, (1, k))
    stepper = lm.compiled
    cache = DynamicCache(config=model.config) if stepper is None else stepper.acquire(context + 64 + k, kw)
    model(input_ids=ids, use_cache=True, **{kw: cache})
    if stepper is None:
        def one():
            model(input_ids=step, use_cache=True, **{kw: cache})
            cache.crop(-k)  # the next step sees the same context
    else:
        def one():
            stepper.forward(cache, step[0].tolist(), None, None, context)
            cache.crop(context - int(cache.get_seq_length()))
    return one, (lambda: stepper.release(cache)) if stepper is not None else (lambda: None)


def profile(lm, context: int, k: int, steps: int) -> tuple[float, dict[str, float]]:
    """(median wall seconds per step, self CPU seconds per step by group) of ``steps`` k-token steps."""
    with torch.inference_mode():
        one, done = step_fn(lm, context, k)
        for _ in range(5):
            one()
        wall = []
        for _ in range(steps):
            t = time.perf_counter()
            one()
            wall.append(time.perf_counter() - t)
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
            for _ in range(steps):
                one()
        done()
    by: dict[str, float] = {}
    for ev in prof.key_averages():
        by[group(ev.key)] = by.get(group(ev.key), 0.0) + ev.self_cpu_time_total / 1e6 / steps
    return statistics.median(wall), by


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--kernel", default="auto", choices=list(KERNELS))
    ap.add_argument("--context", type=int, default=256)
    ap.add_argument("--steps", type=int, default=40)
    ap.add_argument("--sizes", default="1,4,8")
    ap.add_argument("--step", default="eager", choices=["eager", "compiled"])
    a = ap.parse_args(argv)
    lm = load_model(None, device="cpu", kernel=a.kernel, step=a.step, progress=print)
    print(f"load average {os.getloadavg()[0]:.2f}; torch threads {torch.get_num_threads()}; kernel {lm.kernel}; step {lm.step}; "
          f"context {a.context} tokens")
    floor = weight_read_seconds(lm.model)
    print(f"reading the weights once: {floor * 1e3:.1f} ms")
    names = [g for g, _ in GROUPS] + ["other ops"]
    base = None
    for k in (int(x) for x in a.sizes.split(",")):
        wall, by = profile(lm, a.context, k, a.steps)
        base = base or wall
        ops = sum(by.values())
        parts = ", ".join(f"{g} {by.get(g, 0) * 1e3:.1f} ms ({by.get(g, 0) / wall:.0%})" for g in names)
        print(f"{k} token(s): {wall * 1e3:.1f} ms per step ({wall / base:.2f}x the 1-token step, {wall / floor:.2f}x "
              f"the weight read); operators' self time {ops * 1e3:.1f} ms: {parts}; outside the operators "
              f"(Python, the loop) {max(0.0, wall - ops) * 1e3:.1f} ms")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
