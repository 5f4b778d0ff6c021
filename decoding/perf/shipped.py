"""Speedups predicted on hardware we do not have here, from step-cost curves measured there and
shipped as assets (``cost_curve_<device>_<config>.json``, written by scripts/gpu_check on e.g. an
H200 with a randomly initialised Llama-7B-class model). A prediction, labelled as one: this run's
tokens/step divided by the mean cost of its steps on that curve (c(fed)/c(1)); the loop's own
overhead on that machine is not counted."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path

from .account import mean_step_cost
from .costs import CostCurve, CurveError

PATTERN = re.compile(r"^cost_curve_([A-Za-z0-9.-]+)_([A-Za-z0-9.-]+)\.json$")


@dataclass
class ShippedCurve:
    device: str  # e.g. "h200"
    config: str  # e.g. "llama-7b"
    gpu: str  # the device's full name as measured, or the file's device part
    curve: CostCurve
    path: str


def shipped_curves(folder: str | Path) -> list[ShippedCurve]:
    """The cost_curve_<device>_<config>.json files in ``folder`` (unreadable ones skipped)."""
    out = []
    for p in sorted(Path(folder).glob("cost_curve_*_*.json")):
        m = PATTERN.match(p.name)
        if not m:
            continue
        try:
            d = json.loads(p.read_text(encoding="utf-8"))
            c = CostCurve.from_dict(d)
        except (OSError, ValueError, CurveError):
            continue
        out.append(ShippedCurve(m.group(1), m.group(2), str(d.get("gpu") or m.group(1)), c, str(p)))
    return out


def predicted_speedup(fed: list[int], tokens_per_step: float, curve: CostCurve) -> float:
    """Decode speedup over AR predicted on ``curve``: tokens/step / mean c(fed)/c(1)."""
    cost = mean_step_cost(fed, curve)
    return tokens_per_step / cost if cost > 0 else 0.0


def prediction_lines(trace, curves: list[ShippedCurve]) -> list[str]:
    """One sentence per shipped curve for a trace with steps: 'this run, on an H200 with a llama-7b
    model: predicted 1.7× (a prediction from a measured step-cost curve ...)'."""
    if not trace.steps:
        return []
    fed = [s.fed for s in trace.steps]
    out = []
    for s in curves:
        x = predicted_speedup(fed, trace.tokens_per_step, s.curve)
        when = f", measured {s.curve.measured_at}" if s.curve.measured_at else ""
        out.append(f"This run ({trace.tokens_per_step:.2f} tokens/step, {sum(fed) / len(fed):.1f} tokens fed per step), "
                   f"on {s.gpu} with a {s.config} model ({s.curve.dtype}): predicted {x:.2f}× AR — a prediction from a "
                   f"measured step-cost curve ({Path(s.path).name}{when}, random weights: the cost depends on the "
                   "architecture, not the weights), not a measurement of this run; the loop's overhead there is not counted.")
    return out
