"""What a CLLM trajectory item and a training item cost on this machine, old way against new, in
one process (issue 20's first two targets).

    python scripts/cllm_throughput.py --prompts ../shared/benchmarks/gsm8k/train.jsonl --skip 6000 --take 8

Collection: the same prompts decoded with greedy Jacobi one prompt at a time (``cllm.collect``'s
path) and with batched Jacobi (``cllm.batch``, ``--lanes`` prompts per forward); the items must be
identical. Training: the full step (``losses.item_losses``: one item, the whole sequence with
gradient, two rows) against the cheap step (``losses.item_losses_cached``: the context once without
gradient, the fixed point and ``--states`` states as rows over its KV, ``--items-per-step`` items
per AdamW step), on the items just collected, LoRA r 16 on a fresh copy of the model each.

Prints wall and CPU seconds per item (CPU = this process's user + system time, both threads) and
items per CPU-hour, with the load average: a figure from a busy machine is a different regime.
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import time

import cllm
from cllm.batch import BatchedJacobi, Lane
from cllm.losses import item_losses, item_losses_cached
from decoding.io import read_prompts
from decoding.loop import decode, warm_up
from decoding.model import load_model

BASELINE_S_PER_ITEM = 4.8  # issue 20: collection, one thread, stock kernel, loaded machine
BASELINE_TRAIN_S_PER_ITEM = 2.9  # issue 20: training, one item per step


def _clock():
    t = os.times()
    return time.perf_counter(), t.user + t.system


def _since(t0):
    w, c = _clock()
    return w - t0[0], c - t0[1]


def collect_both(lm, rows, n, max_new, lanes, chat=True):
    eos = set(lm.eos_token_ids)
    t0 = _clock()
    single = []
    for r in rows:
        tr = decode(lm, lm.encode(r["prompt"], chat=chat), "jacobi", {"n": n, "seed": 0}, max_new, chat=chat)
        single += cllm.items_from_trace(tr, r["id"], r["category"], 0)
    s_wall, s_cpu = _since(t0)
    t0 = _clock()
    batched = []
    todo = [Lane(r, lm.encode(r["prompt"], chat=chat), n, max_new, eos, 0) for r in rows]
    for ln in BatchedJacobi(lm, n, max_new, 0, lanes).run(todo):
        batched += ln.items(ln.row["category"], chat, lm.model_id)
    b_wall, b_cpu = _since(t0)
    key = lambda d: d["id"]
    same = sorted(single, key=key) == sorted(batched, key=key)
    return single, {"single": (s_wall, s_cpu), "batched": (b_wall, b_cpu), "items": len(single), "same": same}


def train_both(items, states, per_step, steps):
    import torch

    out = {}
    for name in ("full", "cheap"):
        lm = load_model(None)
        model = cllm.add_lora(lm.model, 16, 32)
        opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-4)
        rng = random.Random(0)
        model.train()
        k = 1 if name == "full" else per_step
        seen, t0 = 0, _clock()
        for s in range(steps):
            opt.zero_grad(set_to_none=True)
            for j in range(k):
                it = items[(s * k + j) % len(items)]
                loss = item_losses(model, it, rng)["total"] if name == "full" else \
                    item_losses_cached(model, it, rng, states=states)["total"] / k
                loss.backward()
                seen += 1
            opt.step()
        w, c = _since(t0)
        out[name] = (w / seen, c / seen, seen)
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--prompts", required=True)
    ap.add_argument("--skip", type=int, default=6000, help="skip the first K prompts (the campaign uses the first ones)")
    ap.add_argument("--take", type=int, default=8)
    ap.add_argument("--n", type=int, default=16)
    ap.add_argument("--max-new-tokens", type=int, default=256)
    ap.add_argument("--lanes", type=int, default=4)
    ap.add_argument("--states", type=int, default=4)
    ap.add_argument("--items-per-step", type=int, default=4)
    ap.add_argument("--train-steps", type=int, default=6, help="optimizer steps of the cheap step (the full one takes as many items)")
    a = ap.parse_args(argv)
    rows = read_prompts(a.prompts)[a.skip:a.skip + a.take]
    lm = load_model(None)
    warm_up(lm, True)
    print(f"load average before: {os.getloadavg()[0]:.2f}; torch threads {__import__('torch').get_num_threads()}; kernel {lm.kernel}")
    items, c = collect_both(lm, rows, a.n, a.max_new_tokens, a.lanes)
    n = c["items"]
    for name in ("single", "batched"):
        w, cpu = c[name]
        print(f"collect {name:8s}: {n} items from {len(rows)} prompts, {w / n:.2f} s/item wall, {cpu / n:.2f} CPU-s/item, "
              f"{3600 * n / cpu:.0f} items per CPU-hour ({BASELINE_S_PER_ITEM * n / cpu:.1f}x the issue's 4.8 s/item)")
    print(f"batched items identical to single: {c['same']}; batched / single wall: {c['single'][0] / c['batched'][0]:.2f}x")
    t = train_both(items, a.states, a.items_per_step, a.train_steps)
    for name, (w, cpu, seen) in t.items():
        print(f"train {name:5s}: {seen} items, {w:.2f} s/item wall, {cpu:.2f} CPU-s/item, {3600 / cpu:.0f} items per CPU-hour "
              f"({BASELINE_TRAIN_S_PER_ITEM / cpu:.1f}x the issue's 2.9 s/item)")
    print(f"cheap / full per item (wall): {t['full'][0] / t['cheap'][0]:.2f}x; load average after: {os.getloadavg()[0]:.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
