"""What a step records, as typed data: the field types every record shares, the base of a method's
own record (declared on its MethodSpec, defined in its method file), the records every method may
add (sampling, the cost-aware budget), and how a validation error becomes one sentence.

The records are plain dataclasses: the loop builds them without checks. Their annotations and
validators are a pydantic v2 schema, applied when a trace is loaded (decoding/trace.py,
``pydantic.TypeAdapter``); a rule that needs the rest of the trace goes in ``Record.check_in``.
A validator states a broken rule as ``fail("field", "what is wrong")``: the sentence names the
field from the trace's root ("steps[3].record.pool_ops[0]: ...").

No torch, no method names: the methods import this, and trace.py imports the methods.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, Any, ClassVar, Iterable

from pydantic import AfterValidator, BeforeValidator, Field, Strict, TypeAdapter, ValidationError, model_validator

from .origins import ORIGINS, Origin  # noqa: F401 (Step.origins: where a committed token came from)

MAX_TOKEN_ID = 2**31 - 1  # larger ids are no vocabulary's (and overflow the figures' int32 arrays)
MAX_SECONDS = 1e6  # eleven days: a longer step or run is not a measurement
MIN_SECONDS = 1e-9  # a nanosecond: shorter is no measured time (and divides into overflow)
MIN_COST, MAX_COST = 1e-3, 1e6  # a step cost, in AR steps (a thousandth of one: no step is that cheap)


class Invalid(ValueError):
    """A broken rule of the schema: ``field`` (relative to the object checked) and a sentence."""

    def __init__(self, where: str, msg: str):
        super().__init__(f"@{where}: {msg}" if where else msg)


def fail(where: str, msg: str) -> None:
    raise Invalid(where, msg)


def _finite_range(lo: float, hi: float, what: str):
    def check(v: float) -> float:
        if not lo <= v <= hi:
            raise ValueError(f"{what} must be from {lo:g} to {hi:g}, got {v!r}")
        return v
    return AfterValidator(check)


# ---- field types (strict: no true for 1, no "3" for 3) ------------------------------------------
Int = Annotated[int, Strict()]
Count = Annotated[int, Strict(), Field(ge=0)]
Positive = Annotated[int, Strict(), Field(ge=1)]
TokenId = Annotated[int, Strict(), Field(ge=0, le=MAX_TOKEN_ID)]
Tokens = list[TokenId]
Gram = Annotated[list[TokenId], Field(min_length=1)]  # a non-empty run of tokens
Number = Annotated[float, Strict(), Field(allow_inf_nan=False)]
Expected = Annotated[float, Strict(), Field(allow_inf_nan=False), _finite_range(0, MAX_COST, "an expected number of tokens")]
Probability = Annotated[float, Strict(), Field(allow_inf_nan=False), _finite_range(0, 1, "a probability")]
Seconds = Annotated[float, Strict(), Field(allow_inf_nan=False), _finite_range(MIN_SECONDS, MAX_SECONDS, "a time in seconds")]
Elapsed = Annotated[float, Strict(), Field(allow_inf_nan=False), _finite_range(0, MAX_SECONDS, "a time in seconds")]  # may be none
Cost = Annotated[float, Strict(), Field(allow_inf_nan=False), _finite_range(MIN_COST, MAX_COST, "a step cost")]
Bool = Annotated[bool, Strict()]
Str = Annotated[str, Strict()]


def _a_try(v: Any) -> Any:
    if not (isinstance(v, (list, tuple)) and len(v) == 4 and type(v[0]) is int and type(v[1]) is int
            and type(v[3]) is bool):
        raise ValueError(f"must be [candidate, token, p, accepted], got {_short(v)}")
    return v


# SampleRecord.tried's entry: [candidate, token, p, accepted]
Try = Annotated[tuple[Count, TokenId, Probability, Bool], BeforeValidator(_a_try)]


# ---- a method's record ----------------------------------------------------------------------------
def check_tree(parents: list[int], path: list[int], n: int) -> None:
    """The rules of a draft tree of ``n`` fed nodes (Token Recycling's and suffix drafting's records):
    each node's parent comes before it (-1: the current token), and ``path`` is a branch from the root."""
    for i, p in enumerate(parents):
        if not -1 <= p < i:
            fail(f"parents[{i}]", f"must be -1 (the current token) or an earlier node (below {i}), got {p}")
    if not all(0 <= i < n for i in path) or not all(parents[b] == a for a, b in zip([-1] + path, path)):
        fail("path", "must be a branch of the tree from its root")


class Record:
    """The base of a method's per-step record (a dataclass in the method's file, named by its
    MethodSpec.record). Each method overrides what applies to it; the defaults suit a record that
    holds nothing more."""

    # trace-level fields this method fills (Method.trace_fields) -> their type; other methods' traces
    # leave them empty
    trace_fields: ClassVar[dict[str, Any]] = {}
    # version-1 traces stored no origins: the origin of the guesses a step accepted (Step.origins)
    v1_origin: ClassVar[str] = "step"

    def token_ids(self) -> Iterable[int]:
        """Every token id the record mentions (for the trace's vocab)."""
        return ()

    def chains(self) -> int:
        """How many candidate chains the step verified (SampleRecord.tried indexes them)."""
        return 1

    def v1_guesses(self) -> tuple[str, int]:
        """(origin, accepted guesses) of a version-1 step, as the verifier decides them now."""
        return self.v1_origin, 0

    def check_in(self, trace: Any, where: str) -> None:
        """The rules against the rest of the (validated) trace; ``fail(f"{where}.field", ...)``."""

    @classmethod
    def check_trace(cls, trace: Any) -> None:
        """The rules on the trace-level fields this method fills (``trace_fields``)."""

    @classmethod
    def trace_token_ids(cls, trace: Any) -> Iterable[int]:
        """Token ids in the trace-level fields this method fills."""
        return ()


@dataclass
class SampleRecord:
    """Sampling verification of one step (temperature > 0): one entry per output position it decided.

    ``tried[i]``: the candidate tokens tried at position i, in order, each ``[candidate, token, p,
    accepted]`` (candidate: index into the step's candidate chains, 0 for a single draft; p: the
    token's probability at that moment, after the earlier rejections at this position were set to 0
    and the rest renormalised; accepted: true / false). ``final[i]``: the token position i got;
    ``final_p[i]``: its probability in the distribution it came from (an accepted candidate's p, or
    the draw from what was left when no try was accepted or none was possible). The step commits a
    prefix of ``final`` (all of it unless EOS or max_new_tokens cut it).

    Example (lookahead, candidates [[5, 6], [5, 9]]): tried [[[0, 5, 0.6, true]], [[0, 6, 0.3,
    false], [1, 9, 0.2, true]], []], final [5, 9, 4], final_p [0.6, 0.2, 0.35]: 5 accepted, 6
    rejected, then 9 (p renormalised without 6) accepted, and 4 drawn after the full match.
    """

    tried: list[list[Try]]
    final: Annotated[Tokens, Field(min_length=1)]
    final_p: list[Probability]

    @model_validator(mode="after")
    def _one_entry_per_position(self):
        if not len(self.tried) == len(self.final) == len(self.final_p):
            fail("", "one tried/final/final_p entry per position")
        self.tried = [[list(t) for t in pos] for pos in self.tried]  # the JSON form: lists
        return self


@dataclass
class BudgetRecord:
    """What a cost-aware step (``budget="auto"``) weighed and chose (decoding/budget.py).

    ``options``: [fed, expected tokens, relative cost] of the choices weighed (a sample: feeding
    nothing but the current token, then powers of two of the most likely guesses; with a window,
    both with and without it). ``fed``/``expected``/``cost``: the choice; ``realized``: the tokens
    the step committed. ``acceptance``: the run's estimate, at this step, that a first guess from
    each source is accepted; ``calibration``: how much dearer than the prior cost curve the run's
    own multi-token steps were measured (1.0: as the curve); ``window``: lookahead's window was fed.
    """

    fed: Positive
    expected: Expected
    cost: Cost
    realized: Count
    window: Bool
    options: list[tuple[Annotated[float, Strict(), _finite_range(1, MAX_COST, "fed")], Expected, Cost]]
    acceptance: dict[str, Probability]
    calibration: Cost

    @model_validator(mode="after")
    def _as_lists(self):
        self.options = [list(o) for o in self.options]  # the JSON form: lists
        return self


# ---- one sentence -------------------------------------------------------------------------------
def path(loc: Iterable[Any]) -> str:
    out = ""
    for k in loc:
        if k == "[key]":  # a dict's key itself
            out += " key"
        else:
            out += f"[{k}]" if isinstance(k, int) else (f".{k}" if out else str(k))
    return out


def _short(v: Any) -> str:
    r = repr(v)
    return r if len(r) <= 40 else r[:37] + "..."


def _join(where: str, sub: str) -> str:
    return where + sub if sub.startswith("[") or not where else f"{where}.{sub}" if sub else where


def parts(e: ValidationError) -> tuple[str, str]:
    """The first error of ``e``: (the field's path, what is wrong with it)."""
    err = e.errors(include_url=False)[0]
    where, msg = path(err["loc"]), err["msg"]
    if err["type"] == "value_error":
        msg = msg.removeprefix("Value error, ")
        if msg.startswith("@"):  # a validator's rule names a field below the object it checked
            sub, _, msg = msg[1:].partition(": ")
            where = _join(where, sub)
    elif err["type"] == "missing":
        msg = "missing"
    elif err["type"] == "too_short":
        msg = f"must hold at least {err['ctx']['min_length']} item(s), got {_short(err.get('input'))}"
    elif err["type"] == "string_pattern_mismatch":
        msg = f"must be a token id written in digits, got {_short(err.get('input'))}"
    else:
        msg = f"{msg[:1].lower()}{msg[1:]}, got {_short(err.get('input'))}"
    return where, msg


def sentence(e: ValidationError) -> str:
    """The first error of ``e`` as one sentence that names the field: "steps[3].seconds: ..."."""
    where, msg = parts(e)
    return f"{where}: {msg}" if where else msg


def check(adapter: TypeAdapter, value: Any, where: str = "", context: dict | None = None) -> Any:
    """``value`` validated by ``adapter``; a broken rule is raised as Invalid naming the field
    (relative to ``where``), so that the validator that called this reports the whole path."""
    try:
        return adapter.validate_python(value, context=context)
    except ValidationError as e:
        sub, msg = parts(e)
        raise Invalid(_join(where, sub), msg) from None
