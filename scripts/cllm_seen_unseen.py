"""Jacobi tokens/step of the base and a CLLM on prompts it trained on and on held-out ones.

Is the CLLM's learning curve bound by its data or by what the model can learn? Both models on
prompts the campaign trained on (the first K of a shard) and on the curve's held-out problems, the same way the curve measures them (``cllm.campaign.jacobi_answers``:
batched greedy Jacobi, the campaign's n, max_new_tokens and chat settings).

    python scripts/cllm_seen_unseen.py --adapter DIR [--dir data/cllm] [--shard 0] [--take 16]

DIR: an adapter folder (``python -m cllm campaign export --run run-d2 --out DIR``). A CLLM that is
as fast on held-out problems as on the ones it trained on gains nothing from more trajectories of the
same kind. Prints the load average: a figure from a busy machine is a different regime.
"""

from __future__ import annotations

import argparse
import os
import time

from cllm import campaign as cp
from decoding.model import load_model


def tokens_per_step(lm, rows: list[dict], st) -> tuple[float, float]:
    """(Jacobi tokens/step over ``rows``, seconds)."""
    t = time.perf_counter()
    prompts = [lm.encode(r["prompt"], chat=st.chat) for r in rows]
    _, tokens, steps = cp.jacobi_answers(lm, prompts, st)
    return tokens / max(1, steps), time.perf_counter() - t


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--adapter", required=True, help="a CLLM adapter folder (campaign export)")
    ap.add_argument("--dir", default="data/cllm", help="the campaign folder")
    ap.add_argument("--shard", type=int, default=0, help="the shard whose prompts count as seen")
    ap.add_argument("--take", type=int, default=16, help="prompts of each side")
    a = ap.parse_args()
    c = cp.open_campaign(a.dir)
    if not 0 <= a.shard < len(c.shards):
        raise SystemExit(f"--shard: the campaign has shards 0..{len(c.shards) - 1}")
    sides = {"seen (shard %d)" % a.shard: cp.shard_rows(c, a.shard)[:a.take], "held-out": cp.heldout_rows(c)[:a.take]}
    print(f"load average at start: {os.getloadavg()[0]:.2f}")
    for name in ("bundled", a.adapter):
        lm = load_model(name)
        for side, rows in sides.items():
            tps, secs = tokens_per_step(lm, rows, c.settings)
            print(f"{'base' if name == 'bundled' else 'CLLM'} {side}: {len(rows)} prompts, Jacobi {tps:.4f} tokens/step ({secs:.0f} s)",
                  flush=True)
    print(f"load average at end: {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
