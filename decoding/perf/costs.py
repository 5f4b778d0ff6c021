"""What a step costs on this hardware: the step-cost curve, where it is cached, and finding it.

Tokens per step alone does not explain wall-clock speed: one forward over k new tokens costs
about c(k) one-token forwards, and c depends on the device (a 2-core CPU: c(32) ~ 3; a GPU:
c(32) ~ 1). A CostCurve holds the measured seconds of such forwards (perf/measure.py measures
them); the speedup account of a run weighs its tokens per step against them (perf/account.py).

Plain Python: no torch (but for the thread count of ``cached_curve`` and the first-use curve that
``step_costs_for`` has perf/timing.py time, which knows neither the loop nor this module), no
Streamlit or Plotly.
"""

from __future__ import annotations

import bisect
import json
import math
import os
import re
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from ..budget import StepCosts, generic_prior, interpolate, padded

CURVE_VERSION = 1
DEFAULT_KS = (1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64, 96, 128, 192, 256)  # dense where budgets live
DEFAULT_CONTEXT = 256


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
    kernel: str = "stock"  # the linear layers' kernel the model ran with (decoding.kernels)
    cpu: str = ""  # the CPU where measured: model name, family, vector extension (decoding.paths.cpu_name; "": not recorded)

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
        if self.device == FLAT:
            return f"a flat step cost (a memory-bound GPU's regime: any step up to {self.ks[-1]} tokens costs one AR step)"
        base, compiled = self.kernel.split("+")[0], self.kernel.endswith("+compiled")
        kernel = {"skinny": ", skinny matmul", "onednn": ", oneDNN packed matmul", "fewrows": ", few-row kernel"}.get(base, "")
        kernel += ", compiled step" if compiled else ""
        return f"{self.device} ({self.dtype}, {self.threads} thread{'s' if self.threads != 1 else ''}{kernel}), {self.context} cached tokens"

    def key(self) -> str:
        return curve_key(self.model_id, self.device, self.dtype, self.threads, self.kernel)

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


FLAT = "flat"  # the device of ``flat_curve``: no machine, a regime


def flat_curve(like: CostCurve, up_to: int = 256) -> CostCurve:
    """The GPU-like regime for ``like``'s model: a step over up to ``up_to`` tokens costs what one
    token costs (a small model on a GPU is memory-bound far past the sizes the methods feed). For
    what-ifs only: nothing was measured in it."""
    s = like.seconds[0]
    return CostCurve(like.model_id, FLAT, like.dtype, like.threads, like.context, [1, up_to], [s, s],
                     ar_overhead=like.ar_overhead, kernel=like.kernel)


def curve_key(model_id: str, device: str, dtype: str, threads: int, kernel: str = "stock") -> str:
    slug = re.sub(r"[^A-Za-z0-9._-]+", "_", model_id).strip("_")[:80]
    return f"{slug}__{device}__{dtype}__t{threads}" + ("" if kernel == "stock" else f"__{kernel}")


def curve_path(model_id: str, device: str, dtype: str, threads: int, kernel: str = "stock") -> Path:
    from ..model import cache_dir

    return cache_dir() / "costs" / f"{curve_key(model_id, device, dtype, threads, kernel)}.json"


def cached_curve(model_id: str, device: str, dtype: str, threads: int | None = None,
                 kernel: str = "stock") -> CostCurve | None:
    """The measured curve in the cache folder, or None."""
    if threads is None:
        import torch

        threads = torch.get_num_threads()
    p = curve_path(model_id, device, dtype, threads, kernel)
    try:
        return CostCurve.load(p)
    except (OSError, CurveError):
        return None


def find_curve(model_id: str, device: str, dtype: str, shipped: tuple = (),
               kernel: str = "stock") -> tuple[CostCurve, str] | None:
    """A curve for this model/device/dtype/kernel without importing torch: the newest one measured
    into the cache folder (any thread count), else one of the ``shipped`` files that matches.
    Returns (curve, where it came from) or None."""
    from ..model import cache_dir

    prefix = curve_key(model_id, device, dtype, 0).rsplit("__t", 1)[0] + "__t"
    found = sorted((cache_dir() / "costs").glob(f"{glob_escape(prefix)}*.json"), key=lambda p: p.stat().st_mtime, reverse=True)
    for p in found:
        try:
            c = CostCurve.load(p)
        except (OSError, CurveError):
            continue
        if c.kernel == kernel:
            return c, f"measured on this machine ({p.name})"
    got = shipped_curve(shipped, model_id, device, dtype, kernel)
    return (got[0], f"shipped with the app ({got[1].name}, measured {got[0].measured_at})") if got else None


def shipped_curve(paths, model_id: str, device: str, dtype: str, kernel: str = "stock") -> tuple[CostCurve, Path] | None:
    """The first of the curve files ``paths`` measured for this model/device/dtype/kernel (unreadable ones skipped)."""
    for p in paths:
        try:
            c = CostCurve.load(p)
        except (OSError, CurveError):
            continue
        if (c.model_id, c.device, c.dtype, c.kernel) == (model_id, device, dtype, kernel):
            return c, Path(p)
    return None


def glob_escape(s: str) -> str:
    return re.sub(r"([*?\[])", r"[\1]", s)


# ---- the budget's prior: the curve for a loaded model ------------------------------------------
SHIPPED_CURVES = sorted((Path(__file__).resolve().parents[2] / "assets").glob("cost_curve_*.json"))


def curve_kernel(lm) -> str:
    """The label a step-cost curve is kept under for a loaded model: its kernel, with
    "+compiled" when its decode step is compiled (decoding.compiled; another curve)."""
    kernel = getattr(lm, "kernel", "stock")
    return kernel + "+compiled" if getattr(lm, "step", "eager") == "compiled" else kernel


SHORT_KS = (1, 2, 3, 4, 6, 8, 12, 16)  # where the budgets live: a first-use curve's sizes (a few seconds)
FIRST_USE_REPEATS = 3
_MEASURED_HERE: dict[str, CostCurve] = {}  # first-use curves measured under load: this process only


def curve_of(lm, context: int, ks: list[int], seconds: list[float], repeats: int,
             ar_overhead: float | None = None) -> CostCurve:
    """The CostCurve of forwards just timed on ``lm`` (decoding.perf.timing.forward_seconds), stamped
    with the time, the load and the machine."""
    from ..paths import cpu_name

    return CostCurve(model_id=lm.model_id, device=str(lm.device), dtype=str(lm.dtype), threads=_threads(),
                     context=context, ks=list(ks), seconds=list(seconds), repeats=repeats, ar_overhead=ar_overhead,
                     measured_at=time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
                     load_avg=os.getloadavg()[0] if hasattr(os, "getloadavg") else None,
                     kernel=curve_kernel(lm), cpu=cpu_name())


def step_costs_for(lm, threads: int | None = None, measure: bool | None = None) -> StepCosts:
    """The cost-aware budget's step costs (decoding.budget.StepCosts) for a loaded model, calibrated
    online by the run. The prior: the curve measured on this machine for this model/device/dtype/
    thread count/kernel (the cache folder); else a shipped curve of the same model/device/dtype/kernel
    if it was measured on this CPU model; else, where a shipped curve exists but comes from another
    CPU, a short curve measured now (``first_use_curve``: a few seconds, once per machine) — CPUs
    differ most where the budgets decide (the few-row kernel's 8-token step is 1.28 AR steps on the
    Xeon that measured the shipped curve, 2.36 on a 2-core AMD EPYC without AVX-512), and the online
    calibration corrects the curve's level, not its shape; else the generic curve of the device type.
    ``measure``: False never measures (the shipped curve, said to be another CPU's, stays the prior);
    None measures unless PDL_MEASURE_CURVE=0."""
    from ..paths import cpu_name

    device, dtype, kernel = str(lm.device), str(lm.dtype), curve_kernel(lm)
    curve = cached_curve(lm.model_id, device, dtype, threads, kernel)
    source = "measured on this machine"
    if curve is None and threads is None:
        curve = _MEASURED_HERE.get(curve_key(lm.model_id, device, dtype, _threads(), kernel))
        source = "measured on this machine at first use (under load: not kept)"
    if curve is None:
        got = shipped_curve(SHIPPED_CURVES, lm.model_id, device, dtype, kernel)
        why = ""
        if got and got[0].cpu != cpu_name() and threads is None and _may_measure(lm, measure):
            try:
                curve, kept = first_use_curve(lm)
                source = f"measured on this machine at first use ({'kept' if kept else 'under load: not kept'}; the shipped curve is another CPU's)"
            except RuntimeError as e:  # e.g. the compiled step's cache held by a concurrent run
                why = f"; not measured here: {str(e).splitlines()[0] if str(e) else type(e).__name__}"
        if curve is None and got:
            here = "this CPU model" if got[0].cpu == cpu_name() else "measured on " + (got[0].cpu or "another CPU")
            curve, source = got[0], f"shipped ({got[1].name}, {here}{why})"
    if curve is None:
        kind = device.split(":")[0]
        prior, source = generic_prior(kind), f"generic {kind if kind == 'cpu' else 'accelerator'} curve"
    else:
        prior, source = interpolate(curve.ks, curve.relative()), f"{source}: {curve.regime}"
    if kernel.endswith("+compiled"):  # fed rows padded to the compiled sizes: the padding's guesses are free
        from ..compiled import FED_SIZES

        prior, source = padded(prior, FED_SIZES), source + ", padded to the compiled sizes"
    return StepCosts(prior, source)


def _threads() -> int:
    import torch

    return torch.get_num_threads()


def _may_measure(lm, measure: bool | None) -> bool:
    """Whether ``step_costs_for`` may time forwards of this model now: asked to, or not told not to
    (PDL_MEASURE_CURVE=0), on a CPU and not split over devices (a curve of one device)."""
    if measure is None:
        measure = os.environ.get("PDL_MEASURE_CURVE", "1") != "0"
    return bool(measure) and str(lm.device).split(":")[0] == "cpu" and not getattr(lm, "device_map", None)


def first_use_curve(lm, progress=None) -> tuple[CostCurve, bool]:
    """A short step-cost curve of ``lm`` measured now (``SHORT_KS``, 3 rounds, no AR decode), and
    whether it was kept in the cache folder: kept where the machine was quiet enough for it to
    stand (decoding.kernels' rule for its choice), else held for this process only and measured
    again by the next one."""
    from ..kernels import _quiet
    from .timing import forward_seconds

    ks = SHORT_KS
    if getattr(lm, "compiled", None) is not None:  # the compiled step pads to its sizes: time those only
        from ..compiled import FED_SIZES

        ks = tuple(k for k in SHORT_KS if k in FED_SIZES)
    curve = curve_of(lm, *forward_seconds(lm, ks, DEFAULT_CONTEXT, FIRST_USE_REPEATS, progress), FIRST_USE_REPEATS)
    kept = _quiet()
    if kept:
        try:
            curve.save(curve_path(curve.model_id, curve.device, curve.dtype, curve.threads, curve.kernel))
        except OSError:
            kept = False  # a read-only cache folder
    if not kept:
        _MEASURED_HERE[curve.key()] = curve
    return curve, kept
