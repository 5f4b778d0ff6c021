"""What a session keeps: its traces (``Results``) and the sidebar's settings.

Session state holds small dataclasses. ``Results`` is one mutable object per session, created once
and never replaced, so a decode can write to it from a script thread that Streamlit has already
stopped (see live.py): it holds a reference taken before its loop, not a session-state key.

The sidebar's settings are kept in the session's own ``settings`` dict as well as in the widgets'
keys, and written back into the widget keys at the start of every script run. Two reasons:
Streamlit drops the state of a widget that a finished run did not draw, and a widget whose value
was not set in the run that first reached the browser (the first run stopped by an early page
click, the second one drawing the widget from its old state) is drawn at its default (the
minimum of a number input, an empty prompt), which the browser then sent back as the visitor's
choice. Setting the value in every run makes every run send it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from decoding.trace import Trace


@dataclass
class CllmPair:
    """The CLLM page's two Jacobi traces of one prompt: the base model's and the CLLM's."""

    base: Trace
    cllm: Trace
    source: str  # what they are ("shipped traces (assets/cllm)", "live run (...)")
    folder: str  # the CLLM folder (its training metrics are shown)


@dataclass
class CurveFound:
    """A step-cost curve and where it came from (the Explain page's cache)."""

    curve: Any  # decoding.costs.CostCurve
    where: str


@dataclass
class Results:
    """The session's traces: method -> Trace, what each one is, the most recent last."""

    traces: dict[str, Trace] = field(default_factory=dict)
    sources: dict[str, str] = field(default_factory=dict)
    order: list[str] = field(default_factory=list)
    cllm: CllmPair | None = None
    curves: dict[tuple[str, str, str], CurveFound | None] = field(default_factory=dict)
    puts: int = 0  # how many traces were put so far (ui.pick_trace opens on the latest when it grew)

    def put(self, trace: Trace, source: str) -> None:
        """Show ``trace`` for its method from now on (plain object writes: safe in a stopped thread)."""
        self.traces[trace.method] = trace
        self.sources[trace.method] = source
        self.order = [m for m in self.order if m != trace.method] + [trace.method]
        self.puts += 1

    @property
    def latest(self) -> Trace | None:
        return self.traces.get(self.order[-1]) if self.order else None


def keep_settings(ss, defaults: dict[str, Any]) -> dict[str, Any]:
    """Carry the sidebar's settings into this script run (call before any sidebar widget).

    A widget's current value (the visitor's latest edit) wins; a dropped one comes back from the
    session's ``settings``; either way the value is set again so that this run sends it."""
    keep = ss.setdefault("settings", dict(defaults))
    for k, v in defaults.items():
        if k in ss:
            keep[k] = ss[k]
        ss[k] = keep.get(k, v)
    return keep
