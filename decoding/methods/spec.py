"""How a method is declared: its parameters (default, bounds, help) and what the rest of the lab
needs to know about it (display name, colour, sampling, the parameters a tuning grid varies).

Plain data, no torch: the trace validator, the figures and the sidebar read it too. A method's
parameters are checked by one pydantic model made from its ``Param``s (``MethodSpec.params_model``);
its per-step record type (``MethodSpec.record``, a dataclass in the method's file) carries its own
schema (decoding/records.py).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, Strict, TypeAdapter, ValidationError, create_model

from ..budget import BUDGET_HELP, BUDGETS


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

    @property
    def annotation(self) -> Any:
        """The parameter's type for its pydantic model: its choices, true/false, or an integer
        within its bounds (the one place a parameter's bounds are checked)."""
        if self.is_choice:
            return Literal[self.choices]
        if self.is_bool:
            return Annotated[bool, Strict()]
        return Annotated[int, Strict(), Field(ge=self.lo, le=self.hi)]

    def problem(self, error_type: str, v: Any) -> str:
        """The sentence for a value the model refused (``error_type``: pydantic's error type)."""
        if self.is_choice:
            return f"{self.name} must be one of {', '.join(self.choices)}, got {v!r}"
        if self.is_bool:
            return f"{self.name} must be true or false"
        if error_type in ("greater_than_equal", "less_than_equal"):
            return f"{self.name} must be between {self.lo} and {self.hi}, got {v}"
        return f"{self.name} must be an integer, got {v!r}"


@dataclass(frozen=True)
class MethodSpec:
    """Everything the lab needs to know about a method, declared once (decoding/methods/<name>.py)."""

    name: str  # id in traces, the CLI and the registry
    label: str  # display name
    colour: str  # hex colour of its lines and bars in every figure
    cls: type  # the Method subclass
    params: tuple[Param, ...] = ()
    samples: bool = False  # whether its sampled output keeps AR's distribution (temperature > 0 allowed)
    # its per-step record type (Step.record; a decoding.records.Record dataclass in its file), None for none
    record: type | None = None
    legacy_record: str = ""  # the step key its record had in trace versions 1 and 2
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

    @cached_property
    def params_model(self) -> type[BaseModel]:
        """The pydantic model of its parameters, made from its ``Param``s: types, bounds, defaults;
        no other keys."""
        return create_model(f"{self.name}_params", __config__=ConfigDict(extra="forbid"),
                            **{p.name: (p.annotation, p.default) for p in self.params})

    def check_params(self, params: dict[str, Any]) -> dict[str, Any]:
        """``params`` with the defaults filled in; ConfigError with one sentence for the first bad one."""
        try:
            return self.params_model.model_validate(params).model_dump()
        except ValidationError as e:
            err = e.errors(include_url=False)[0]
            name = str(err["loc"][0]) if err["loc"] else ""
            if err["type"] == "extra_forbidden":
                raise ConfigError(f"{self.name} has no parameter {name!r} (it takes {', '.join(self.defaults) or 'none'})") from None
            raise ConfigError(self.param(name).problem(err["type"], err.get("input"))) from None

    @cached_property
    def record_adapter(self) -> TypeAdapter:
        """Validates a step's record (its JSON form) into ``record``."""
        return TypeAdapter(self.record)


# the step budget of every method that can feed a draft tree: fixed (its settings) or auto (what pays
# here; decoding/budget.py)
BUDGET_PARAM = Param("budget", "fixed", BUDGET_HELP, label="Step budget", choices=BUDGETS)
