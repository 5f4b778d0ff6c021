"""The method registry: every decoding method is declared once, here, from its own file.

    decoding/methods/ar.py         AR (the baseline)
    decoding/methods/jacobi.py     Jacobi decoding (CLLM's block mode)
    decoding/methods/lookahead.py  lookahead decoding (+ lookahead_pool.py, lookahead_mask.py)
    decoding/methods/pld.py        prompt lookup
    decoding/methods/recycling.py  Token Recycling (adjacency matrix of top-k successors, draft tree)
    decoding/methods/suffix.py     suffix drafting (suffix trie over prompt + output, Token Recycling fallback)

Each file ends with a ``SPEC`` (decoding.methods.spec.MethodSpec): the class, display name, colour,
parameters with defaults, bounds and help, whether it samples, and its tuning grid. The CLI flags,
the sidebar widgets, parameter validation, the trace validator, the tuning grid and the figures'
labels and colours all read ``REGISTRY``. Adding a method = one new file + one entry below.

No torch here (the app's figures and the trace validator import this).
"""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, Strict, ValidationError

from . import ar, jacobi, lookahead, pld, recycling, suffix
from .spec import ConfigError, MethodSpec, Param

REGISTRY: dict[str, MethodSpec] = {s.name: s for s in (ar.SPEC, jacobi.SPEC, lookahead.SPEC, pld.SPEC, recycling.SPEC,
                                                 suffix.SPEC)}
METHODS: tuple[str, ...] = tuple(REGISTRY)
SAMPLING_METHODS: tuple[str, ...] = tuple(m for m, s in REGISTRY.items() if s.samples)
# The `sampling` params group: accepted by the methods whose sampling is exact. temperature 0 means
# greedy (the default); then the group is left out of the resolved params altogether.
SAMPLING_DEFAULTS: dict[str, Any] = {"temperature": 0.0, "top_k": 0, "top_p": 1.0, "sample_seed": 0}

__all__ = ["REGISTRY", "METHODS", "SAMPLING_METHODS", "SAMPLING_DEFAULTS", "ConfigError", "MethodSpec", "Param",
           "spec", "resolve_params"]


def spec(method: str) -> MethodSpec:
    if method not in REGISTRY:
        raise ConfigError(f"unknown method {method!r}; choose one of {', '.join(REGISTRY)}")
    return REGISTRY[method]


def resolve_params(method: str, params: dict[str, Any] | None) -> dict[str, Any]:
    """Defaults filled in and every value checked; raises ConfigError with one clear sentence.

    Sampling keys (SAMPLING_DEFAULTS) are taken by the sampling methods. With temperature > 0 the
    result holds all four of them; with temperature 0 (greedy) none of them.
    """
    s = spec(method)
    params = dict(params or {})
    sampling = {k: params.pop(k) for k in list(params) if k in SAMPLING_DEFAULTS}
    out = s.check_params(params)  # the method's pydantic model (MethodSpec.params_model)
    if sampling:
        out.update(_resolve_sampling(s, sampling))
    return out


_Int = Annotated[int, Strict()]  # no true for 1
_Num = _Int | Annotated[float, Strict(), Field(allow_inf_nan=False)]


class SamplingParams(BaseModel):
    """The sampling group's types and bounds (the one place they are checked)."""

    model_config = ConfigDict(extra="forbid")
    temperature: Annotated[_Num, Field(ge=0, le=100)] = SAMPLING_DEFAULTS["temperature"]
    top_k: Annotated[_Int, Field(ge=0, le=1_000_000)] = SAMPLING_DEFAULTS["top_k"]
    top_p: Annotated[_Num, Field(gt=0, le=1)] = SAMPLING_DEFAULTS["top_p"]
    sample_seed: Annotated[_Int, Field(ge=0, lt=2**63)] = SAMPLING_DEFAULTS["sample_seed"]


SAMPLING_RULES = {  # the sentence for a refused value
    "temperature": "temperature must be a number between 0 (greedy) and 100",
    "top_k": "top_k must be an integer >= 0 (0: off)",
    "top_p": "top_p must be a number in (0, 1] (1: off)",
    "sample_seed": "sample_seed must be a non-negative integer",
}


def _resolve_sampling(s: MethodSpec, given: dict[str, Any]) -> dict[str, Any]:
    try:
        d = SamplingParams.model_validate(given)
    except ValidationError as e:
        err = e.errors(include_url=False)[0]
        raise ConfigError(f"{SAMPLING_RULES[str(err['loc'][0])]}, got {err.get('input')!r}") from None
    t, k, p, seed = d.temperature, d.top_k, d.top_p, d.sample_seed
    if t == 0:
        return {}  # greedy: top_k / top_p / sample_seed have nothing to act on
    if not s.samples:
        raise ConfigError(f"{s.name} decodes greedily only (sampling is not an exact method for it); "
                          f"use temperature 0, or sample with {', '.join(SAMPLING_METHODS)}")
    return {"temperature": float(t), "top_k": k, "top_p": float(p), "sample_seed": seed}
