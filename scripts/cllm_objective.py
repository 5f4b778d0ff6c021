"""CLLM's training objective on one real trajectory, as data for the CLLM page's figure.

    python scripts/cllm_objective.py --trace assets/cllm/base_jacobi.json --cllm assets/cllm/adapter \
        --out assets/cllm/objective.json

Takes one Jacobi block of the target model's trace (a training item, ``cllm.data.items_from_trace``):
its states from the initial guess to the fixed point. For the base model and the CLLM it computes,
with ``cllm.losses``: the global consistency loss of every state (KL from the fixed point's
distribution, detached, to the state's, from the state's first wrong position on, / n), the local
one between neighbouring states, and the AR loss (cross-entropy of the fixed point, teacher forced).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path


def losses(lm, item: dict) -> dict:
    """Per-state global and local consistency losses and the AR loss of ``item`` under ``lm``."""
    import torch
    import torch.nn.functional as F

    from cllm.losses import block_logits, first_wrong, kl_from

    fp, states = item["fixed_point"], item["states"]
    lm.model.eval()
    with torch.no_grad():
        full = block_logits(lm.model, item["prompt_ids"], [fp] + states)
        logits = full[:, 1:]
        glob = [float(kl_from(logits[0], logits[1 + k], first_wrong(s, fp))) for k, s in enumerate(states)]
        local = [float(kl_from(logits[2 + k], logits[1 + k], first_wrong(s, states[k + 1])))
                 for k, s in enumerate(states[:-1])]
        ar = float(F.cross_entropy(full[0, :-1], torch.tensor(fp, device=full.device)))
    r4 = lambda v: round(v, 4) + 0.0  # no -0.0
    return {"model": lm.model_id, "global": [r4(v) for v in glob], "local": [r4(v) for v in local], "ar": r4(ar)}


def pick(items: list[dict]) -> dict:
    """The block with the most states whose first wrong position jumps by more than one (something to see),
    then the fewest states."""
    from cllm.losses import first_wrong

    def jumps(it):
        fw = [first_wrong(s, it["fixed_point"]) for s in it["states"]]
        return sum(b - a > 1 for a, b in zip(fw, fw[1:]))
    return max(items, key=lambda it: (jumps(it), -len(it["states"])))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--trace", required=True, help="a Jacobi trace of the target (base) model")
    ap.add_argument("--cllm", required=True, help="the CLLM (LoRA adapter folder or model)")
    ap.add_argument("--base", default=None, help="the base model (default: the bundled one)")
    ap.add_argument("--block", type=int, default=None, help="the block (default: one with fast-forwards)")
    ap.add_argument("--out", required=True)
    a = ap.parse_args(argv)
    from cllm.data import items_from_trace
    from decoding.model import load_model
    from decoding.trace import Trace
    from viz.style import token_texts

    t0 = time.perf_counter()
    trace = Trace.load(a.trace)
    items = items_from_trace(trace, "0")
    item = next(it for it in items if it["block"] == a.block) if a.block is not None else pick(items)
    texts = token_texts(trace)
    ids = {t for s in item["states"] for t in s} | set(item["fixed_point"])
    out = {"trace": a.trace, "block": item["block"], "n": item["n"], "states": item["states"],
           "fixed_point": item["fixed_point"], "pieces": {str(t): texts.get(t, f"⟨{t}⟩") for t in sorted(ids)},
           "losses": {"base": losses(load_model(a.base), item), "cllm": losses(load_model(a.cllm), item)},
           "command": "python scripts/cllm_objective.py " + " ".join(sys.argv[1:] if argv is None else argv)}
    out["seconds"] = round(time.perf_counter() - t0, 1)
    Path(a.out).write_text(json.dumps(out, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    print(f"block {item['block']}: {len(item['states'])} states -> {a.out} ({out['seconds']} s)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
