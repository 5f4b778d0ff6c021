"""Was the machine busy while a run decoded? Read from the run's own step times.

A trace records every step's forward time. On a quiet machine forwards over the same number of
tokens take the same time, close to what the step-cost curve measured for that size (the shipped
examples: the median within 0.87-0.99 of the curve, the slowest tenth within 1.2x the median, no
step over twice it). Other programs on the same cores make forwards slower and uneven: a run
decoded at load average 9 on 2 cores had steps 2-3x the curve's time, and some far slower (the OS
took the cores away mid-forward). Three signs, each relative so that it holds on any machine:

    slowdown  median over steps of forward_seconds / the curve's time for that step's fed size
    spread    90th percentile of that ratio / its median (how uneven the steps were)
    outliers  steps whose ratio is over twice the median

Without a curve, each step is compared with the median of the steps of its own fed size (spread
and outliers only). The trace carries no load average; the page can add the current one.

Worked example: 24 AR steps, 20 at the curve's c(1) = 0.032 s and 4 at 0.1 s: slowdown 1.0 (the
median step is 0.032 s), spread 3.1 (the slowest tenth is 0.1 s), 4 of 24 steps over twice the
median (17%): busy.

Plain Python over traces: no torch.
"""

from __future__ import annotations

import bisect
from collections import defaultdict
from dataclasses import dataclass, field

from ..trace import Trace
from .costs import CostCurve

MIN_STEPS = 8  # fewer steps than this say nothing about load
SLOWDOWN = 1.5  # median step over this many times the curve's time: busy (or another machine)
SPREAD = 1.5  # slowest tenth over this many times the median: busy
OUTLIERS = 0.1  # more than this share of steps over twice the median: busy


@dataclass
class LoadReading:
    """What a run's step times say about the machine while it ran."""

    steps: int
    slowdown: float | None  # median step time / the curve's time for its size (None: no curve)
    spread: float  # 90th percentile of the steps' relative times / their median
    outliers: int  # steps over twice the median
    signs: list[str] = field(default_factory=list)  # the signs of load, in words (empty: quiet)

    @property
    def busy(self) -> bool:
        return bool(self.signs)

    def sentence(self) -> str:
        """One sentence for the page: busy or quiet, and what says so."""
        if self.steps < MIN_STEPS:
            return f"Only {self.steps} steps: too few to tell whether the machine was busy."
        if not self.busy:
            cmp = f", at {self.slowdown:.2f}x the step-cost curve's time" if self.slowdown is not None else ""
            return (f"The step times look like a quiet machine: steps of one size took the same time{cmp} "
                    f"(slowest tenth {self.spread:.2f}x the median, no step over twice it)." if not self.outliers else
                    f"The step times look like a quiet machine ({self.outliers} of {self.steps} steps over twice "
                    f"the median{cmp}).")
        return "The machine was busy while this run decoded: " + "; ".join(self.signs) + "."


def _quantile(xs: list[float], q: float) -> float:
    s = sorted(xs)
    return s[min(len(s) - 1, max(0, round(q * (len(s) - 1))))]


def curve_seconds(curve: CostCurve, k: int) -> float:
    """The curve's time of a forward over ``k`` tokens (linear between measured sizes)."""
    ks, secs = curve.ks, curve.seconds
    if k <= ks[0]:
        return secs[0]
    i = min(bisect.bisect_left(ks, k), len(ks) - 1)
    if ks[i] == k:
        return secs[i]
    k0, k1, s0, s1 = ks[i - 1], ks[i], secs[i - 1], secs[i]
    return s0 + (s1 - s0) * (k - k0) / (k1 - k0)


def relative_times(trace: Trace, curve: CostCurve | None = None) -> list[float]:
    """Each step's forward time over the curve's time for its fed size, or (no curve) over the
    median of the steps of the same size."""
    steps = [s for s in trace.steps if s.forward_seconds > 0]
    if curve is not None:
        return [s.forward_seconds / curve_seconds(curve, s.fed) for s in steps]
    by_size: dict[int, list[float]] = defaultdict(list)
    for s in steps:
        by_size[s.fed].append(s.forward_seconds)
    med = {k: _quantile(v, 0.5) for k, v in by_size.items()}
    return [s.forward_seconds / med[s.fed] for s in steps if med[s.fed] > 0]


def machine_load(trace: Trace, curve: CostCurve | None = None) -> LoadReading:
    """Read the machine's load from ``trace``'s step times (against ``curve`` when given)."""
    r = relative_times(trace, curve)
    if len(r) < MIN_STEPS:
        return LoadReading(len(r), None, 1.0, 0)
    med = _quantile(r, 0.5)
    spread, outliers = _quantile(r, 0.9) / med, sum(x > 2 * med for x in r)
    slowdown = med if curve is not None else None
    signs = []
    if slowdown is not None and slowdown > SLOWDOWN:
        signs.append(f"its forwards took {slowdown:.1f}x the time the step-cost curve measured for the same sizes "
                     "(or this is not the machine the curve was measured on)")
    if spread > SPREAD:
        signs.append(f"steps of one size took uneven times (the slowest tenth {spread:.1f}x the median)")
    if outliers > OUTLIERS * len(r):
        signs.append(f"{outliers} of {len(r)} steps took over twice the median")
    return LoadReading(len(r), slowdown, spread, outliers, signs)


def why_they_part(run: LoadReading, ar: LoadReading | None) -> str:
    """Why prediction and measurement part when the machine was busy ('' when neither run says so)."""
    busy = [who for who, x in (("this run", run), ("the AR run", ar)) if x is not None and x.busy]
    if not busy:
        return ""
    return (f"the machine was busy during {' and '.join(busy)}: the prediction prices each step from the step-cost "
            "curve, measured on a quiet machine, while the measured speedup divides two runs' tokens/s, and load "
            "slows them by different amounts (other programs take the cores at different moments, and a step over "
            "many tokens suffers more than a one-token AR step)")
