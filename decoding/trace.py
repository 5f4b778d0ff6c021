"""The trace: what a decoding run records, and its versioned JSON form.

A trace is the contract between the decoding core and everything that shows it (CLI, app, figure
builders). It holds only plain data: token ids, token text pieces, counts, times and each method's
own per-step record. Every view works the same on a live run and on a trace loaded from disk.

Accounting (the same for every method):
- the prefill runs the prompt and yields the first new token ("prefill" token, not a step);
- each *step* is one forward pass after the prefill; it feeds the current token (the last
  committed token, whose KV is not cached yet) plus the method's guesses, and commits >= 1 tokens;
- ``tokens_per_step`` = tokens committed by steps / steps. Plain AR is exactly 1.0, so this is also
  the compression ratio against AR (AR steps / method steps).

The schema: ``Trace`` and ``Step`` are plain dataclasses (the loop fills them without checks) whose
annotations and validators are a pydantic v2 schema, applied when a trace is loaded
(``Trace.from_dict``). A step's ``record`` is its method's own record type, named by the method's
MethodSpec (decoding/methods/) and validated by it; this module reads the registry and knows no
method by name. The rules here are the ones every page relies on: a trace that loads draws on every
page, and one that does not gets one sentence naming the field ("steps[3].record.pool_ops[0]: ...").
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from typing import Annotated, Any, Literal

from pydantic import Field, TypeAdapter, ValidationError, ValidationInfo, field_validator, model_validator

from .methods import REGISTRY, SAMPLING_DEFAULTS, ConfigError, resolve_params
from .records import (ORIGINS, Bool, BudgetRecord, Count, Elapsed, Origin, Positive, SampleRecord, Seconds, Str,  # noqa: F401
                      Tokens, check, fail, sentence)

# 3: Step.record, one field for the method's record (2: a field per method; 1: no Step.origins).
# Versions 1 and 2 still load: their records move to Step.record, version 1's origins are derived.
SCHEMA_VERSION = 3
READS_VERSIONS = (1, 2, 3)
STOP_REASONS = ("", "eos", "max_new_tokens", "stopped")
StopReason = Literal[STOP_REASONS]  # type: ignore[valid-type]
# the fields a trace file must name (the others have defaults)
REQUIRED = ("method", "params", "model_id", "device", "dtype", "prompt_ids", "output_ids", "steps", "prefill_seconds",
            "seconds")


class TraceError(ValueError):
    """A trace file or dict that does not follow the schema (one sentence naming the field)."""


@dataclass
class Step:
    index: Count
    fed: Positive  # tokens fed to this step's forward
    tokens: Annotated[Tokens, Field(min_length=1)]  # tokens this step committed to the output, in order
    seconds: Seconds  # wall time of the whole step (propose, forward, verify, commit, record)
    forward_seconds: Seconds  # wall time of the forward alone
    # the method's record of this step (the type its MethodSpec.record names; None: it records
    # nothing, or recording was off)
    record: Any = None
    sampling: SampleRecord | None = None  # only when the run sampled (temperature > 0)
    # where each committed token came from (ORIGINS), decided by the verifier (decoding/verify.py):
    # accepted guesses first, the model's own token ("step") last
    origins: list[Origin] = field(default_factory=list)
    budget: BudgetRecord | None = None  # only for budget="auto" runs

    @field_validator("record", mode="after")
    @classmethod
    def _method_record(cls, v: Any, info: ValidationInfo) -> Any:
        spec = info.context["spec"]
        if v is None:
            return None
        if spec.record is None:
            fail("", f"a {spec.name} trace records nothing per step (null)")
        return check(spec.record_adapter, v)


@dataclass
class Trace:
    method: Str
    params: dict[str, Any]  # every parameter, defaults filled in (decoding.methods.resolve_params)
    model_id: Str
    device: Str
    dtype: Str
    prompt_ids: Annotated[Tokens, Field(min_length=1)]
    output_ids: Tokens = field(default_factory=list)
    prompt_pieces: list[Str] = field(default_factory=list)
    output_pieces: list[Str] = field(default_factory=list)
    steps: list[Step] = field(default_factory=list)
    # trace-level fields a method fills (its record's ``trace_fields``; empty for the others)
    blocks: list[Any] = field(default_factory=list)  # the Jacobi blocks
    pool_seed: list[Any] = field(default_factory=list)  # lookahead: n-grams seeded before step 0
    vocab: dict[Annotated[str, Field(pattern=r"^[0-9]{1,10}$")], Str] = field(default_factory=dict)  # text of guess tokens not in prompt/output ("id" -> text)
    prompt_text: Str = ""
    chat: Bool = False
    max_new_tokens: Count = 0
    eos_token_ids: Tokens = field(default_factory=list)
    stop_reason: StopReason = ""  # "eos", "max_new_tokens" or "stopped" (the caller ended the run)
    prefill_seconds: Seconds = 0.0
    seconds: Seconds = 0.0  # prefill + all steps
    recorded: Bool = True  # False: the method records were switched off
    version: int = SCHEMA_VERSION
    kernel: Literal["stock", "skinny", "onednn", "fewrows"] = "stock"  # the linear layers' kernel the model ran with (decoding.kernels; older traces: stock)
    step: Literal["eager", "compiled"] = "eager"  # the decode step: eager, or compiled over a static cache (decoding.compiled)
    compile_seconds: Elapsed = 0.0  # compiled step: graphs built during this run (first use), left out of seconds

    # ---- totals -------------------------------------------------------------------------------
    @property
    def n_steps(self) -> int:
        return len(self.steps)

    @property
    def step_tokens(self) -> int:
        """Tokens committed by steps (all output tokens but the prefill's)."""
        return sum(len(s.tokens) for s in self.steps)

    @property
    def tokens_per_step(self) -> float:
        return self.step_tokens / self.n_steps if self.steps else 0.0

    @property
    def tokens_per_s(self) -> float:
        return len(self.output_ids) / self.seconds if self.seconds > 0 else 0.0

    @property
    def forward_seconds(self) -> float:
        return sum(s.forward_seconds for s in self.steps)

    @property
    def sampled(self) -> bool:
        """True when the run sampled (temperature > 0) instead of decoding greedily."""
        return float(self.params.get("temperature", 0) or 0) > 0

    @property
    def text(self) -> str:
        return "".join(self.output_pieces)

    def record_ids(self) -> set[int]:
        """Every token id the method records mention (guesses, window, candidates, drafts, pool)."""
        spec = REGISTRY.get(self.method)
        ids: set[int] = set(spec.record.trace_token_ids(self)) if spec is not None and spec.record else set()
        for s in self.steps:
            if s.record is not None:
                ids.update(s.record.token_ids())
            if s.sampling:
                ids.update(s.sampling.final)
                ids.update(t[1] for pos in s.sampling.tried for t in pos)
        return ids

    def summary(self) -> dict[str, Any]:
        return {
            "method": self.method,
            "params": self.params,
            "new_tokens": len(self.output_ids),
            "steps": self.n_steps,
            "tokens_per_step": round(self.tokens_per_step, 4),
            "seconds": round(self.seconds, 4),
            "tokens_per_s": round(self.tokens_per_s, 3),
            "stop_reason": self.stop_reason,
        }

    # ---- JSON ---------------------------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def to_json(self, indent: int | None = None) -> str:
        return json.dumps(self.to_dict(), indent=indent, ensure_ascii=False)

    def save(self, path: str) -> None:
        with open(path, "w", encoding="utf-8") as f:
            f.write(self.to_json())

    @classmethod
    def from_dict(cls, d: Any) -> "Trace":
        """The trace in ``d`` (a trace's JSON form, any version this app reads), every rule checked
        and its parameters filled in; TraceError with one sentence naming the field if not."""
        spec, version = _header(d)
        try:
            return _ADAPTER.validate_python(d if version == SCHEMA_VERSION else _upgrade(d, spec),
                                            context={"spec": spec, "v1": version == 1})
        except ValidationError as e:
            raise TraceError(sentence(e)) from None
        except RecursionError:
            raise TraceError("the trace nests lists or objects too deeply") from None

    @classmethod
    def from_json(cls, text: str | bytes) -> "Trace":
        try:
            d = json.loads(text)
        except (json.JSONDecodeError, UnicodeDecodeError) as e:
            raise TraceError(f"not a JSON trace: {e}") from None
        except RecursionError:
            raise TraceError("not a trace: its JSON nests lists or objects too deeply") from None
        return cls.from_dict(d)

    @classmethod
    def load(cls, path: str) -> "Trace":
        with open(path, "rb") as f:
            return cls.from_json(f.read())

    # ---- the schema's rules across fields ----------------------------------------------------------
    @model_validator(mode="before")
    @classmethod
    def _required(cls, d: Any) -> Any:
        if isinstance(d, dict):
            for k in REQUIRED:
                if k not in d:
                    fail(k, "missing")
        return d

    @field_validator("params", mode="after")
    @classmethod
    def _filled_in(cls, v: dict[str, Any], info: ValidationInfo) -> dict[str, Any]:
        """Every parameter of the method, checked and with its default filled in (keys of other
        versions of the lab are left out)."""
        spec = info.context["spec"]
        known = set(spec.defaults) | set(SAMPLING_DEFAULTS)
        try:
            return resolve_params(spec.name, {k: x for k, x in v.items() if k in known})
        except ConfigError as e:
            fail("", str(e))

    @model_validator(mode="after")
    def _whole(self, info: ValidationInfo) -> "Trace":
        spec = info.context["spec"]
        if info.context.get("v1"):
            for s in self.steps:
                s.origins = legacy_origins(spec.name, s)
        self.version = SCHEMA_VERSION  # upgraded on loading
        _check_method_fields(self, spec)
        for i, s in enumerate(self.steps):
            _check_step(self, s, f"steps[{i}]", i)
        _check_output(self)
        return self


# ---- loading ---------------------------------------------------------------------------------------
def _header(d: Any):
    """(the method's spec, the version) of the trace dict ``d``."""
    if not isinstance(d, dict):
        raise TraceError("a trace must be a JSON object")
    version = d.get("version")
    if type(version) is not int or version not in READS_VERSIONS:
        raise TraceError(f"version: unsupported trace version {version!r} (this app reads versions "
                         f"{', '.join(map(str, READS_VERSIONS))})")
    method = d.get("method")
    if not isinstance(method, str) or method not in REGISTRY:
        raise TraceError(f"method: unknown method {str(method)[:40]!r} (this app knows {', '.join(REGISTRY)})")
    return REGISTRY[method], version


def _upgrade(d: dict, spec) -> dict:
    """A version 1 or 2 trace dict in version 3's form: each step's record, stored under the key
    its method's spec names (``MethodSpec.legacy_record``), moves to ``record``."""
    keys = {sp.legacy_record: sp for sp in REGISTRY.values() if sp.legacy_record}
    steps = d.get("steps")
    if not isinstance(steps, list):
        return d
    out = []
    for i, s in enumerate(steps):
        if isinstance(s, dict):
            s = {k: v for k, v in s.items() if k not in keys} | {"record": None}
            for k, sp in keys.items():
                v = steps[i].get(k)
                if v is not None and sp is not spec:
                    raise TraceError(f"steps[{i}].{k}: a {spec.name} trace holds no {sp.name} records")
                if v is not None:
                    s["record"] = v
        out.append(s)
    return d | {"steps": out}


def legacy_origins(method: str, step: Step) -> list[str]:
    """Origins of a version-1 step (which did not store them): the accepted guesses first, then
    the model's own token, as the verifier of version 2 decides them."""
    cls = REGISTRY[method].record
    src, m = "step", 0
    if cls is not None:
        src, m = step.record.v1_guesses() if step.record is not None else (cls.v1_origin, len(step.tokens) - 1)
    if step.sampling is not None:
        m = len(step.sampling.final) - 1
    return ([src] * m + ["step"])[:len(step.tokens)]


# ---- the rules across fields: a trace accepted here draws on every page -----------------------------
_OWNED: dict[str, list[str]] = {}  # trace-level field -> the methods that fill it
for _spec in REGISTRY.values():
    for _name in (_spec.record.trace_fields if _spec.record else {}):
        _OWNED.setdefault(_name, []).append(_spec.name)
_ADAPTERS: dict[Any, TypeAdapter] = {}


def _adapter(tp: Any) -> TypeAdapter:
    if tp not in _ADAPTERS:
        _ADAPTERS[tp] = TypeAdapter(tp)
    return _ADAPTERS[tp]


def _check_method_fields(t: Trace, spec) -> None:
    """The trace-level fields a method fills: typed by its record's ``trace_fields`` and checked by
    its ``check_trace``; empty in the traces of the other methods."""
    owned = spec.record.trace_fields if spec.record else {}
    for name, owners in _OWNED.items():
        if name in owned:
            setattr(t, name, check(_adapter(owned[name]), getattr(t, name), name))
        elif getattr(t, name):
            fail(name, f"a {spec.name} trace has none (only {', '.join(owners)} traces do)")
    if spec.record:
        spec.record.check_trace(t)


def _check_step(t: Trace, s: Step, w: str, i: int) -> None:
    if s.index != i:
        fail(f"{w}.index", f"must be {i}")
    if len(s.origins) != len(s.tokens):
        fail(f"{w}.origins", f"must name one origin ({', '.join(ORIGINS)}) per token")
    if s.record is not None:
        s.record.check_in(t, f"{w}.record")
    if s.budget is not None and s.budget.realized != len(s.tokens):
        fail(f"{w}.budget.realized", f"must be the {len(s.tokens)} tokens the step committed")
    if s.sampling is not None:
        chains = s.record.chains() if s.record is not None else 1
        for p, pos in enumerate(s.sampling.tried):
            for j, tried in enumerate(pos):
                if tried[0] >= max(chains, 1):
                    fail(f"{w}.sampling.tried[{p}][{j}]", f"names candidate {tried[0]} of the step's {chains}")
        if s.sampling.final[:len(s.tokens)] != s.tokens:
            fail(f"{w}.sampling.final", "must begin with the tokens the step committed")


def _check_output(t: Trace) -> None:
    n_out, committed = len(t.output_ids), [x for s in t.steps for x in s.tokens]
    if n_out != 1 + len(committed):
        fail("output_ids", f"must be the prefill's token followed by the {len(committed)} tokens of the "
                           f"{len(t.steps)} steps, {1 + len(committed)} in all, not {n_out}")
    if t.output_ids[1:] != committed:
        fail("output_ids", "the steps' tokens do not add up to output_ids")
    if len(t.output_pieces) not in (0, n_out):
        fail("output_pieces", f"must hold one piece per output token ({n_out}), not {len(t.output_pieces)}")
    if len(t.prompt_pieces) not in (0, len(t.prompt_ids)):
        fail("prompt_pieces", f"must hold one piece per prompt token ({len(t.prompt_ids)}), not {len(t.prompt_pieces)}")


_ADAPTER = TypeAdapter(Trace)
