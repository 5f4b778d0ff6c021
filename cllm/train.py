"""Consistency training of a CLLM: a LoRA adapter (or the full model), the training loop with its
metrics file, and saving the result so ``decoding.model.load_model`` can load it."""

from __future__ import annotations

import json
import os
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


STATE_FILE = "train_state.pt"
CHECKPOINT_DIR = "checkpoint"
EVAL_AT = (0.1, 0.25, 0.5, 1.0)


def eval_steps(total_steps: int, fractions=EVAL_AT) -> list[int]:
    """The steps after which the learning curve is evaluated: each fraction of ``total_steps``."""
    return sorted({min(total_steps, max(1, int(round(f * total_steps)))) for f in fractions if f > 0})


def _state_path(out_dir: str) -> Path:
    return Path(out_dir) / CHECKPOINT_DIR / STATE_FILE


def _save_state(out_dir: str, state: dict) -> None:
    """Write the training state atomically (a kill while writing leaves the previous one)."""
    import torch

    p = _state_path(out_dir)
    p.parent.mkdir(parents=True, exist_ok=True)
    tmp = p.with_suffix(".tmp")
    torch.save(state, tmp)
    os.replace(tmp, p)


def load_state(out_dir: str) -> dict | None:
    """The training state of ``out_dir``'s last checkpoint, or None."""
    import torch

    p = _state_path(out_dir)
    return torch.load(p, weights_only=False) if p.is_file() else None


def train(model, items: list[dict], out_dir: str | None = None, epochs: float = 1.0, lr: float = 2e-4,
          w_ar: float = 10.0, w_local: float = 0.0, seed: int = 0, grad_clip: float = 1.0, warmup: int = 10,
          save_every: int = 0, save: Callable[[str], None] | None = None, progress: bool = True,
          max_seconds: float = 0.0, log: Callable[[dict], None] | None = None, resume: bool = False,
          evaluate: Callable[[Any], dict] | None = None, eval_at=EVAL_AT, max_steps: int = 0) -> list[dict]:
    """Consistency training over ``items``; returns this run's metrics rows (also appended to
    ``out_dir/metrics.jsonl``). ``save(path)`` writes a loadable checkpoint every ``save_every`` steps.

    With ``out_dir``, the training state (trainable weights, optimizer and scheduler state, the RNG
    states, the data order and position, the counters) goes to ``out_dir/checkpoint/train_state.pt``
    every ``save_every`` steps, after each learning-curve evaluation, when ``max_seconds`` (or
    ``max_steps``: steps of this run) cuts the run and at the end; ``resume=True`` continues from it (the metrics file is cut back to that
    checkpoint), so runs cut by a time limit and resumed end with the same weights and metrics rows
    as one uncut run (the rows' ``seconds`` count training time over all runs).

    ``evaluate(model) -> dict``: the learning curve; called before the first step and after
    ``eval_at`` fractions of the steps, each result written to the metrics file as
    {"at_step", "fraction", **result} (``read_evals``). Its ``state`` attribute, if any, is kept in the
    checkpoint (e.g. the base's answers it compares against)."""
    t = _Trainer(model, items, out_dir, epochs, lr, w_ar, w_local, seed, grad_clip, warmup, log, evaluate, eval_at)
    if resume and out_dir:
        t.restore(load_state(out_dir))
    return t.run(save, save_every, progress, max_seconds, max_steps)


class _Trainer:
    """The state of one training run (train()'s body): setup, restoring a checkpoint, the loop."""

    def __init__(self, model, items, out_dir, epochs, lr, w_ar, w_local, seed, grad_clip, warmup, log,
                 evaluate, eval_at):
        import torch

        self.model, self.items, self.out_dir, self.log, self.evaluate = model, items, out_dir, log, evaluate
        self.w_ar, self.w_local, self.grad_clip = w_ar, w_local, grad_clip
        self.rng = random.Random(seed)
        torch.manual_seed(seed)
        self.total_steps = max(1, int(round(epochs * len(items))))
        self.params, self.opt, self.sched = _optimizer(model, lr, warmup, self.total_steps)
        self.config = {"items": len(items), "first_item": items[0].get("id"), "last_item": items[-1].get("id"),
                       "total_steps": self.total_steps, "lr": lr, "w_ar": w_ar, "w_local": w_local, "seed": seed,
                       "grad_clip": grad_clip, "warmup": warmup, "trainable": sum(p.numel() for p in self.params)}
        self.named = {k: p for k, p in model.named_parameters() if p.requires_grad}
        self.order: list[int] = []
        self.smoothed: dict[str, float] = {}
        self.start, self.tokens, self.before = 0, 0, 0.0
        self.state = None
        self.at = set(eval_steps(self.total_steps, eval_at)) if evaluate else set()
        self.rows: list[dict] = []
        self.metrics_f = None

    def restore(self, state: dict | None) -> None:
        """Continue from a checkpoint's state (None: nothing to continue from, start afresh)."""
        import torch

        if state is None:
            return
        diff = {k: (state["config"].get(k), v) for k, v in self.config.items() if state["config"].get(k) != v}
        if diff:
            raise ConfigError("the checkpoint in " + self.out_dir + " was made with other settings: "
                              + ", ".join(f"{k} {a} (now {b})" for k, (a, b) in diff.items()))
        with torch.no_grad():
            for k, v in state["params"].items():
                self.named[k].copy_(v)
        self.opt.load_state_dict(state["opt"])
        self.sched.load_state_dict(state["sched"])
        self.rng.setstate(state["rng"])
        torch.set_rng_state(state["torch_rng"])
        self.order, self.smoothed = list(state["order"]), dict(state["run"])
        self.start, self.tokens, self.before = state["step"], state["tokens"], state["seconds"]
        if self.evaluate is not None and state.get("eval_state") is not None:
            self.evaluate.state = state["eval_state"]
        self.state = state

    def _open_metrics(self) -> None:
        if not self.out_dir:
            return
        Path(self.out_dir).mkdir(parents=True, exist_ok=True)
        mp = Path(self.out_dir) / METRICS_FILE
        if self.state is not None and mp.is_file():
            with open(mp, "r+b") as f:  # drop the rows written after the checkpoint
                f.truncate(self.state["metrics_bytes"])
        self.metrics_f = open(mp, "a" if self.state is not None else "w", encoding="utf-8")

    def elapsed(self) -> float:
        return self.before + time.perf_counter() - self.t0

    def write(self, row: dict) -> None:
        if self.metrics_f:
            self.metrics_f.write(json.dumps(row) + "\n")
            self.metrics_f.flush()
        if self.log:
            self.log(row)

    def run_eval(self, step: int) -> None:
        self.model.eval()
        res = self.evaluate(self.model)
        self.model.train()
        self.write({"at_step": step, "fraction": round(step / self.total_steps, 4), **res})

    def checkpoint(self, step: int, done: bool = False) -> None:
        import torch

        if not self.out_dir:
            return
        _save_state(self.out_dir, {
            "step": step, "done": done, "config": self.config, "order": list(self.order), "rng": self.rng.getstate(),
            "torch_rng": torch.get_rng_state(), "opt": self.opt.state_dict(), "sched": self.sched.state_dict(),
            "params": {k: p.detach().clone() for k, p in self.named.items()}, "seconds": self.elapsed(),
            "tokens": self.tokens, "run": dict(self.smoothed),
            "metrics_bytes": self.metrics_f.tell() if self.metrics_f else 0,
            "eval_state": getattr(self.evaluate, "state", None)})

    def _one_step(self, step: int, bar) -> None:
        item = _next_item(self.items, self.order, self.rng)
        losses = _step(self.model, item, self.rng, self.opt, self.sched, self.params, self.w_ar, self.w_local,
                       self.grad_clip)
        self.tokens += (len(item["prompt_ids"]) + len(item["fixed_point"])) * (3 if "local" in losses else 2)
        row = _metrics_row(step, len(self.items), losses, self.sched, self.t0, self.tokens)
        row["seconds"] = round(self.elapsed(), 3)
        self.rows.append(row)
        self.write(row)
        bar.set_postfix({k: f"{v:.3f}" for k, v in _smooth(self.smoothed, row).items()})

    def run(self, save, save_every: int, progress: bool, max_seconds: float, max_steps: int) -> list[dict]:
        from tqdm import tqdm

        self._open_metrics()
        self.t0 = time.perf_counter()
        self.model.train()
        bar = tqdm(range(self.start, self.total_steps), desc="train", unit="step", file=sys.stderr,
                   disable=not progress, initial=self.start, total=self.total_steps)
        try:
            if self.evaluate and self.start == 0:
                self.run_eval(0)
            for step in bar:
                self._one_step(step, bar)
                last = step + 1 == self.total_steps
                if step + 1 in self.at:
                    self.run_eval(step + 1)
                if save and save_every and (step + 1) % save_every == 0 and not last:
                    save(str(Path(self.out_dir or ".") / CHECKPOINT_DIR))
                cut = ((bool(max_seconds) and time.perf_counter() - self.t0 > max_seconds)
                       or (bool(max_steps) and len(self.rows) >= max_steps)) and not last
                if last or cut or step + 1 in self.at or (save_every and (step + 1) % save_every == 0):
                    self.checkpoint(step + 1, done=last)
                if cut:
                    break
        finally:
            bar.close()
            if self.metrics_f:
                self.metrics_f.close()
            self.model.eval()
        return self.rows


def read_evals(path: str) -> list[dict]:
    """The learning-curve rows of a metrics.jsonl (``train``'s ``evaluate`` results)."""
    return [d for _, d in jsonl(path, strict=False) if isinstance(d, dict) and isinstance(d.get("at_step"), int)]


def save_model(model, tokenizer, path: str, base: str, lora: bool, meta: dict | None = None,
               int8: bool = False) -> None:
    """Write the CLLM: a LoRA adapter (fp16 weights, or with ``int8`` int8 ones with per-row scales,
    ``decoding.lora_int8``: half the bytes; ``base`` recorded so load_model finds it), or the full
    model with its tokenizer. ``meta`` goes to cllm.json."""
    Path(path).mkdir(parents=True, exist_ok=True)
    if lora:
        import torch
        from safetensors.torch import load_file, save_file

        from decoding.lora_int8 import quantized, remove_weights, write_int8_weights

        remove_weights(Path(path))  # an earlier save in this folder, in either format
        model.save_pretrained(path)
        (Path(path) / "README.md").unlink(missing_ok=True)  # peft's empty model card
        f = Path(path) / "adapter_model.safetensors"
        if int8:
            write_int8_weights(Path(path), quantized(load_file(str(f))))
            f.unlink()
        else:
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
