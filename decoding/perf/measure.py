"""Measuring the step-cost curve: time forwards over k new tokens on a loaded model, and a short
AR decode for the loop's overhead. Needs torch and a LoadedModel; the curve is cached per model,
device, dtype and thread count (perf/costs.py)."""

from __future__ import annotations

import os
import statistics
import time
from typing import Callable

from .costs import DEFAULT_CONTEXT, DEFAULT_KS, CostCurve, cached_curve, curve_kernel, curve_path


def measure_curve(lm, ks=DEFAULT_KS, context: int = DEFAULT_CONTEXT, repeats: int = 5,
                  progress: Callable[[float, str], None] | None = None, ar_tokens: int = 24) -> CostCurve:
    """Time one forward over k new tokens (all logits, plain causal mask) on top of ``context``
    cached tokens, for each k: ``repeats`` rounds after a warm-up round, each k timed right after a
    1-token forward; the curve's k=1 point is the median 1-token time and each other point that
    times the median of its ratios to the 1-token forward just before it (on a shared machine the
    speed drifts by tens of percent within a minute: a ratio of two forwards 50 ms apart does not);
    then a short AR decode for the share of an AR step spent outside the forward."""
    import torch

    from ..paths import cpu_name

    ks = sorted({int(k) for k in ks} | {1})
    model = lm.model
    limit = getattr(model.config, "max_position_embeddings", None) or 10**9
    context = max(1, min(context, limit - max(ks) - 1))
    vocab = model.get_input_embeddings().num_embeddings
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(0, vocab, (1, context + max(ks)), generator=g).to(model.device)
    say = progress or (lambda frac, msg: None)
    compiled = getattr(lm, "compiled", None)
    if compiled is not None:  # the compiled step: only the fed sizes it compiles (larger ones run eagerly)
        from ..compiled import FED_SIZES

        ks = [k for k in ks if k <= FED_SIZES[-1]]
    times, ratios = _time_forwards(model, ids, context, ks, repeats + 1, say, compiled)
    one = statistics.median(times[1])
    say(1 - 1 / (len(ks) * (repeats + 1) + 1), f"a short AR decode ({ar_tokens} tokens) for the loop overhead")
    ar_overhead = _ar_overhead(lm, ids[0, :min(context, 64)].tolist(), ar_tokens) if ar_tokens else None
    say(1.0, "done")
    return CostCurve(model_id=lm.model_id, device=str(lm.device), dtype=str(lm.dtype), threads=torch.get_num_threads(),
                     context=context, ks=ks, seconds=[one * statistics.median(ratios[k]) if k > 1 else one for k in ks],
                     repeats=repeats,
                     ar_overhead=ar_overhead, measured_at=time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
                     load_avg=os.getloadavg()[0] if hasattr(os, "getloadavg") else None,
                     kernel=curve_kernel(lm), cpu=cpu_name())


def _time_forwards(model, ids, context: int, ks: list[int], rounds: int, say, compiled=None) -> tuple[dict, dict]:
    """(k -> seconds of one forward over ids[context:context + k] after the first ``context`` ids,
    k -> its ratios to a 1-token forward timed just before it), one per round but the first (a
    warm-up, which also compiles each fed size of a ``compiled`` step, decoding.compiled.CompiledStep)."""
    import torch
    from transformers import DynamicCache

    from ..loop import cache_kw

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


def _ar_overhead(lm, prompt_ids: list[int], tokens: int) -> float | None:
    """The share of an AR step spent outside the forward, from a short AR decode (None if too short)."""
    from ..loop import decode

    tr = decode(lm, prompt_ids, "ar", {}, tokens, record=False)
    step_s = tr.seconds - tr.prefill_seconds
    if tr.n_steps >= 4 and step_s > 0:
        return max(0.0, (step_s - tr.forward_seconds) / step_s)
    return None


def load_or_measure(lm, progress=None, force: bool = False, **kw) -> CostCurve:
    """The cached curve for this model/device/dtype/threads, measured (and cached) if missing."""
    import torch

    threads = torch.get_num_threads()
    if not force:
        c = cached_curve(lm.model_id, str(lm.device), str(lm.dtype), threads, curve_kernel(lm))
        if c is not None:
            return c
    c = measure_curve(lm, progress=progress, **kw)
    c.save(curve_path(c.model_id, c.device, c.dtype, c.threads, c.kernel))
    return c
