"""CLLM training data: Jacobi trajectories collected from the lab's own Jacobi run.

One JSON line per Jacobi block (``collect``). The trajectories come from ``decoding.decode`` with
method "jacobi"; each JacobiRecord's ``before`` is the n-token state an iteration fed, the block's
last ``after`` is its fixed point. An item holds

    id            "<prompt id>:<block>"
    prompt_ids    the prompt + the output before the block (what the block is decoded after)
    states        every n-token state, from the initial guess to the fixed point (last == fixed_point)
    fixed_point   the block's fixed point (position 0 is the token the block starts from, always right)
    answer_ids    the full greedy answer of the prompt (every block of the prompt carries it)
    + prompt_id, category, block, n_blocks, offset (index of the block's position 0 in answer_ids),
      prompt_len, n, seed, chat, model.
"""

from __future__ import annotations

import json
import os
import sys
from typing import Any

from decoding import decode
from decoding.analysis import jacobi_iterations
from decoding.io import UsageError, jsonl

ITEM_KEYS = ("id", "prompt_id", "category", "block", "n_blocks", "offset", "prompt_len", "n", "seed", "chat", "model",
             "prompt_ids", "states", "fixed_point", "answer_ids")


def trajectories(trace) -> list[dict[str, Any]]:
    """Per Jacobi block of a (recorded, greedy) Jacobi trace: offset, states and fixed point.

    states = the ``before`` of each iteration, then the last iteration's ``after``, each cut to the
    fixed point's length (a block cut at EOS / max_new_tokens is shorter); the last state is the
    fixed point.
    """
    if trace.method != "jacobi":
        raise ValueError(f"a Jacobi trace is needed, got {trace.method!r}")
    out = []
    for b in trace.blocks:
        its = jacobi_iterations(trace, b.index)
        fp = list(b.fixed_point)
        if not its or len(fp) < 2:
            continue  # nothing to learn from a block of one token
        states = [list(r.before[:len(fp)]) for r in its] + [list(its[-1].after[:len(fp)])]
        if states[-1] != fp:  # cannot happen for a finished greedy block; be safe
            states.append(fp)
        out.append({"block": b.index, "offset": b.offset, "states": states, "fixed_point": fp})
    return out


def items_from_trace(trace, prompt_id: str, category: str = "all", seed: int = 0) -> list[dict[str, Any]]:
    """The training items of one prompt's Jacobi trace (one per block)."""
    blocks = trajectories(trace)
    answer = list(trace.output_ids)
    prompt = list(trace.prompt_ids)
    items = []
    for b in blocks:
        items.append({
            "id": f"{prompt_id}:{b['block']}", "prompt_id": str(prompt_id), "category": category,
            "block": b["block"], "n_blocks": len(blocks), "offset": b["offset"], "prompt_len": len(prompt),
            "n": int(trace.params.get("n", 0)), "seed": seed, "chat": trace.chat, "model": trace.model_id,
            "prompt_ids": prompt + answer[:b["offset"]], "states": b["states"], "fixed_point": b["fixed_point"],
            "answer_ids": answer,
        })
    return items


def check_item(d: Any) -> str | None:
    """None if ``d`` is a well-formed item, else what is wrong (one phrase)."""
    if not isinstance(d, dict):
        return "not a JSON object"
    missing = [k for k in ("id", "prompt_ids", "states", "fixed_point", "answer_ids") if k not in d]
    if missing:
        return f"lacks {', '.join(missing)}"
    ints = lambda v: isinstance(v, list) and all(type(x) is int and x >= 0 for x in v)
    for k in ("prompt_ids", "fixed_point", "answer_ids"):
        if not ints(d[k]):
            return f"{k} must be a list of token ids"
    if not d["prompt_ids"]:
        return "prompt_ids is empty"
    fp = d["fixed_point"]
    if len(fp) < 2:
        return "fixed_point needs at least 2 tokens"
    st = d["states"]
    if not isinstance(st, list) or not st or not all(ints(s) and len(s) == len(fp) for s in st):
        return "states must be a non-empty list of token-id lists as long as fixed_point"
    if st[-1] != fp:
        return "the last state must be the fixed point"
    if any(s[0] != fp[0] for s in st):
        return "every state must start with the fixed point's first token"
    return None


def read_items(path: str) -> list[dict[str, Any]]:
    """Items of a data file; UsageError (one line) for a missing file or a malformed item."""
    if not os.path.isfile(path):
        raise UsageError(f"no data file at {path}")
    items = []
    for ln, d in jsonl(path):
        err = check_item(d)
        if err:
            raise UsageError(f"{path}:{ln} is not a CLLM item: {err}")
        items.append(d)
    if not items:
        raise UsageError(f"{path} has no items")
    return items


def _done_prompts(path: str) -> set[str]:
    """Prompt ids whose items are all in ``path`` already; rewrites the file without the items of
    prompts cut short (a crash while writing) so a resumed run adds each prompt once."""
    if not os.path.isfile(path):
        return set()
    good, by = [], {}
    with open(path, encoding="utf-8") as f:
        for line in f:
            try:
                d = json.loads(line)
            except json.JSONDecodeError:
                continue
            if check_item(d) is None and "prompt_id" in d:
                good.append(line if line.endswith("\n") else line + "\n")
                by.setdefault(d["prompt_id"], []).append(d)
    done = {p for p, its in by.items() if len({d["block"] for d in its}) == its[0].get("n_blocks", -1)}
    keep = [ln for ln in good if json.loads(ln)["prompt_id"] in done]
    if len(keep) != sum(1 for _ in open(path, encoding="utf-8")):
        tmp = path + ".tmp"
        with open(tmp, "w", encoding="utf-8") as f:
            f.writelines(keep)
        os.replace(tmp, path)
    return done


def select(rows: list[dict], skip: int = 0, take: int = 0) -> list[dict]:
    """Per category, drop the first ``skip`` prompts and keep the next ``take`` (0: all)."""
    seen: dict[str, int] = {}
    out = []
    for r in rows:
        i = seen.get(r["category"], 0)
        seen[r["category"]] = i + 1
        if i >= skip and (not take or i < skip + take):
            out.append(r)
    return out


def collect(lm, rows: list[dict], out_path: str, n: int = 16, max_new_tokens: int = 64, chat: bool = False,
            seed: int = 0, progress: bool = True, max_seconds: float = 0.0) -> dict[str, Any]:
    """Decode each prompt with greedy Jacobi and append its items to ``out_path``.

    Resumable and append-only: prompts whose items are all in the file are skipped, the items of a
    prompt cut short are dropped first, and each prompt's items go out in one write, so a run killed
    at any moment loses at most the prompt in flight, and a resumed run ends with the same file as
    an uncut one (greedy Jacobi is deterministic). ``max_seconds``: stop after the prompt that
    passes this much time (0: no limit). The progress bar (stderr) shows the ETA of the run.
    Nothing in the file depends on the machine or the time: per-prompt seconds are only counted
    in the returned stats."""
    import time

    from tqdm import tqdm

    done = _done_prompts(out_path)
    todo = [r for r in rows if r["id"] not in done]
    stats: dict[str, Any] = {"prompts": 0, "items": 0, "skipped": len(rows) - len(todo), "tokens": 0, "steps": 0,
                             "seconds": 0.0, "left": len(todo), "stopped": False}
    bar = tqdm(todo, desc="collect", unit="prompt", file=sys.stderr, disable=not progress)
    t0 = time.perf_counter()
    with open(out_path, "a", encoding="utf-8") as f:
        for r in bar:
            ids = lm.encode(r["prompt"], chat=chat)
            tr = decode(lm, ids, "jacobi", {"n": n, "seed": seed}, max_new_tokens, chat=chat)
            items = items_from_trace(tr, r["id"], r["category"], seed)
            f.write("".join(json.dumps(d) + "\n" for d in items))  # one write per prompt
            f.flush()
            stats["prompts"] += 1
            stats["left"] -= 1
            stats["items"] += len(items)
            stats["tokens"] += len(tr.output_ids)
            stats["steps"] += tr.n_steps
            stats["seconds"] = time.perf_counter() - t0
            bar.set_postfix(items=stats["items"], tok_step=f"{tr.tokens_per_step:.2f}",
                            s_item=f"{stats['seconds'] / max(1, stats['items']):.1f}")
            if max_seconds and stats["seconds"] > max_seconds and stats["left"]:
                stats["stopped"] = True
                break
    bar.close()
    return stats
