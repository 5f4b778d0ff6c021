"""Consistency LLMs (CLLM, Kou et al., ICML 2024): collect Jacobi trajectories, train, evaluate.

    python -m cllm collect --prompts FILE --n 16 --max-new-tokens 64 --out data.jsonl
    python -m cllm train --data data.jsonl --out DIR [--lora-r 8] [--epochs 1]
    python -m cllm eval --cllm DIR --prompts FILE --out results.jsonl
    python -m cllm pair --cllm DIR --prompts FILE --out-dir assets/cllm   (the app's traces)

``data`` (the item format, collection), ``losses`` (the loss definitions), ``train`` (LoRA, the
training loop, saving), ``evaluate`` (base vs CLLM, the app's pair of traces), ``cli``. The package
uses the decoding core only through ``decoding.decode`` / ``ConfigError``, ``decoding.io`` and
``decoding.model.load_model``; the core never imports it.
"""

from .cli import main
from .data import ITEM_KEYS, check_item, collect, items_from_trace, read_items, select, trajectories
from .evaluate import CurveEval, answer_nll, compare, degenerate, drift, evaluate, pair, pair_table, repeated_share, report
from .losses import block_logits, consistency_loss, first_wrong, item_losses, kl_from, mean_losses
from .train import META_FILE, METRICS_FILE, add_lora, eval_steps, load_state, read_evals, read_metrics, save_model, train

__all__ = ["pair_table", "CurveEval", "degenerate", "drift", "eval_steps", "load_state", "read_evals", "repeated_share", "ITEM_KEYS", "META_FILE", "METRICS_FILE", "add_lora", "answer_nll", "block_logits", "check_item", "collect",
           "compare", "consistency_loss", "evaluate", "first_wrong", "item_losses", "items_from_trace", "kl_from",
           "main", "mean_losses", "pair", "read_items", "read_metrics", "report", "save_model", "select", "train",
           "trajectories"]
