"""Evaluating a CLLM against its base: Jacobi tokens/step and speedup, exactness, drift of the
greedy answer and the base's perplexity of both answers (``evaluate``, ``report``); and the pair of
Jacobi traces the app's CLLM page shows (``pair``)."""

from __future__ import annotations

import json
import math
import os
import sys
from typing import Any, Callable

from decoding.loop import decode, warm_up


def answer_nll(lm, prompt_ids: list[int], answer: list[int]) -> tuple[float, int]:
    """Summed negative log-likelihood of ``answer`` after ``prompt_ids`` under ``lm``, and its count."""
    import torch
    import torch.nn.functional as F

    if not answer:
        return 0.0, 0
    with torch.inference_mode():
        ids = torch.tensor([prompt_ids + answer], device=lm.model.device)
        logits = lm.model(input_ids=ids, use_cache=False).logits[0, len(prompt_ids) - 1:-1].float()
        nll = F.cross_entropy(logits, torch.tensor(answer, device=logits.device), reduction="sum")
    return float(nll), len(answer)


def _side(lm, ids: list[int], n: int, max_new_tokens: int, seed: int) -> tuple[list[int], dict[str, Any]]:
    """One model's greedy AR answer and its Jacobi vs AR numbers on one prompt."""
    ar = decode(lm, ids, "ar", {}, max_new_tokens, record=False)
    jc = decode(lm, ids, "jacobi", {"n": n, "seed": seed}, max_new_tokens, record=False)
    return ar.output_ids, {"jacobi_tokens_per_step": jc.tokens_per_step, "jacobi_steps": jc.n_steps,
                           "jacobi_seconds": jc.seconds, "ar_seconds": ar.seconds, "tokens": len(ar.output_ids),
                           "exact": jc.output_ids == ar.output_ids,
                           "speedup": (ar.seconds / jc.seconds) if jc.seconds > 0 else 0.0}


def compare(base, cllm, r: dict, n: int, max_new_tokens: int, chat: bool, seed: int = 0) -> dict[str, Any]:
    """The result row of one prompt row ``r`` (see ``evaluate``)."""
    ids = base.encode(r["prompt"], chat=chat)
    row: dict[str, Any] = {"id": r["id"], "category": r["category"], "split": r.get("split", ""), "prompt_tokens": len(ids)}
    outs = {}
    for name, lm in (("base", base), ("cllm", cllm)):
        outs[name], row[name] = _side(lm, ids, n, max_new_tokens, seed)
    b, c = outs["base"], outs["cllm"]
    same = sum(x == y for x, y in zip(b, c))
    row["identical_share"] = same / max(len(b), len(c), 1)
    row["common_prefix"] = next((i for i, (x, y) in enumerate(zip(b, c)) if x != y), min(len(b), len(c)))
    row["base_nll_base"], row["n_base"] = answer_nll(base, ids, b)
    row["base_nll_cllm"], row["n_cllm"] = answer_nll(base, ids, c)
    return row


def evaluate(base, cllm, rows: list[dict], n: int, max_new_tokens: int, chat: bool, seed: int = 0,
             progress: bool = True, out=None) -> list[dict]:
    """Per prompt: Jacobi tokens/step of base and CLLM, AR and Jacobi wall time of the CLLM (and of
    the base), the CLLM's exactness (Jacobi == AR), drift of its greedy answer from the base's, and
    the base's NLL of both answers."""
    from tqdm import tqdm

    for lm in (base, cllm):
        warm_up(lm, chat)
    res = []
    for r in tqdm(rows, desc="eval", unit="prompt", file=sys.stderr, disable=not progress):
        row = compare(base, cllm, r, n, max_new_tokens, chat, seed)
        res.append(row)
        if out:
            out.write(json.dumps(row) + "\n")
            out.flush()
    return res


def report(results: list[dict]) -> str:
    """A Markdown table per split: tokens/step base vs CLLM, speedups, drift, base perplexity."""
    import statistics

    groups: dict[str, list[dict]] = {}
    for r in results:
        groups.setdefault(r.get("split") or r["category"], []).append(r)
    if len(groups) > 1:
        groups["ALL"] = list(results)
    head = ("| split | prompts | Jacobi tok/step base | Jacobi tok/step CLLM | ratio | Jacobi vs AR (CLLM), median | "
            "Jacobi vs AR (base), median | identical tokens | base ppl of base answers | base ppl of CLLM answers | exact |")
    lines = [head, "|" + "---|" * (head.count("|") - 1)]
    for g, rs in groups.items():
        tps = lambda k: sum(r[k]["jacobi_tokens_per_step"] * r[k]["jacobi_steps"] for r in rs) / max(1, sum(r[k]["jacobi_steps"] for r in rs))
        b, c = tps("base"), tps("cllm")
        ppl = lambda k, nk: math.exp(sum(r[k] for r in rs) / max(1, sum(r[nk] for r in rs)))
        lines.append(f"| {g} | {len(rs)} | {b:.3f} | {c:.3f} | {c / b if b else 0:.2f}x | "
                     f"{statistics.median(r['cllm']['speedup'] for r in rs):.2f}x | "
                     f"{statistics.median(r['base']['speedup'] for r in rs):.2f}x | "
                     f"{sum(r['identical_share'] for r in rs) / len(rs):.1%} | "
                     f"{ppl('base_nll_base', 'n_base'):.2f} | {ppl('base_nll_cllm', 'n_cllm'):.2f} | "
                     f"{'yes' if all(r['cllm']['exact'] and r['base']['exact'] for r in rs) else 'NO'} |")
    return "\n".join(lines)


def pair(r: dict, models: dict[str, str | None], out_dir: str, n: int, max_new_tokens: int, chat: bool = False,
         seed: int = 0, device: str | None = None, dtype: str | None = None,
         say: Callable[[str], None] = lambda m: print(m, file=sys.stderr)) -> dict[str, str]:
    """Decode prompt row ``r`` with greedy Jacobi by each model of ``models`` (name -> model, e.g.
    {"base": None, "cllm": folder}), one model loaded at a time; save ``<name>_jacobi.json`` in
    ``out_dir`` (the app's CLLM page reads base_jacobi.json and cllm_jacobi.json). Name -> path."""
    from decoding.model import load_model

    paths = {}
    for name, model in models.items():
        lm = load_model(model, device, dtype, progress=say)
        tr = decode(lm, lm.encode(r["prompt"], chat=chat), "jacobi", {"n": n, "seed": seed}, max_new_tokens,
                    prompt_text=r["prompt"], chat=chat)
        paths[name] = os.path.join(out_dir, f"{name}_jacobi.json")
        tr.save(paths[name])
        say(f"{name}: prompt {r['id']} ({r['category']}), {len(tr.output_ids)} tokens in {tr.n_steps} steps, "
            f"{tr.tokens_per_step:.2f} tokens/step -> {paths[name]}")
    return paths
