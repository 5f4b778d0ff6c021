"""Consistency LLMs (CLLM, Kou et al., ICML 2024): collect Jacobi trajectories, train, evaluate.

    python -m decoding.cllm collect --prompts FILE --n 16 --max-new-tokens 64 --out data.jsonl
    python -m decoding.cllm train --data data.jsonl --out DIR [--lora-r 8] [--epochs 1]
    python -m decoding.cllm eval --cllm DIR --prompts FILE --out results.jsonl
    python -m decoding.cllm pair --cllm DIR --prompts FILE --out-dir assets/cllm   (the app's traces)

Data (one JSON line per Jacobi block, ``collect``): the trajectories come from the lab's own Jacobi
run (``decoding.run``, method "jacobi"); each JacobiRecord's ``before`` is the n-token state an
iteration fed, the block's last ``after`` is its fixed point. An item holds

    id            "<prompt id>:<block>"
    prompt_ids    the prompt + the output before the block (what the block is decoded after)
    states        every n-token state, from the initial guess to the fixed point (last == fixed_point)
    fixed_point   the block's fixed point (position 0 is the token the block starts from, always right)
    answer_ids    the full greedy answer of the prompt (every block of the prompt carries it)
    + prompt_id, category, block, n_blocks, offset (index of the block's position 0 in answer_ids),
      prompt_len, n, seed, chat, model.

Loss (``item_losses``), with q(. | x, s)_i the model's distribution at block position i when fed
prefix x and state s (it predicts position i + 1):
  - global consistency: a random intermediate state s (not the fixed point); with j the first
    position where s differs from the fixed point y*, sum over i >= j of KL(q(.|x, y*)_i, detached ||
    q(.|x, s)_i), divided by n. Positions before j see the same inputs in s and y*, so their term is
    0 by construction: the loss is "counted from the first wrong position on", and a state equal to
    the fixed point has loss exactly 0;
  - AR: cross-entropy of the fixed point's own tokens, teacher forced (the last prefix position
    predicts y*_0, block position i predicts y*_{i+1}); the blocks of one answer cover the whole
    greedy answer (a block's position 0 is the token after the previous block), so over a prompt's
    items this is the AR loss on the answer. Weighted by w (10, as in the reference code);
  - local consistency (optional, weight --local): for consecutive states s_k, s_{k+1} of the
    trajectory, KL(q(.|x, s_{k+1}) detached || q(.|x, s_k)) from s_k's first wrong position on.
The fixed point row, the sampled state and (with --local) the next state go through the model as one
batch of equal-length rows.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
import sys
import time
from pathlib import Path
from typing import Any, Callable

from .cli import UsageError, _Parser, jsonl, read_prompts
from .run import ConfigError, decode

ITEM_KEYS = ("id", "prompt_id", "category", "block", "n_blocks", "offset", "prompt_len", "n", "seed", "chat", "model",
             "prompt_ids", "states", "fixed_point", "answer_ids")
METRICS_FILE = "metrics.jsonl"
META_FILE = "cllm.json"


# ---- collection ---------------------------------------------------------------------------------
def trajectories(trace) -> list[dict[str, Any]]:
    """Per Jacobi block of a (recorded, greedy) Jacobi trace: offset, states and fixed point.

    states = the ``before`` of each iteration, then the last iteration's ``after``, each cut to the
    fixed point's length (a block cut at EOS / max_new_tokens is shorter); the last state is the
    fixed point.
    """
    if trace.method != "jacobi":
        raise ValueError(f"a Jacobi trace is needed, got {trace.method!r}")
    recs: dict[int, list] = {}
    for s in trace.steps:
        if s.jacobi is not None:
            recs.setdefault(s.jacobi.block, []).append(s.jacobi)
    out = []
    for b in trace.blocks:
        its = sorted(recs.get(b.index, []), key=lambda r: r.iteration)
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
            seed: int = 0, progress: bool = True) -> dict[str, int]:
    """Decode each prompt with greedy Jacobi and append its items to ``out_path`` (resumable)."""
    from tqdm import tqdm

    done = _done_prompts(out_path)
    todo = [r for r in rows if r["id"] not in done]
    stats = {"prompts": 0, "items": 0, "skipped": len(rows) - len(todo), "tokens": 0}
    bar = tqdm(todo, desc="collect", unit="prompt", file=sys.stderr, disable=not progress)
    with open(out_path, "a", encoding="utf-8") as f:
        for r in bar:
            ids = lm.encode(r["prompt"], chat=chat)
            tr = decode(lm, ids, "jacobi", {"n": n, "seed": seed}, max_new_tokens, chat=chat)
            items = items_from_trace(tr, r["id"], r["category"], seed)
            f.write("".join(json.dumps(d) + "\n" for d in items))  # one write per prompt
            f.flush()
            stats["prompts"] += 1
            stats["items"] += len(items)
            stats["tokens"] += len(tr.output_ids)
            bar.set_postfix(items=stats["items"], tok_step=f"{tr.tokens_per_step:.2f}")
    return stats


# ---- the loss -----------------------------------------------------------------------------------
def first_wrong(state: list[int], fixed_point: list[int]) -> int:
    """The first position where ``state`` differs from the fixed point (len if none)."""
    for i, (a, b) in enumerate(zip(state, fixed_point)):
        if a != b:
            return i
    return len(fixed_point)


def block_logits(model, prefix: list[int], rows: list[list[int]]):
    """Logits for each row fed after ``prefix`` (one batch): [rows, 1 + n, V]; index 0 is the last
    prefix position (it predicts block position 0), index 1 + i is block position i."""
    import torch

    n = len(rows[0])
    ids = torch.tensor([prefix + r for r in rows], device=model.device)
    return model(input_ids=ids, logits_to_keep=n + 1, use_cache=False).logits.float()


def kl_from(target_logits, student_logits, start: int):
    """sum over positions >= start of KL(softmax(target) || softmax(student)) / n (0 if none)."""
    import torch.nn.functional as F

    n = target_logits.shape[0]
    if start >= n:
        return student_logits.sum() * 0.0
    t = F.log_softmax(target_logits[start:], -1)
    s = F.log_softmax(student_logits[start:], -1)
    return (t.exp() * (t - s)).sum() / n


def consistency_loss(model, prefix: list[int], state: list[int], fixed_point: list[int]):
    """Global consistency loss of one state (the target: the detached fixed-point distribution)."""
    import torch

    with torch.no_grad():
        target = block_logits(model, prefix, [fixed_point])[0, 1:]
    student = block_logits(model, prefix, [state])[0, 1:]
    return kl_from(target, student, first_wrong(state, fixed_point))


def item_losses(model, item: dict, rng: random.Random, w_ar: float = 10.0, w_local: float = 0.0) -> dict[str, Any]:
    """The losses of one item (tensors; ``total`` has the gradient): consistency, ar, local, total."""
    import torch
    import torch.nn.functional as F

    fp, states = item["fixed_point"], item["states"]
    cand = [k for k, s in enumerate(states) if s != fp]
    k = rng.choice(cand) if cand else len(states) - 1
    rows = [fp, states[k]]
    if w_local > 0 and cand:
        rows.append(states[min(k + 1, len(states) - 1)])
    full = block_logits(model, item["prompt_ids"], rows)
    logits = full[:, 1:]
    target = logits[0].detach()
    cons = kl_from(target, logits[1], first_wrong(states[k], fp))
    # teacher-forced AR on the fixed point, its position 0 included (predicted from the prefix)
    ar = F.cross_entropy(full[0, :-1], torch.tensor(fp, device=full.device))
    out = {"consistency": cons, "ar": ar}
    total = cons + w_ar * ar
    if len(rows) == 3:
        local = kl_from(logits[2].detach(), logits[1], first_wrong(states[k], rows[2]))
        out["local"] = local
        total = total + w_local * local
    out["total"] = total
    return out


def mean_losses(model, items: list[dict]) -> dict[str, float]:
    """Deterministic losses over all items: the mean global consistency loss over every state that
    is not the fixed point, and the mean AR loss (for before / after comparisons)."""
    import torch
    import torch.nn.functional as F

    cons, ar, n_states = 0.0, 0.0, 0
    was_training = model.training
    model.eval()
    with torch.no_grad():
        for it in items:
            fp = it["fixed_point"]
            rows = [fp] + [s for s in it["states"] if s != fp]
            full = block_logits(model, it["prompt_ids"], rows)
            logits = full[:, 1:]
            ar += float(F.cross_entropy(full[0, :-1], torch.tensor(fp, device=full.device)))
            for k, s in enumerate(rows[1:], 1):
                cons += float(kl_from(logits[0], logits[k], first_wrong(s, fp)))
                n_states += 1
    model.train(was_training)
    return {"consistency": cons / max(1, n_states), "ar": ar / max(1, len(items))}


# ---- training -----------------------------------------------------------------------------------
def add_lora(model, r: int = 8, alpha: int = 16, dropout: float = 0.0, targets: str = "all"):
    """Wrap ``model`` with a peft LoRA adapter (attention + MLP projections, or ``targets`` list)."""
    from peft import LoraConfig, get_peft_model

    mods = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"] if targets == "all" \
        else [t for t in targets.split(",") if t]
    cfg = LoraConfig(r=r, lora_alpha=alpha, lora_dropout=dropout, target_modules=mods, task_type="CAUSAL_LM")
    return get_peft_model(model, cfg)


def train(model, items: list[dict], out_dir: str | None = None, epochs: float = 1.0, lr: float = 2e-4,
          w_ar: float = 10.0, w_local: float = 0.0, seed: int = 0, grad_clip: float = 1.0, warmup: int = 10,
          save_every: int = 0, save: Callable[[str], None] | None = None, progress: bool = True,
          max_seconds: float = 0.0, log: Callable[[dict], None] | None = None) -> list[dict]:
    """Consistency training over ``items``; returns the metrics rows (also appended to
    ``out_dir/metrics.jsonl``). ``save(path)`` writes a checkpoint every ``save_every`` steps."""
    import torch
    from tqdm import tqdm

    rng = random.Random(seed)
    torch.manual_seed(seed)
    params = [p for p in model.parameters() if p.requires_grad]
    if not params:
        raise ConfigError("the model has no trainable parameters")
    opt = torch.optim.AdamW(params, lr=lr, weight_decay=0.0)
    total_steps = max(1, int(round(epochs * len(items))))
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt, lambda s: min(1.0, (s + 1) / max(1, warmup)) * max(0.0, 1 - s / total_steps) if warmup else max(0.0, 1 - s / total_steps))
    order: list[int] = []
    metrics_f = None
    if out_dir:
        Path(out_dir).mkdir(parents=True, exist_ok=True)
        metrics_f = open(Path(out_dir) / METRICS_FILE, "w", encoding="utf-8")
    rows: list[dict] = []
    run = {}
    model.train()
    t0 = time.perf_counter()
    tokens = 0
    bar = tqdm(range(total_steps), desc="train", unit="step", file=sys.stderr, disable=not progress)
    try:
        for step in bar:
            if not order:
                order = list(range(len(items)))
                rng.shuffle(order)
            item = items[order.pop()]
            losses = item_losses(model, item, rng, w_ar, w_local)
            opt.zero_grad(set_to_none=True)
            losses["total"].backward()
            if grad_clip:
                torch.nn.utils.clip_grad_norm_(params, grad_clip)
            opt.step()
            sched.step()
            tokens += (len(item["prompt_ids"]) + len(item["fixed_point"])) * (3 if "local" in losses else 2)
            row = {"step": step + 1, "epoch": round((step + 1) / len(items), 4),
                   **{k: round(float(v.detach()), 6) for k, v in losses.items()},
                   "lr": sched.get_last_lr()[0], "seconds": round(time.perf_counter() - t0, 3), "tokens": tokens}
            rows.append(row)
            if metrics_f:
                metrics_f.write(json.dumps(row) + "\n")
                metrics_f.flush()
            if log:
                log(row)
            for k in ("consistency", "ar", "local"):
                if k in row:
                    run[k] = row[k] if k not in run else 0.95 * run[k] + 0.05 * row[k]
            bar.set_postfix({k: f"{v:.3f}" for k, v in run.items()})
            if save and save_every and (step + 1) % save_every == 0 and step + 1 < total_steps:
                save(str(Path(out_dir or ".") / "checkpoint"))
            if max_seconds and time.perf_counter() - t0 > max_seconds:
                break
    finally:
        if metrics_f:
            metrics_f.close()
        model.eval()
    return rows


def save_model(model, tokenizer, path: str, base: str, lora: bool, meta: dict | None = None) -> None:
    """Write the CLLM: a LoRA adapter (fp16 weights; ``base`` recorded so load_model finds it), or
    the full model with its tokenizer. ``meta`` goes to cllm.json."""
    Path(path).mkdir(parents=True, exist_ok=True)
    if lora:
        import torch
        from safetensors.torch import load_file, save_file

        model.save_pretrained(path)
        (Path(path) / "README.md").unlink(missing_ok=True)  # peft's empty model card
        f = Path(path) / "adapter_model.safetensors"
        state = {k: v.to(torch.float16).contiguous() for k, v in load_file(str(f)).items()}
        save_file(state, str(f), metadata={"format": "pt"})
        cfg_path = Path(path) / "adapter_config.json"
        cfg = json.loads(cfg_path.read_text())
        cfg["base_model_name_or_path"] = base
        cfg_path.write_text(json.dumps(cfg, indent=2))
    else:
        model.save_pretrained(path)
        tokenizer.save_pretrained(path)
    if meta is not None:
        (Path(path) / META_FILE).write_text(json.dumps(meta, indent=2))


def read_metrics(path: str) -> list[dict]:
    """The rows of a metrics.jsonl (bad lines skipped)."""
    return [d for _, d in jsonl(path, strict=False) if isinstance(d, dict) and isinstance(d.get("step"), int)]


# ---- evaluation ---------------------------------------------------------------------------------
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


def evaluate(base, cllm, rows: list[dict], n: int, max_new_tokens: int, chat: bool, seed: int = 0,
             progress: bool = True, out=None) -> list[dict]:
    """Per prompt: Jacobi tokens/step of base and CLLM, AR and Jacobi wall time of the CLLM (and of
    the base), the CLLM's exactness (Jacobi == AR), drift of its greedy answer from the base's, and
    the base's NLL of both answers."""
    from tqdm import tqdm

    from .run import Run

    for lm in (base, cllm):  # warm up
        Run(lm, lm.encode("Hello there, how are you?", chat=chat), "ar", {}, 8).decode()
    res = []
    for r in tqdm(rows, desc="eval", unit="prompt", file=sys.stderr, disable=not progress):
        ids = base.encode(r["prompt"], chat=chat)
        row: dict[str, Any] = {"id": r["id"], "category": r["category"], "split": r.get("split", ""), "prompt_tokens": len(ids)}
        outs = {}
        for name, lm in (("base", base), ("cllm", cllm)):
            ar = decode(lm, ids, "ar", {}, max_new_tokens, record=False)
            jc = decode(lm, ids, "jacobi", {"n": n, "seed": seed}, max_new_tokens, record=False)
            outs[name] = ar.output_ids
            row[name] = {"jacobi_tokens_per_step": jc.tokens_per_step, "jacobi_steps": jc.n_steps,
                         "jacobi_seconds": jc.seconds, "ar_seconds": ar.seconds, "tokens": len(ar.output_ids),
                         "exact": jc.output_ids == ar.output_ids,
                         "speedup": (ar.seconds / jc.seconds) if jc.seconds > 0 else 0.0}
        b, c = outs["base"], outs["cllm"]
        same = sum(x == y for x, y in zip(b, c))
        row["identical_share"] = same / max(len(b), len(c), 1)
        row["common_prefix"] = next((i for i, (x, y) in enumerate(zip(b, c)) if x != y), min(len(b), len(c)))
        row["base_nll_base"], row["n_base"] = answer_nll(base, ids, b)
        row["base_nll_cllm"], row["n_cllm"] = answer_nll(base, ids, c)
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


# ---- command line -------------------------------------------------------------------------------
def build_parser() -> argparse.ArgumentParser:
    p = _Parser(prog="python -m decoding.cllm", description="Consistency LLMs: collect Jacobi trajectories, train, evaluate.")
    sub = p.add_subparsers(dest="command", required=True, parser_class=_Parser)

    def model_args(q, default_dtype=None):
        q.add_argument("--model", default=None, help="base model: HF id in the local cache or a folder (default: the bundled SmolLM2-135M)")
        q.add_argument("--device", default=None, help="cuda, mps or cpu (default: the best available)")
        q.add_argument("--dtype", default=default_dtype, choices=["float32", "bfloat16", "float16"])

    def prompt_args(q):
        q.add_argument("--prompts", required=True, help="JSONL: Spec-Bench rows (turns[0], category) or {id, prompt} rows")
        q.add_argument("--categories", default="", help="comma list of categories to keep")
        q.add_argument("--skip-per-category", type=int, default=0, help="drop the first K prompts of each category")
        q.add_argument("--per-category", type=int, default=0, help="then keep K prompts of each category (0: all)")
        q.add_argument("--chat", action="store_true", help="wrap each prompt as one user message in the chat template")
        q.add_argument("--n", type=int, default=16, help="Jacobi block size")
        q.add_argument("--max-new-tokens", type=int, default=64)
        q.add_argument("--seed", type=int, default=0, help="seed of the Jacobi initial guesses")

    c = sub.add_parser("collect", help="greedy Jacobi over the prompts; one JSON line per block (resumable)")
    prompt_args(c)
    model_args(c)
    c.add_argument("--out", required=True, help="JSONL file to append to (prompts already in it are skipped)")

    t = sub.add_parser("train", help="consistency + AR training on collected trajectories")
    t.add_argument("--data", required=True, help="JSONL written by collect")
    t.add_argument("--out", required=True, help="folder for the CLLM (adapter or full model), metrics.jsonl, checkpoints")
    model_args(t, "float32")
    t.add_argument("--epochs", type=float, default=1.0)
    t.add_argument("--lr", type=float, default=None, help="learning rate (default 2e-4 with LoRA, 1e-5 full)")
    t.add_argument("--ar-weight", type=float, default=10.0, help="w: weight of the AR loss")
    t.add_argument("--local", type=float, default=0.0, help="weight of the local consistency loss (0: off)")
    t.add_argument("--lora-r", type=int, default=8, help="LoRA rank (0: full fine-tuning)")
    t.add_argument("--lora-alpha", type=int, default=16)
    t.add_argument("--lora-targets", default="all", help="'all' or a comma list of module names")
    t.add_argument("--save-every", type=int, default=100, help="checkpoint to OUT/checkpoint every K steps (0: off)")
    t.add_argument("--max-minutes", type=float, default=0.0, help="stop after this much training time (0: no limit)")
    t.add_argument("--seed", type=int, default=0)

    e = sub.add_parser("eval", help="base vs CLLM on held-out prompts: Jacobi tokens/step, speedup, drift")
    prompt_args(e)
    model_args(e)
    e.add_argument("--cllm", required=True, help="CLLM folder (LoRA adapter or full model)")
    e.add_argument("--split", default="", help="label written in each row (e.g. in-domain, out-of-domain)")
    e.add_argument("--out", help="append one JSON line per prompt here")
    e.add_argument("--results", default="", help="comma list of result files to summarise instead of running")
    q = sub.add_parser("pair", help="decode one prompt with Jacobi by the base and by the CLLM; save both traces (the app's CLLM page)")
    prompt_args(q)
    model_args(q)
    q.add_argument("--cllm", required=True, help="CLLM folder (LoRA adapter or full model)")
    q.add_argument("--out-dir", required=True, help="writes base_jacobi.json and cllm_jacobi.json here")
    return p


def _rows(a) -> list[dict]:
    rows = select(read_prompts(a.prompts, 0, a.categories), a.skip_per_category, a.per_category)
    if not rows:
        raise UsageError(f"no prompts selected from {a.prompts}")
    if not 1 <= a.n <= 256:
        raise UsageError("--n must be between 1 and 256")
    if not 1 <= a.max_new_tokens <= 4096:
        raise UsageError("--max-new-tokens must be between 1 and 4096")
    return rows


def _threads() -> None:
    import torch

    if os.environ.get("OMP_NUM_THREADS"):
        torch.set_num_threads(int(os.environ["OMP_NUM_THREADS"]))


def cmd_collect(a) -> int:
    from .model import load_model

    rows = _rows(a)
    out_dir = os.path.dirname(os.path.abspath(a.out))
    if not os.path.isdir(out_dir):
        raise UsageError(f"no folder {out_dir} for --out")
    _threads()
    lm = load_model(a.model, a.device, a.dtype, progress=lambda m: print(m, file=sys.stderr))
    t0 = time.perf_counter()
    s = collect(lm, rows, a.out, a.n, a.max_new_tokens, a.chat, a.seed)
    print(f"collected {s['items']} items from {s['prompts']} prompts ({s['tokens']} tokens) in "
          f"{time.perf_counter() - t0:.0f} s; {s['skipped']} prompts were already in {a.out}", file=sys.stderr)
    return 0


def cmd_train(a) -> int:
    from .model import BUNDLED, load_model

    items = read_items(a.data)
    if a.epochs <= 0:
        raise UsageError("--epochs must be > 0")
    if a.lora_r < 0:
        raise UsageError("--lora-r must be >= 0")
    _threads()
    lm = load_model(a.model, a.device, a.dtype, progress=lambda m: print(m, file=sys.stderr))
    vocab = lm.model.get_input_embeddings().num_embeddings
    for d in items:
        if max(d["prompt_ids"] + d["fixed_point"] + [t for s in d["states"] for t in s]) >= vocab:
            raise UsageError(f"item {d['id']} has token ids beyond the model's vocabulary ({vocab}): wrong --model?")
    lora = a.lora_r > 0
    model = add_lora(lm.model, a.lora_r, a.lora_alpha, targets=a.lora_targets) if lora else lm.model
    lr = a.lr if a.lr is not None else (2e-4 if lora else 1e-5)
    base = a.model or BUNDLED
    meta = {"base": base, "data": os.path.abspath(a.data), "items": len(items), "lora_r": a.lora_r,
            "lora_alpha": a.lora_alpha, "epochs": a.epochs, "lr": lr, "ar_weight": a.ar_weight, "local": a.local,
            "seed": a.seed, "device": str(lm.device), "dtype": lm.dtype, "command": "python -m decoding.cllm " + " ".join(sys.argv[1:])}

    def save(path):
        save_model(model, lm.tokenizer, path, base, lora, meta)

    rows = train(model, items, a.out, a.epochs, lr, a.ar_weight, a.local, a.seed, save_every=a.save_every, save=save,
                 max_seconds=a.max_minutes * 60)
    meta.update({"steps": len(rows), "train_seconds": rows[-1]["seconds"] if rows else 0,
                 "train_tokens": rows[-1]["tokens"] if rows else 0})
    save_model(model, lm.tokenizer, a.out, base, lora, meta)
    last = rows[-1] if rows else {}
    print(f"trained {len(rows)} steps in {meta['train_seconds']:.0f} s; last losses: "
          + ", ".join(f"{k} {last[k]:.4f}" for k in ("consistency", "ar", "local") if k in last)
          + f"; saved to {a.out}", file=sys.stderr)
    return 0


def cmd_eval(a) -> int:
    from .model import load_model

    if a.results:
        res = []
        for p in a.results.split(","):
            if not os.path.isfile(p):
                raise UsageError(f"no results file at {p}")
            res += [json.loads(l) for l in open(p, encoding="utf-8") if l.strip()]
        print(report(res))
        return 0
    rows = _rows(a)
    for r in rows:
        r["split"] = a.split
    _threads()
    base = load_model(a.model, a.device, a.dtype, progress=lambda m: print(m, file=sys.stderr))
    cllm = load_model(a.cllm, a.device, a.dtype, progress=lambda m: print(m, file=sys.stderr))
    out = open(a.out, "a", encoding="utf-8") if a.out else None
    try:
        res = evaluate(base, cllm, rows, a.n, a.max_new_tokens, a.chat, a.seed, out=out)
    finally:
        if out:
            out.close()
    print(report(res))
    return 0


def cmd_pair(a) -> int:
    from .model import load_model

    r = _rows(a)[0]
    if not os.path.isdir(a.out_dir):
        raise UsageError(f"no folder {a.out_dir}")
    _threads()
    say = lambda m: print(m, file=sys.stderr)
    for name, model in (("base", a.model), ("cllm", a.cllm)):
        lm = load_model(model, a.device, a.dtype, progress=say)
        tr = decode(lm, lm.encode(r["prompt"], chat=a.chat), "jacobi", {"n": a.n, "seed": a.seed}, a.max_new_tokens,
                    prompt_text=r["prompt"], chat=a.chat)
        path = os.path.join(a.out_dir, f"{name}_jacobi.json")
        tr.save(path)
        say(f"{name}: prompt {r['id']} ({r['category']}), {len(tr.output_ids)} tokens in {tr.n_steps} steps, "
            f"{tr.tokens_per_step:.2f} tokens/step -> {path}")
    return 0


def main(argv: list[str] | None = None) -> int:
    from .model import ModelError

    try:
        a = build_parser().parse_args(argv)
        return {"collect": cmd_collect, "train": cmd_train, "eval": cmd_eval, "pair": cmd_pair}[a.command](a)
    except (UsageError, ConfigError, ModelError, ValueError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
