"""Measuring the step-cost curve: forwards over k new tokens timed on a loaded model (perf/timing.py),
and a short AR decode for the loop's overhead. Needs torch and a LoadedModel; the curve is cached per
model, device, dtype, thread count and kernel (perf/costs.py)."""

from __future__ import annotations

from typing import Callable

from .costs import DEFAULT_CONTEXT, DEFAULT_KS, CostCurve, cached_curve, curve_kernel, curve_of, curve_path
from .timing import forward_seconds, timing_ids


def measure_curve(lm, ks=DEFAULT_KS, context: int = DEFAULT_CONTEXT, repeats: int = 5,
                  progress: Callable[[float, str], None] | None = None, ar_tokens: int = 24) -> CostCurve:
    """The step-cost curve of ``lm``: one forward over k new tokens on top of ``context`` cached
    tokens, for each k, timed in ``repeats`` rounds (decoding.perf.timing.forward_seconds); then a
    short AR decode of ``ar_tokens`` for the share of an AR step spent outside the forward (0: none)."""
    say = progress or (lambda frac, msg: None)
    context, ks, seconds = forward_seconds(lm, ks, context, repeats, say, share=0.95 if ar_tokens else 1.0)
    ar_overhead = None
    if ar_tokens:
        say(0.95, f"a short AR decode ({ar_tokens} tokens) for the loop overhead")
        ar_overhead = _ar_overhead(lm, timing_ids(lm, min(context, 64))[0].tolist(), ar_tokens)
    say(1.0, "done")
    return curve_of(lm, context, ks, seconds, repeats, ar_overhead)


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
