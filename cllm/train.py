"""Consistency training of a CLLM: a LoRA adapter (or the full model), the training loop with its
metrics file, and saving the result so ``decoding.model.load_model`` can load it."""

from __future__ import annotations

import json
import random
import sys
import time
from pathlib import Path
from typing import Any, Callable

from decoding import ConfigError
from decoding.io import jsonl

from .losses import item_losses

METRICS_FILE = "metrics.jsonl"
META_FILE = "cllm.json"


def add_lora(model, r: int = 8, alpha: int = 16, dropout: float = 0.0, targets: str = "all"):
    """Wrap ``model`` with a peft LoRA adapter (attention + MLP projections, or ``targets`` list)."""
    from peft import LoraConfig, get_peft_model

    mods = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"] if targets == "all" \
        else [t for t in targets.split(",") if t]
    cfg = LoraConfig(r=r, lora_alpha=alpha, lora_dropout=dropout, target_modules=mods, task_type="CAUSAL_LM")
    return get_peft_model(model, cfg)


def _optimizer(model, lr: float, warmup: int, total_steps: int):
    """(trainable parameters, AdamW, linear warm-up then linear decay to 0 over ``total_steps``)."""
    import torch

    params = [p for p in model.parameters() if p.requires_grad]
    if not params:
        raise ConfigError("the model has no trainable parameters")
    opt = torch.optim.AdamW(params, lr=lr, weight_decay=0.0)
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt, lambda s: min(1.0, (s + 1) / max(1, warmup)) * max(0.0, 1 - s / total_steps) if warmup else max(0.0, 1 - s / total_steps))
    return params, opt, sched


def _next_item(items: list[dict], order: list[int], rng: random.Random) -> dict:
    """The next item of a shuffled pass over ``items`` (a new shuffle when ``order`` runs out)."""
    if not order:
        order.extend(range(len(items)))
        rng.shuffle(order)
    return items[order.pop()]


def _step(model, item: dict, rng: random.Random, opt, sched, params, w_ar: float, w_local: float,
          grad_clip: float) -> dict[str, Any]:
    """One optimisation step on one item; its losses."""
    import torch

    losses = item_losses(model, item, rng, w_ar, w_local)
    opt.zero_grad(set_to_none=True)
    losses["total"].backward()
    if grad_clip:
        torch.nn.utils.clip_grad_norm_(params, grad_clip)
    opt.step()
    sched.step()
    return losses


def _metrics_row(step: int, n_items: int, losses: dict, sched, t0: float, tokens: int) -> dict:
    return {"step": step + 1, "epoch": round((step + 1) / n_items, 4),
            **{k: round(float(v.detach()), 6) for k, v in losses.items()},
            "lr": sched.get_last_lr()[0], "seconds": round(time.perf_counter() - t0, 3), "tokens": tokens}


def _smooth(run: dict[str, float], row: dict) -> dict[str, float]:
    """Exponential running means of the losses (the progress bar's)."""
    for k in ("consistency", "ar", "local"):
        if k in row:
            run[k] = row[k] if k not in run else 0.95 * run[k] + 0.05 * row[k]
    return run


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
    total_steps = max(1, int(round(epochs * len(items))))
    params, opt, sched = _optimizer(model, lr, warmup, total_steps)
    metrics_f = None
    if out_dir:
        Path(out_dir).mkdir(parents=True, exist_ok=True)
        metrics_f = open(Path(out_dir) / METRICS_FILE, "w", encoding="utf-8")
    rows: list[dict] = []
    order: list[int] = []
    run: dict[str, float] = {}
    model.train()
    t0 = time.perf_counter()
    tokens = 0
    bar = tqdm(range(total_steps), desc="train", unit="step", file=sys.stderr, disable=not progress)
    try:
        for step in bar:
            item = _next_item(items, order, rng)
            losses = _step(model, item, rng, opt, sched, params, w_ar, w_local, grad_clip)
            tokens += (len(item["prompt_ids"]) + len(item["fixed_point"])) * (3 if "local" in losses else 2)
            row = _metrics_row(step, len(items), losses, sched, t0, tokens)
            rows.append(row)
            if metrics_f:
                metrics_f.write(json.dumps(row) + "\n")
                metrics_f.flush()
            if log:
                log(row)
            bar.set_postfix({k: f"{v:.3f}" for k, v in _smooth(run, row).items()})
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
