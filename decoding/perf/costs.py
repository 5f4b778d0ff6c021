"""What a step costs on this hardware, and the speedup account of a run.

Tokens per step alone does not explain wall-clock speed: one forward over k new tokens costs
about c(k) one-token forwards, and c depends on the device (a 2-core CPU: c(32) ~ 3; a GPU:
c(32) ~ 1). The account of a run (trace or bench row) against AR on the same prompt:

    AR decode time      = S_ar * t1 / (1 - o_ar)          S_ar = tokens committed by steps
    method decode time  = S * t1 * cost / (1 - o)         S = steps, cost = mean c(fed) / c(1)
    decode speedup      = tokens_per_step / cost * (1 - o) / (1 - o_ar)

t1 is the time of a one-token forward, o the share of step time outside the forward (propose,
verify, pool, Python), measured from the run itself. The prefill is the same for both and dilutes
the speedup: with prefill share f of the AR run, speedup = 1 / (f + (1 - f) / decode speedup).

Worked example: 2.0 tokens/step, steps fed 8 tokens each with c(8) = 1.6, overhead 10% vs AR 5%:
decode speedup = 2.0 / 1.6 * 0.90 / 0.95 = 1.18x.

No Streamlit or Plotly here; measuring needs torch and a LoadedModel, the accounts are plain Python.
"""

from __future__ import annotations

import bisect
import json
import math
import os
import re
import statistics
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable

from ..analysis import provenance_shares
from ..trace import Trace

CURVE_VERSION = 1
DEFAULT_KS = (1, 2, 4, 8, 16, 24, 32, 48, 64, 96, 128, 192, 256)
DEFAULT_CONTEXT = 256
DISAGREE = 0.15  # prediction and measurement disagree when they differ by more than this


class CurveError(ValueError):
    """A cost-curve file that does not follow the schema."""


# ---- the curve --------------------------------------------------------------------------------
@dataclass
class CostCurve:
    """Median seconds of one forward over k new tokens on top of ``context`` cached tokens."""

    model_id: str
    device: str
    dtype: str
    threads: int
    context: int
    ks: list[int]
    seconds: list[float]
    repeats: int = 0
    ar_overhead: float | None = None  # share of an AR step spent outside the forward, this machine
    measured_at: str = ""
    load_avg: float | None = None  # the machine's 1-minute load average after measuring (busy: noisy curve)
    version: int = CURVE_VERSION

    def relative(self) -> list[float]:
        """c(k) / c(1) at each measured k."""
        return [s / self.seconds[0] for s in self.seconds]

    def relative_cost(self, k: float) -> float:
        """c(k) / c(1), linear between measured points, linear past the last two (k <= 1: 1.0).

        >>> CostCurve("m", "cpu", "float32", 2, 256, [1, 2, 4], [1.0, 1.5, 2.5]).relative_cost(3)
        2.0
        """
        rel = self.relative()
        if k <= self.ks[0]:
            return rel[0]
        i = bisect.bisect_left(self.ks, k)
        if i < len(self.ks) and self.ks[i] == k:
            return rel[i]
        if i >= len(self.ks):  # extrapolate from the last two points
            i = len(self.ks) - 1
        k0, k1, r0, r1 = self.ks[i - 1], self.ks[i], rel[i - 1], rel[i]
        return r0 + (r1 - r0) * (k - k0) / (k1 - k0)

    @property
    def regime(self) -> str:
        """One phrase for where the numbers come from."""
        return f"{self.device} ({self.dtype}, {self.threads} thread{'s' if self.threads != 1 else ''}), {self.context} cached tokens"

    def key(self) -> str:
        return curve_key(self.model_id, self.device, self.dtype, self.threads)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def save(self, path: str | Path) -> None:
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        tmp = f"{path}.tmp{os.getpid()}"
        with open(tmp, "w", encoding="utf-8") as f:
            json.dump(self.to_dict(), f, indent=1)
        os.replace(tmp, path)

    @classmethod
    def from_dict(cls, d: Any) -> "CostCurve":
        if not isinstance(d, dict) or d.get("version") != CURVE_VERSION:
            raise CurveError("not a cost curve of version %d" % CURVE_VERSION)
        try:
            c = cls(**{k: d[k] for k in cls.__dataclass_fields__ if k in d})
        except TypeError as e:
            raise CurveError(f"cost curve lacks a field: {e}") from None
        ok = (len(c.ks) == len(c.seconds) >= 1 and c.ks[0] == 1 and all(a < b for a, b in zip(c.ks, c.ks[1:]))
              and all(isinstance(s, (int, float)) and s > 0 and math.isfinite(s) for s in c.seconds))
        if not ok:
            raise CurveError("cost curve: ks must start at 1 and increase, seconds must be positive, one per k")
        return c

    @classmethod
    def load(cls, path: str | Path) -> "CostCurve":
        try:
            with open(path, encoding="utf-8") as f:
                return cls.from_dict(json.load(f))
        except json.JSONDecodeError as e:
            raise CurveError(f"{path} is not JSON: {e}") from None


def curve_key(model_id: str, device: str, dtype: str, threads: int) -> str:
    slug = re.sub(r"[^A-Za-z0-9._-]+", "_", model_id).strip("_")[:80]
    return f"{slug}__{device}__{dtype}__t{threads}"


def curve_path(model_id: str, device: str, dtype: str, threads: int) -> Path:
    from ..model import cache_dir

    return cache_dir() / "costs" / f"{curve_key(model_id, device, dtype, threads)}.json"


def cached_curve(model_id: str, device: str, dtype: str, threads: int | None = None) -> CostCurve | None:
    """The measured curve in the cache folder, or None."""
    if threads is None:
        import torch

        threads = torch.get_num_threads()
    p = curve_path(model_id, device, dtype, threads)
    try:
        return CostCurve.load(p)
    except (OSError, CurveError):
        return None


def find_curve(model_id: str, device: str, dtype: str, shipped: tuple = ()) -> tuple[CostCurve, str] | None:
    """A curve for this model/device/dtype without importing torch: the newest one measured into
    the cache folder (any thread count), else one of the ``shipped`` files that matches.
    Returns (curve, where it came from) or None."""
    from ..model import cache_dir

    prefix = curve_key(model_id, device, dtype, 0).rsplit("__t", 1)[0] + "__t"
    found = sorted((cache_dir() / "costs").glob(f"{glob_escape(prefix)}*.json"), key=lambda p: p.stat().st_mtime, reverse=True)
    for p in found:
        try:
            return CostCurve.load(p), f"measured on this machine ({p.name})"
        except (OSError, CurveError):
            continue
    for p in shipped:
        try:
            c = CostCurve.load(p)
        except (OSError, CurveError):
            continue
        if (c.model_id, c.device, c.dtype) == (model_id, device, dtype):
            return c, f"shipped with the app ({Path(p).name}, measured {c.measured_at})"
    return None


def glob_escape(s: str) -> str:
    return re.sub(r"([*?\[])", r"[\1]", s)


def measure_curve(lm, ks=DEFAULT_KS, context: int = DEFAULT_CONTEXT, repeats: int = 5,
                  progress: Callable[[float, str], None] | None = None, ar_tokens: int = 24) -> CostCurve:
    """Time one forward over k new tokens (all logits, plain causal mask) on top of ``context``
    cached tokens, for each k: median of ``repeats`` rounds after a warm-up round; then a short AR decode for
    the share of an AR step spent outside the forward."""
    import torch
    from transformers import DynamicCache

    from ..loop import Run, cache_kw

    ks = sorted({int(k) for k in ks} | {1})
    model = lm.model
    limit = getattr(model.config, "max_position_embeddings", None) or 10**9
    context = max(1, min(context, limit - max(ks) - 1))
    vocab = model.get_input_embeddings().num_embeddings
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(0, vocab, (1, context + max(ks)), generator=g).to(model.device)
    kw = cache_kw(type(model))
    sync = torch.cuda.synchronize if model.device.type == "cuda" else (lambda: None)
    times: dict[int, list[float]] = {k: [] for k in ks}
    rounds = repeats + 1  # round 0 is a warm-up
    with torch.inference_mode():
        cache = DynamicCache(config=model.config)
        model(input_ids=ids[:, :context], use_cache=True, logits_to_keep=1, **{kw: cache})
        # rounds over all k (not all repeats of one k in a row), so a burst of load elsewhere on
        # the machine spreads over the whole curve instead of bending one point of it
        for r in range(rounds):
            for i, k in enumerate(ks):
                if progress:
                    progress((r * len(ks) + i) / (rounds * len(ks) + 1), f"round {r + 1}/{rounds}: forward over {k} new tokens")
                x = ids[:, context:context + k]
                sync()
                t0 = time.perf_counter()
                model(input_ids=x, use_cache=True, **{kw: cache})
                sync()
                if r:
                    times[k].append(time.perf_counter() - t0)
                cache.crop(-k)  # back to the context
    seconds = [statistics.median(times[k]) for k in ks]
    if progress:
        progress(rounds * len(ks) / (rounds * len(ks) + 1), f"a short AR decode ({ar_tokens} tokens) for the loop overhead")
    ar_overhead = None
    if ar_tokens:
        tr = Run(lm, ids[0, :min(context, 64)].tolist(), "ar", {}, ar_tokens, record=False).decode()
        step_s = tr.seconds - tr.prefill_seconds
        if tr.n_steps >= 4 and step_s > 0:
            ar_overhead = max(0.0, (step_s - tr.forward_seconds) / step_s)
    if progress:
        progress(1.0, "done")
    return CostCurve(model_id=lm.model_id, device=str(lm.device), dtype=str(lm.dtype), threads=torch.get_num_threads(),
                     context=context, ks=ks, seconds=seconds, repeats=repeats, ar_overhead=ar_overhead,
                     measured_at=time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
                     load_avg=os.getloadavg()[0] if hasattr(os, "getloadavg") else None)


def load_or_measure(lm, progress=None, force: bool = False, **kw) -> CostCurve:
    """The cached curve for this model/device/dtype/threads, measured (and cached) if missing."""
    import torch

    threads = torch.get_num_threads()
    if not force:
        c = cached_curve(lm.model_id, str(lm.device), str(lm.dtype), threads)
        if c is not None:
            return c
    c = measure_curve(lm, progress=progress, **kw)
    c.save(curve_path(c.model_id, c.device, c.dtype, c.threads))
    return c


# ---- run statistics: a trace or a bench row ---------------------------------------------------
@dataclass
class RunStats:
    """What the account needs from one run (a Trace or a `python -m decoding bench` row)."""

    method: str
    fed: list[int]  # tokens fed per step
    step_tokens: int  # tokens committed by steps (all but the prefill's)
    seconds: float  # the whole run, prefill included
    prefill_seconds: float
    forward_seconds: float  # the steps' forwards
    new_tokens: int
    params: dict = field(default_factory=dict)

    @property
    def steps(self) -> int:
        return len(self.fed)

    @property
    def tokens_per_step(self) -> float:
        return self.step_tokens / self.steps if self.steps else 0.0

    @property
    def step_seconds(self) -> float:
        return max(self.seconds - self.prefill_seconds, 0.0)

    @property
    def overhead(self) -> float:
        """Share of step time outside the forward."""
        s = self.step_seconds
        return max(0.0, (s - self.forward_seconds) / s) if s > 0 else 0.0

    @property
    def tokens_per_s(self) -> float:
        return self.new_tokens / self.seconds if self.seconds > 0 else 0.0


def stats(run: Trace | dict | RunStats) -> RunStats:
    if isinstance(run, RunStats):
        return run
    if isinstance(run, Trace):
        return RunStats(run.method, [s.fed for s in run.steps], run.step_tokens, run.seconds, run.prefill_seconds,
                        run.forward_seconds, len(run.output_ids), dict(run.params))
    if isinstance(run, dict):
        if run.get("fed") is None:
            raise ValueError(f"a {run.get('method', '?')} bench row without per-step fed counts has no account")
        new = len(run["output_ids"]) if "output_ids" in run else int(run["new_tokens"])
        return RunStats(run["method"], list(run["fed"]), max(new - 1, 0) if run["fed"] else 0, float(run["seconds"]),
                        float(run.get("prefill_seconds") or 0.0), float(run.get("forward_seconds") or 0.0), new,
                        dict(run.get("params") or {}))
    raise TypeError(f"cannot account for a {type(run).__name__}")


# ---- the account ------------------------------------------------------------------------------
@dataclass
class Account:
    method: str
    tokens_per_step: float
    step_cost: float  # mean c(fed)/c(1) over the steps: each step cost this many AR forwards
    overhead: float  # this run's share of step time outside the forward
    ar_overhead: float
    ar_overhead_from: str  # "the AR run", "the cost curve" or "assumed equal"
    overhead_factor: float  # (1 - overhead) / (1 - ar_overhead)
    decode_speedup: float  # tokens_per_step / step_cost * overhead_factor
    prefill_share: float  # of the (estimated) AR run's time
    predicted: float  # whole run, prefill included
    measured: float | None = None  # tokens/s over AR's tokens/s, same prompt
    measured_step_cost: float | None = None  # forward seconds per step over AR's
    regime: str = ""

    @property
    def error(self) -> float | None:
        """predicted / measured - 1."""
        return None if not self.measured else self.predicted / self.measured - 1

    @property
    def disagrees(self) -> bool:
        e = self.error
        return e is not None and abs(e) > DISAGREE

    def sentence(self) -> str:
        s = (f"{self.tokens_per_step:.2f} tokens/step, each step cost {self.step_cost:.2f} AR steps, "
             f"{self.overhead:.0%} overhead (AR {self.ar_overhead:.0%}): predicted {self.predicted:.2f}x")
        if self.measured is not None:
            s += f", measured {self.measured:.2f}x"
        return s + "."

    def warning(self) -> str:
        """Empty, or one sentence on why prediction and measurement may disagree."""
        if not self.disagrees:
            return ""
        why = []
        if self.measured_step_cost is not None and abs(self.measured_step_cost / self.step_cost - 1) > 0.1:
            why.append(f"its steps actually cost {self.measured_step_cost:.2f} AR forwards, not the curve's "
                       f"{self.step_cost:.2f} (another cache length, mask or load on the machine)")
        why.append("timing noise on a short run or a busy machine")
        return (f"Prediction and measurement disagree by {abs(self.error):.0%} (more than {DISAGREE:.0%}): "
                + "; ".join(why) + ".")

    def rows(self) -> list[dict]:
        """The account as (quantity, value, meaning) rows for a table."""
        out = [
            {"quantity": "tokens per step", "value": round(self.tokens_per_step, 3), "meaning": "tokens committed per forward (AR: 1)"},
            {"quantity": "step cost (curve)", "value": round(self.step_cost, 3), "meaning": "mean forward cost of a step in one-token forwards"},
        ]
        if self.measured_step_cost is not None:
            out.append({"quantity": "step cost (measured)", "value": round(self.measured_step_cost, 3),
                        "meaning": "forward seconds per step over AR's"})
        out += [
            {"quantity": "overhead", "value": round(self.overhead, 3), "meaning": "share of step time outside the forward"},
            {"quantity": "AR overhead", "value": round(self.ar_overhead, 3), "meaning": f"from {self.ar_overhead_from}"},
            {"quantity": "decode speedup", "value": round(self.decode_speedup, 3), "meaning": "tokens/step ÷ step cost × overhead factor"},
            {"quantity": "prefill share", "value": round(self.prefill_share, 3), "meaning": "of the AR run's time (same for both)"},
            {"quantity": "predicted speedup", "value": round(self.predicted, 3), "meaning": "whole run, prefill included"},
        ]
        if self.measured is not None:
            out.append({"quantity": "measured speedup", "value": round(self.measured, 3), "meaning": "tokens/s over AR's tokens/s"})
        return out


def mean_step_cost(fed: list[int], curve: CostCurve) -> float:
    """Mean relative cost of the steps: sum of c(fed)/c(1) over steps / steps."""
    return sum(curve.relative_cost(k) for k in fed) / len(fed) if fed else 1.0


def account(run, curve: CostCurve, ar=None) -> Account:
    """The speedup account of ``run`` (Trace, bench row or RunStats) on ``curve``'s hardware,
    measured against ``ar`` (an AR run of the same prompt) when given."""
    m = stats(run)
    a = stats(ar) if ar is not None else None
    tps = m.tokens_per_step
    cost = mean_step_cost(m.fed, curve)
    if a is not None and a.steps:
        o_ar, src = a.overhead, "the AR run"
    elif curve.ar_overhead is not None:
        o_ar, src = curve.ar_overhead, "the cost curve"
    else:
        o_ar, src = m.overhead, "assumed equal"
    factor = (1 - m.overhead) / (1 - o_ar) if o_ar < 1 else 1.0
    decode = tps / cost * factor if cost > 0 else 0.0
    # prefill share of the AR run: AR's decode time estimated from this run (decode time x speedup)
    ar_decode = m.step_seconds * decode
    f = m.prefill_seconds / (m.prefill_seconds + ar_decode) if m.prefill_seconds + ar_decode > 0 else 0.0
    predicted = 1 / (f + (1 - f) / decode) if decode > 0 else 0.0
    measured = measured_cost = None
    if a is not None and a.tokens_per_s > 0 and m.tokens_per_s > 0:
        measured = m.tokens_per_s / a.tokens_per_s
        if a.steps and m.steps and a.forward_seconds > 0:
            measured_cost = (m.forward_seconds / m.steps) / (a.forward_seconds / a.steps)
    return Account(m.method, tps, cost, m.overhead, o_ar, src, factor, decode, f, predicted, measured, measured_cost,
                   curve.regime)


def break_even(fed: float, curve: CostCurve, overhead: float = 0.0, ar_overhead: float | None = None) -> float:
    """Tokens per step a method feeding ``fed`` tokens per step needs to match AR."""
    o_ar = (curve.ar_overhead or 0.0) if ar_overhead is None else ar_overhead
    return curve.relative_cost(fed) * (1 - o_ar) / (1 - overhead)


# ---- why this prompt sped up ------------------------------------------------------------------
_REASONS = [
    ("prompt_pool", "came from n-grams of the prompt (text the answer repeats)"),
    ("pool", "came from n-grams the lookahead window guessed earlier and the pool kept"),
    ("output_pool", "came from n-grams of the output so far (repetition in the answer)"),
    ("jacobi", "were Jacobi fast-forwards (guesses that had converged before their turn)"),
    ("pld", "were copied by prompt lookup from earlier text"),
]


def reasons(trace: Trace) -> list[str]:
    """Sentences on where the extra tokens came from, largest share first."""
    shares = provenance_shares(trace)
    out = []
    for key, text in sorted(_REASONS, key=lambda kv: -shares.get(kv[0], 0.0)):
        if shares.get(key, 0.0) > 0:
            out.append(f"{shares[key]:.0%} of the output tokens {text}.")
    own = shares.get("step", 0.0) + shares.get("prefill", 0.0)
    if trace.method != "ar":
        out.append(f"{own:.0%} were the model's own next token of a step (what AR would do anyway)." if out else
                   f"No guess was ever accepted: every token was the model's own next token ({own:.0%}).")
    return out
