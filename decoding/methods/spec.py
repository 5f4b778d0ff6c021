"""How a method is declared: its parameters (default, bounds, help) and what the rest of the lab
needs to know about it (display name, colour, sampling, the parameters a tuning grid varies).

Plain data, no torch: the trace validator, the figures and the sidebar read it too.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


class ConfigError(ValueError):
    """A bad method, parameter or prompt, found before any work starts."""


@dataclass(frozen=True)
class Param:
    """One method parameter. ``lo``/``hi`` bound an integer; a bool has neither."""

    name: str
    default: int | bool | str
    help: str
    lo: int | None = None
    hi: int | None = None
    choices: tuple[str, ...] = ()  # a string parameter takes one of these
    label: str = ""  # short widget label (default: the name)
    cli: str = ""  # the CLI flag (default: --<name with - for _>); a bool default True gets --no-<...>
    tuned: bool = False  # whether a tuning grid varies it (and a setting's label names it)

    @property
    def is_bool(self) -> bool:
        return isinstance(self.default, bool)

    @property
    def is_choice(self) -> bool:
        return bool(self.choices)

    @property
    def flag(self) -> str:
        if self.cli:
            return self.cli
        stem = self.name.replace("_", "-")
        return f"--no-{stem}" if self.is_bool and self.default else f"--{stem}"

    def check(self, method: str, v: Any) -> None:
        if self.is_choice:
            if v not in self.choices:
                raise ConfigError(f"{self.name} must be one of {', '.join(self.choices)}, got {v!r}")
            return
        if self.is_bool:
            if not isinstance(v, bool):
                raise ConfigError(f"{self.name} must be true or false")
            return
        if isinstance(v, bool) or not isinstance(v, int):
            raise ConfigError(f"{self.name} must be an integer, got {v!r}")
        if not self.lo <= v <= self.hi:
            raise ConfigError(f"{self.name} must be between {self.lo} and {self.hi}, got {v}")


@dataclass(frozen=True)
class MethodSpec:
    """Everything the lab needs to know about a method, declared once (decoding/methods/<name>.py)."""

    name: str  # id in traces, the CLI and the registry
    label: str  # display name
    colour: str  # hex colour of its lines and bars in every figure
    cls: type  # the Method subclass
    params: tuple[Param, ...] = ()
    samples: bool = False  # whether its sampled output keeps AR's distribution (temperature > 0 allowed)
    record: str = ""  # the Step attribute its per-step record goes to ("" for none)
    summary: str = ""  # one line: what it guesses
    origins: dict[str, str] = field(default_factory=dict)  # origin id -> sentence, for its guessed tokens
    grid: tuple[dict[str, Any], ...] = ()  # the settings `python -m decoding tune` tries
    # the parameter whose value k asks the loop for each step's top-k token ids per logits row,
    # handed to update() as ``topk=`` ("" for none: update gets the argmax only)
    topk_param: str = ""

    @property
    def defaults(self) -> dict[str, Any]:
        return {p.name: p.default for p in self.params}

    @property
    def tuned(self) -> tuple[str, ...]:
        return tuple(p.name for p in self.params if p.tuned)

    def param(self, name: str) -> Param:
        return next(p for p in self.params if p.name == name)
