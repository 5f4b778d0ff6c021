"""A CLLM's Jacobi tokens/step on the learning curve's held-out problems, problem by problem, with
and without its degenerate answers.

A repetition loop is the easiest text to fast-forward, so a CLLM that loops more often shows a
higher tokens/step that is not a gain; this script says how much of a curve point is loops.

    python scripts/cllm_curve_split.py --adapter DIR [--dir data/cllm-op] [--base]

DIR: an adapter folder (``python -m cllm campaign export --dir D --run R --out DIR``; fp16, merged at
load, so its figures can differ slightly from the curve's, measured on the training weights).
Greedy Jacobi one problem at a time with the campaign's n, max_new_tokens and chat settings;
``--base`` also decodes the base model on the same problems. Tokens/step do not depend on load.
"""

from __future__ import annotations

import argparse
import json

from cllm import campaign as cp
from cllm.evaluate import degenerate
from decoding.loop import decode
from decoding.model import load_model


def per_problem(lm, rows: list[dict], st) -> list[dict]:
    out = []
    for r in rows:
        tr = decode(lm, lm.encode(r["prompt"], chat=st.chat), "jacobi", {"n": st.n, "seed": st.seed}, st.max_new_tokens,
                    record=False)
        out.append({"id": r["id"], "tokens": len(tr.output_ids) - 1, "steps": tr.n_steps,
                    "degenerate": degenerate(tr.output_ids)})
    return out


def rate(rows: list[dict]) -> float:
    return sum(r["tokens"] for r in rows) / max(1, sum(r["steps"] for r in rows))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--adapter", required=True, help="a CLLM adapter folder (campaign export)")
    ap.add_argument("--dir", default="data/cllm", help="the campaign folder (its held-out problems and settings)")
    ap.add_argument("--base", action="store_true", help="also the base model on the same problems")
    a = ap.parse_args()
    c = cp.open_campaign(a.dir)
    rows = cp.heldout_rows(c)
    sides = {"cllm": per_problem(load_model(a.adapter), rows, c.settings)}
    if a.base:
        sides["base"] = per_problem(load_model(None), rows, c.settings)
    for name, got in sides.items():
        for g in got:
            print(name, json.dumps(g))
    for name, got in sides.items():
        clean = [g for g in got if not g["degenerate"]]
        print(f"{name}: {rate(got):.3f} tokens/step on {len(got)} problems; {len(got) - len(clean)} degenerate; "
              f"without them {rate(clean):.3f} on {len(clean)}")
    if a.base:
        ok = {g["id"] for g in sides["cllm"] if not g["degenerate"]}
        print(f"base on the CLLM's {len(ok)} non-degenerate problems: "
              f"{rate([g for g in sides['base'] if g['id'] in ok]):.3f} tokens/step")


if __name__ == "__main__":
    main()
