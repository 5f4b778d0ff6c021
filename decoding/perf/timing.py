"""Timing forwards over k new tokens on a loaded model: the measurements behind a step-cost curve
(perf/measure.py adds the loop's overhead and caches it; perf/costs.py measures a short curve at first
use). Needs torch and a LoadedModel; knows neither the decode loop nor the curve files, so that both
can reach it."""

from __future__ import annotations

import statistics
import time
from typing import Callable


def timing_ids(lm, length: int):
    """``length`` token ids drawn from the vocabulary with a fixed seed, on the model's device (1 x length)."""
    import torch

    vocab = lm.model.get_input_embeddings().num_embeddings
    g = torch.Generator().manual_seed(0)
    return torch.randint(0, vocab, (1, length), generator=g).to(lm.model.device)


def forward_seconds(lm, ks, context: int, repeats: int, say: Callable[[float, str], None] | None = None,
                    share: float = 1.0) -> tuple[int, list[int], list[float]]:
    """(context, ks, seconds): one forward over k new tokens (all logits, plain causal mask) on top
    of ``context`` cached tokens, for each k (1 always among them; a compiled step's larger sizes
    left out: they run eagerly), timed in ``repeats`` rounds after a warm-up round, each k right
    after a 1-token forward. The k=1 point is the median 1-token time and each other point that
    times the median of its ratios to the 1-token forward just before it (on a shared machine the
    speed drifts by tens of percent within a minute: a ratio of two forwards 50 ms apart does not).
    ``context`` is cut to fit the model's positions; ``say(fraction, message)`` hears the progress,
    scaled to ``share`` of the whole."""
    ks = sorted({int(k) for k in ks} | {1})
    model = lm.model
    limit = getattr(model.config, "max_position_embeddings", None) or 10**9
    context = max(1, min(context, limit - max(ks) - 1))
    compiled = getattr(lm, "compiled", None)
    if compiled is not None:  # the compiled step: only the fed sizes it compiles (larger ones run eagerly)
        from ..compiled import FED_SIZES

        ks = [k for k in ks if k <= FED_SIZES[-1]]
    tell = say or (lambda frac, msg: None)
    times, ratios = _time_forwards(model, timing_ids(lm, context + max(ks)), context, ks, repeats + 1,
                                   lambda f, m: tell(f * share, m), compiled)
    one = statistics.median(times[1])
    return context, ks, [one * statistics.median(ratios[k]) if k > 1 else one for k in ks]


def _time_forwards(model, ids, context: int, ks: list[int], rounds: int, say, compiled=None) -> tuple[dict, dict]:
    """(k -> seconds of one forward over ids[context:context + k] after the first ``context`` ids,
    k -> its ratios to a 1-token forward timed just before it), one per round but the first (a
    warm-up, which also compiles each fed size of a ``compiled`` step, decoding.compiled.CompiledStep)."""
    import torch
    from transformers import DynamicCache

    from ..model import cache_kw

    kw = cache_kw(type(model))
    sync = torch.cuda.synchronize if model.device.type == "cuda" else (lambda: None)
    times: dict[int, list[float]] = {k: [] for k in ks}
    ratios: dict[int, list[float]] = {k: [] for k in ks}

    def forward(k: int) -> float:
        sync()
        t0 = time.perf_counter()
        if compiled is None:
            model(input_ids=ids[:, context:context + k], use_cache=True, **{kw: cache})
        else:
            compiled.forward(cache, ids[0, context:context + k].tolist(), None, None, context)
        sync()
        cache.crop(-(int(cache.get_seq_length()) - context))  # back to the context (a compiled step wrote its padding too)
        return time.perf_counter() - t0

    with torch.inference_mode():
        cache = DynamicCache(config=model.config) if compiled is None else compiled.acquire(context + max(ks), kw)
        if cache is None:
            raise RuntimeError("the compiled step's cache is busy or too short for this curve")
        try:
            return _rounds(model, ids, context, ks, rounds, say, forward, cache, kw, times, ratios)
        finally:
            if compiled is not None:
                compiled.release(cache)


def _rounds(model, ids, context, ks, rounds, say, forward, cache, kw, times, ratios) -> tuple[dict, dict]:
    """The timing rounds of ``_time_forwards``, after the context's prefill into ``cache``."""
    model(input_ids=ids[:, :context], use_cache=True, logits_to_keep=1, **{kw: cache})
    # rounds over all k (not all repeats of one k in a row), so a burst of load elsewhere on
    # the machine spreads over the whole curve instead of bending one point of it
    for r in range(rounds):
        for i, k in enumerate(ks):
            say((r * len(ks) + i) / (rounds * len(ks) + 1), f"round {r + 1}/{rounds}: forward over {k} new tokens")
            one = forward(1) if k > 1 else 0.0
            t = forward(k)
            if r:
                times[k].append(t)
                ratios[k].append(t / one if one > 0 else 1.0)
    return times, ratios
