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
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass, field, fields
from typing import Any

SCHEMA_VERSION = 2  # 2: Step.origins (version 1 traces still load: origins are derived on loading)
READS_VERSIONS = (1, 2)

# Where a committed token came from (Step.origins), decided by the verifier (decoding/verify.py).
ORIGINS = {
    "prefill": "first token, from the prefill",
    "step": "the model's own next token of a step (what AR would produce; under sampling: the token drawn)",
    "jacobi": "Jacobi fast-forward: a guess that had already converged",
    "pool": "lookahead pool n-gram harvested from the window",
    "prompt_pool": "lookahead pool n-gram seeded from the prompt",
    "output_pool": "lookahead pool n-gram harvested from committed output",
    "pld": "prompt-lookup draft copied from prompt or output",
    "recycled": "Token Recycling: a successor from the adjacency matrix of earlier forwards' top-k predictions",
}
# lookahead pool entry source (LookaheadRecord.origins) -> the origin of the tokens it gives
POOL_ORIGIN = {"window": "pool", "prompt": "prompt_pool", "output": "output_pool"}


class _Methods:
    """The method registry, registered by decoding.methods when it is imported (it imports this
    module's records, so this module does not import it): the validator checks a trace's method
    and params against it."""

    registry: dict = {}
    resolve = None  # resolve_params(method, params), raising error on a bad value
    sampling: dict = {}  # the sampling params' defaults
    error: type = ValueError


def register_methods(registry: dict, resolve, sampling: dict, error: type) -> None:
    _Methods.registry, _Methods.resolve, _Methods.sampling, _Methods.error = registry, resolve, sampling, error


class TraceError(ValueError):
    """A trace file or dict that does not follow the schema."""


@dataclass
class JacobiRecord:
    """One Jacobi iteration of one block.

    ``before`` / ``after`` are the block's n-token state (position 0 is the token the block started
    from, always right). Positions ``< start`` were committed by earlier iterations; this iteration
    fed positions ``start..`` and committed positions ``start .. start + committed - 1``.
    """

    block: int
    iteration: int
    start: int
    before: list[int]
    after: list[int]
    committed: int


@dataclass
class JacobiBlock:
    """A finished (or cut short) Jacobi block: where it starts in the output and its fixed point."""

    index: int
    offset: int  # index in output_ids of the block's position 0
    fixed_point: list[int]
    iterations: int


@dataclass
class LookaheadRecord:
    """One lookahead step.

    ``window`` is the 2D window as fed (levels x W; fewer than N-1 levels during the first N-2
    steps). ``harvested`` are the n-grams (N tokens, first = key) collected from it. ``candidates``
    are the verified (N-1)-grams that follow the current token, ``matched[i]`` how many of their
    tokens matched the model's argmax chain, ``origins[i]`` where the pool got them ("window",
    "prompt", "output"), ``chosen`` the index of the accepted one (-1 if none matched).
    ``pool_ops`` replays the pool's changes in order: ["+", gram] added, ["~", gram] refreshed
    (a duplicate moved to newest), ["-", gram] evicted; each gram is N tokens, key first.
    """

    window: list[list[int]]
    harvested: list[list[int]]
    candidates: list[list[int]]
    matched: list[int]
    origins: list[str]
    chosen: int
    pool_ops: list[list[Any]]


@dataclass
class PldRecord:
    """One prompt-lookup step: the draft, how far it matched, and the n-gram that found it."""

    draft: list[int]
    matched: int
    ngram: int  # size of the trailing n-gram that matched (0: no match, no draft)
    source: int  # index in prompt + output where the draft was copied from (-1: none)


@dataclass
class RecyclingRecord:
    """One Token Recycling step (decoding/methods/recycling.py).

    The draft tree as fed: ``tokens[i]`` with parent ``parents[i]`` (an index into ``tokens``, -1:
    the current token), read from column ``cols[i]`` of its parent's matrix row (0: the parent's
    top-1 successor). ``path``: the tree nodes (indices into ``tokens``) of the accepted branch,
    root first (empty: nothing matched). ``written``: the matrix rows this step's forward changed,
    each ``[token, successor 1, .., successor k]`` (the new top-k after that token, in the context
    it was fed in); ``n_written``: how many rows it wrote in all (unchanged ones included).
    The rows read are the parents' rows: a node's token is ``row(parent)[col]``.
    """

    tokens: list[int]
    parents: list[int]
    cols: list[int]
    path: list[int]
    written: list[list[int]]
    n_written: int


@dataclass
class SampleRecord:
    """Sampling verification of one step (temperature > 0): one entry per output position it decided.

    ``tried[i]``: the candidate tokens tried at position i, in order, each ``[candidate, token, p,
    accepted]`` (candidate: index into the step's lookahead candidates, 0 for a pld draft; p: the
    token's probability at that moment, after the earlier rejections at this position were set to 0
    and the rest renormalised; accepted: true / false). ``final[i]``: the token position i got;
    ``final_p[i]``: its probability in the distribution it came from (an accepted candidate's p, or
    the draw from what was left when no try was accepted or none was possible). The step commits a
    prefix of ``final`` (all of it unless EOS or max_new_tokens cut it).

    Example (lookahead, candidates [[5, 6], [5, 9]]): tried [[[0, 5, 0.6, true]], [[0, 6, 0.3,
    false], [1, 9, 0.2, true]], []], final [5, 9, 4], final_p [0.6, 0.2, 0.35]: 5 accepted, 6
    rejected, then 9 (p renormalised without 6) accepted, and 4 drawn after the full match.
    """

    tried: list[list[list[Any]]]
    final: list[int]
    final_p: list[float]


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

    fed: int
    expected: float
    cost: float
    realized: int
    window: bool
    options: list[list[float]]
    acceptance: dict[str, float]
    calibration: float


@dataclass
class Step:
    index: int
    fed: int  # tokens fed to this step's forward
    tokens: list[int]  # tokens this step committed to the output, in order
    seconds: float  # wall time of the whole step (propose, forward, verify, commit, record)
    forward_seconds: float  # wall time of the forward alone
    jacobi: JacobiRecord | None = None
    lookahead: LookaheadRecord | None = None
    pld: PldRecord | None = None
    recycling: RecyclingRecord | None = None
    sampling: SampleRecord | None = None  # only when the run sampled (temperature > 0)
    # where each committed token came from (ORIGINS), decided by the verifier (decoding/verify.py):
    # accepted guesses first, the model's own token ("step") last
    origins: list[str] = field(default_factory=list)
    budget: BudgetRecord | None = None  # only for budget="auto" runs


@dataclass
class Trace:
    method: str
    params: dict[str, Any]
    model_id: str
    device: str
    dtype: str
    prompt_ids: list[int]
    output_ids: list[int] = field(default_factory=list)
    prompt_pieces: list[str] = field(default_factory=list)
    output_pieces: list[str] = field(default_factory=list)
    steps: list[Step] = field(default_factory=list)
    blocks: list[JacobiBlock] = field(default_factory=list)  # jacobi only
    pool_seed: list[list[int]] = field(default_factory=list)  # lookahead: n-grams seeded before step 0
    vocab: dict[str, str] = field(default_factory=dict)  # text of guess tokens not in prompt/output ("id" -> text)
    prompt_text: str = ""
    chat: bool = False
    max_new_tokens: int = 0
    eos_token_ids: list[int] = field(default_factory=list)
    stop_reason: str = ""  # "eos", "max_new_tokens" or "stopped" (the caller ended the run)
    prefill_seconds: float = 0.0
    seconds: float = 0.0  # prefill + all steps
    recorded: bool = True  # False: the method records were switched off
    version: int = SCHEMA_VERSION
    kernel: str = "stock"  # the linear layers' kernel the model ran with (decoding.kernels; older traces: stock)

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
        ids: set[int] = {t for g in self.pool_seed for t in g}
        for s in self.steps:
            if s.jacobi:
                ids.update(s.jacobi.before, s.jacobi.after)
            if s.lookahead:
                la = s.lookahead
                for rows in (la.window, la.harvested, la.candidates):
                    for r in rows:
                        ids.update(r)
                for _, g in la.pool_ops:
                    ids.update(g)
            if s.pld:
                ids.update(s.pld.draft)
            if s.recycling:
                ids.update(s.recycling.tokens)
                for r in s.recycling.written:
                    ids.update(r)
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
        return _trace_from_dict(d)

    @classmethod
    def from_json(cls, text: str | bytes) -> "Trace":
        try:
            d = json.loads(text)
        except (json.JSONDecodeError, UnicodeDecodeError) as e:
            raise TraceError(f"not a JSON trace: {e}") from None
        return _trace_from_dict(d)

    @classmethod
    def load(cls, path: str) -> "Trace":
        with open(path, "rb") as f:
            return cls.from_json(f.read())


# ---- validation ------------------------------------------------------------------------------
def _check(cond: bool, msg: str) -> None:
    if not cond:
        raise TraceError(msg)


def _ints(v: Any, where: str) -> list[int]:
    _check(isinstance(v, list) and all(type(x) is int for x in v), f"{where} must be a list of integers")
    return v


def _int_rows(v: Any, where: str) -> list[list[int]]:
    _check(isinstance(v, list), f"{where} must be a list")
    return [_ints(r, f"{where}[{i}]") for i, r in enumerate(v)]


def _num(v: Any, where: str) -> float:
    _check(isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v), f"{where} must be a number")
    return float(v)


def _obj(v: Any, where: str, keys: set[str]) -> dict[str, Any]:
    _check(isinstance(v, dict), f"{where} must be an object")
    missing = keys - set(v)
    _check(not missing, f"{where} lacks {sorted(missing)}")
    return v


def _names(cls) -> set[str]:
    return {f.name for f in fields(cls)}


def _prob(v: Any, where: str) -> float:
    _check(_num(v, where) >= 0 and v <= 1, f"{where} must be a probability in [0, 1]")
    return v


def _sample_record(r: Any, w: str) -> SampleRecord:
    _obj(r, w, _names(SampleRecord))
    final = _ints(r["final"], f"{w}.final")
    _check(isinstance(r["final_p"], list), f"{w}.final_p must be a list")
    for i, p in enumerate(r["final_p"]):
        _prob(p, f"{w}.final_p[{i}]")
    _check(isinstance(r["tried"], list), f"{w}.tried must be a list")
    _check(len(r["tried"]) == len(final) == len(r["final_p"]), f"{w}: one tried/final/final_p entry per position")
    for i, pos in enumerate(r["tried"]):
        _check(isinstance(pos, list), f"{w}.tried[{i}] must be a list")
        for j, t in enumerate(pos):
            where = f"{w}.tried[{i}][{j}]"
            _check(isinstance(t, list) and len(t) == 4 and type(t[0]) is int and type(t[1]) is int
                   and type(t[3]) is bool, f"{where} must be [candidate, token, p, accepted]")
            _prob(t[2], f"{where} p")
    return SampleRecord(r["tried"], final, r["final_p"])


def _budget_record(r: Any, w: str) -> BudgetRecord:
    _obj(r, w, _names(BudgetRecord))
    _check(type(r["fed"]) is int and r["fed"] >= 1 and type(r["realized"]) is int and r["realized"] >= 0,
           f"{w}: fed and realized must be counts")
    for k in ("expected", "cost", "calibration"):
        _num(r[k], f"{w}.{k}")
    _check(isinstance(r["window"], bool), f"{w}.window must be true or false")
    _check(isinstance(r["options"], list) and all(isinstance(o, list) and len(o) == 3 and all(
        isinstance(x, (int, float)) and not isinstance(x, bool) for x in o) for o in r["options"]),
        f"{w}.options must be [fed, expected, cost] triples")
    _check(isinstance(r["acceptance"], dict) and all(isinstance(k, str) for k in r["acceptance"]), f"{w}.acceptance must map sources to numbers")
    for k, v in r["acceptance"].items():
        _prob(v, f"{w}.acceptance[{k!r}]")
    return BudgetRecord(**{k: r[k] for k in _names(BudgetRecord)})


def _recycling_record(r: Any, w: str) -> RecyclingRecord:
    _obj(r, w, _names(RecyclingRecord))
    tokens, parents, cols = (_ints(r[k], f"{w}.{k}") for k in ("tokens", "parents", "cols"))
    _check(len(tokens) == len(parents) == len(cols), f"{w}: one parent and column per tree node")
    _check(all(-1 <= p < i for i, p in enumerate(parents)), f"{w}.parents: each node's parent comes before it")
    path = _ints(r["path"], f"{w}.path")
    _check(all(0 <= i < len(tokens) for i in path) and all(
        parents[b] == a for a, b in zip([-1] + path, path)), f"{w}.path must be a branch of the tree from its root")
    written = _int_rows(r["written"], f"{w}.written")
    _check(all(len(row) >= 1 for row in written), f"{w}.written rows start with their token")
    _check(type(r["n_written"]) is int and r["n_written"] >= len(written), f"{w}.n_written must count the rows written")
    return RecyclingRecord(tokens, parents, cols, path, written, r["n_written"])


def _trace_from_dict(d: Any) -> Trace:
    _check(isinstance(d, dict), "a trace must be a JSON object")
    version = d.get("version")
    _check(version in READS_VERSIONS, f"unsupported trace version {version!r} (this app reads versions "
                                      f"{', '.join(map(str, READS_VERSIONS))})")
    required = {"method", "params", "model_id", "device", "dtype", "prompt_ids", "output_ids", "steps"}
    _obj(d, "trace", required)
    _check(isinstance(d["method"], str) and d["method"] in _Methods.registry, f"unknown method {d['method']!r}")
    _check(isinstance(d["params"], dict), "params must be an object")
    for k in ("model_id", "device", "dtype"):
        _check(isinstance(d[k], str), f"{k} must be a string")
    _check(d.get("kernel", "stock") in ("stock", "skinny"), "kernel must be 'stock' or 'skinny'")
    kw: dict[str, Any] = {k: v for k, v in d.items() if k in _names(Trace)}
    kw["prompt_ids"] = _ints(d["prompt_ids"], "prompt_ids")
    kw["output_ids"] = _ints(d["output_ids"], "output_ids")
    for k in ("prompt_pieces", "output_pieces"):
        v = d.get(k, [])
        _check(isinstance(v, list) and all(isinstance(x, str) for x in v), f"{k} must be a list of strings")
    _check(len(d.get("output_pieces", [])) in (0, len(kw["output_ids"])), "output_pieces and output_ids differ in length")
    _check(isinstance(d["steps"], list), "steps must be a list")
    steps = []
    for i, s in enumerate(d["steps"]):
        w = f"steps[{i}]"
        _obj(s, w, {"index", "fed", "tokens", "seconds", "forward_seconds"})
        step = Step(
            index=s["index"], fed=s["fed"], tokens=_ints(s["tokens"], f"{w}.tokens"),
            seconds=_num(s["seconds"], f"{w}.seconds"), forward_seconds=_num(s["forward_seconds"], f"{w}.forward_seconds"),
        )
        _check(type(step.index) is int and type(step.fed) is int, f"{w}.index and .fed must be integers")
        if s.get("jacobi") is not None:
            j = _obj(s["jacobi"], f"{w}.jacobi", _names(JacobiRecord))
            step.jacobi = JacobiRecord(**{k: j[k] for k in _names(JacobiRecord)})
            _ints(j["before"], f"{w}.jacobi.before"), _ints(j["after"], f"{w}.jacobi.after")
        if s.get("lookahead") is not None:
            la = _obj(s["lookahead"], f"{w}.lookahead", _names(LookaheadRecord))
            _int_rows(la["window"], f"{w}.lookahead.window")
            _int_rows(la["harvested"], f"{w}.lookahead.harvested")
            _int_rows(la["candidates"], f"{w}.lookahead.candidates")
            _ints(la["matched"], f"{w}.lookahead.matched")
            _check(isinstance(la["origins"], list), f"{w}.lookahead.origins must be a list")
            _check(len(la["matched"]) == len(la["candidates"]) == len(la["origins"]), f"{w}.lookahead: one matched/origin per candidate")
            _check(isinstance(la["pool_ops"], list) and all(
                isinstance(o, list) and len(o) == 2 and o[0] in ("+", "-", "~") for o in la["pool_ops"]),
                f"{w}.lookahead.pool_ops is malformed")
            step.lookahead = LookaheadRecord(**{k: la[k] for k in _names(LookaheadRecord)})
        if s.get("pld") is not None:
            p = _obj(s["pld"], f"{w}.pld", _names(PldRecord))
            _ints(p["draft"], f"{w}.pld.draft")
            step.pld = PldRecord(**{k: p[k] for k in _names(PldRecord)})
        if s.get("recycling") is not None:
            step.recycling = _recycling_record(s["recycling"], f"{w}.recycling")
        if s.get("sampling") is not None:
            step.sampling = _sample_record(s["sampling"], f"{w}.sampling")
        if s.get("budget") is not None:
            step.budget = _budget_record(s["budget"], f"{w}.budget")
        step.origins = _origins(s, step, d["method"], w) if version >= 2 else legacy_origins(d["method"], step)
        steps.append(step)
    kw["steps"] = steps
    blocks = []
    _check(isinstance(d.get("blocks", []), list), "blocks must be a list")
    for i, b in enumerate(d.get("blocks", [])):
        _obj(b, f"blocks[{i}]", _names(JacobiBlock))
        _ints(b["fixed_point"], f"blocks[{i}].fixed_point")
        blocks.append(JacobiBlock(**{k: b[k] for k in _names(JacobiBlock)}))
    kw["blocks"] = blocks
    kw["pool_seed"] = _int_rows(d.get("pool_seed", []), "pool_seed")
    vocab = d.get("vocab", {})
    _check(isinstance(vocab, dict) and all(isinstance(k, str) and isinstance(v, str) for k, v in vocab.items()),
           "vocab must map token ids (as strings) to text")
    committed = [t for s in steps for t in s.tokens]
    _check(kw["output_ids"][len(kw["output_ids"]) - len(committed):] == committed if committed else True,
           "the steps' tokens do not add up to output_ids")
    kw["version"] = SCHEMA_VERSION  # upgraded on loading
    t = Trace(**kw)
    _check_trace(t)
    return t


def _origins(s: dict, step: Step, method: str, w: str) -> list[str]:
    o = s.get("origins")
    _check(isinstance(o, list) and len(o) == len(step.tokens) and all(x in ORIGINS for x in o),
           f"{w}.origins must name one origin ({', '.join(ORIGINS)}) per token")
    return o


def legacy_origins(method: str, step: Step) -> list[str]:
    """Origins of a version-1 step (which did not store them): the accepted guesses first, then
    the model's own token, as the verifier of version 2 decides them."""
    src, m = "step", 0
    la = step.lookahead
    if step.sampling is not None:
        m = len(step.sampling.final) - 1
    elif step.jacobi is not None:
        m = step.jacobi.committed - 1
    elif step.pld is not None:
        m = step.pld.matched
    elif la is not None:
        m = la.matched[la.chosen] if 0 <= la.chosen < len(la.matched) else 0
    elif method != "ar":
        m = len(step.tokens) - 1
    if method == "lookahead":
        src = POOL_ORIGIN.get(la.origins[la.chosen], "pool") if la is not None and 0 <= la.chosen < len(la.origins) else "pool"
    elif method in ("jacobi", "pld"):
        src = method
    return ([src] * m + ["step"])[:len(step.tokens)]


# ---- types and indices: a trace accepted here draws on every view -------------------------------------
_STOP_REASONS = ("", "eos", "max_new_tokens", "stopped")


def _count(v: Any, where: str, lo: int = 0, hi: int | None = None) -> int:
    ok = type(v) is int and v >= lo and (hi is None or v <= hi)
    _check(ok, f"{where} must be an integer from {lo}" + (f" to {hi}" if hi is not None else "") + f", got {v!r}")
    return v


def _token_ids(v: Any, where: str) -> list[int]:
    _check(all(x >= 0 for x in _ints(v, where)), f"{where} must hold token ids (integers >= 0)")
    return v


def _seconds(v: Any, where: str) -> float:
    _check(_num(v, where) >= 0, f"{where} must be a number of seconds >= 0")
    return v


def _check_trace(t: Trace) -> None:
    """Every field's type, and every index against what it indexes (candidates, drafts, blocks,
    steps, the output), beyond the shape checks made while reading."""
    _check_header(t)
    n_out = len(t.output_ids)
    _check(not t.steps or n_out == 1 + sum(len(s.tokens) for s in t.steps),
           "output_ids must be the prefill's token followed by the steps' tokens")
    record = {"jacobi": "jacobi", "lookahead": "lookahead", "pld": "pld"}.get(t.method)
    blocks = {b.index for b in t.blocks}
    for i, s in enumerate(t.steps):
        w = f"steps[{i}]"
        _check(s.index == i, f"{w}.index must be {i}")
        _count(s.fed, f"{w}.fed", 1)
        _check(len(_token_ids(s.tokens, f"{w}.tokens")) >= 1, f"{w} must commit at least one token")
        _seconds(s.seconds, f"{w}.seconds"), _seconds(s.forward_seconds, f"{w}.forward_seconds")
        for kind in ("jacobi", "lookahead", "pld"):
            _check(getattr(s, kind) is None or kind == record, f"{w} has a {kind} record in a {t.method} trace")
        if s.jacobi is not None:
            _check_jacobi(s.jacobi, f"{w}.jacobi", blocks)
        if s.lookahead is not None:
            _check_lookahead(s.lookahead, f"{w}.lookahead")
        if s.pld is not None:
            _check_pld(s.pld, f"{w}.pld", len(t.prompt_ids) + n_out)
        if s.sampling is not None:
            cands = len(s.lookahead.candidates) if s.lookahead is not None else 1
            if s.recycling is not None:  # one candidate per leaf of the draft tree
                cands = len(set(range(len(s.recycling.parents))) - set(s.recycling.parents))
            for p, pos in enumerate(s.sampling.tried):
                for j, tr in enumerate(pos):
                    _count(tr[0], f"{w}.sampling.tried[{p}][{j}] candidate", 0, max(cands - 1, 0))
                    _count(tr[1], f"{w}.sampling.tried[{p}][{j}] token")
            _token_ids(s.sampling.final, f"{w}.sampling.final")
    seen: set[int] = set()
    for i, b in enumerate(t.blocks):
        w = f"blocks[{i}]"
        _check(_count(b.index, f"{w}.index") not in seen, f"{w}.index {b.index} is repeated")
        seen.add(b.index)
        _count(b.offset, f"{w}.offset", 0, max(n_out - 1, 0))
        _count(b.iterations, f"{w}.iterations")
        _token_ids(b.fixed_point, f"{w}.fixed_point")
    for i, g in enumerate(t.pool_seed):
        _token_ids(g, f"pool_seed[{i}]")


def _check_header(t: Trace) -> None:
    _check(all(isinstance(k, str) for k in t.params), "params must map names to values")
    for k, v in t.params.items():
        _check(v is None or isinstance(v, (bool, int, str)) or (isinstance(v, float) and math.isfinite(v)),
               f"params.{k} must be a number, a string or true/false")
    known = set(_Methods.registry[t.method].defaults) | set(_Methods.sampling)
    try:
        _Methods.resolve(t.method, {k: v for k, v in t.params.items() if k in known})
    except _Methods.error as e:
        raise TraceError(f"params: {e}") from None
    _check(len(_token_ids(t.prompt_ids, "prompt_ids")) >= 1, "prompt_ids must not be empty")
    _token_ids(t.output_ids, "output_ids")
    _token_ids(t.eos_token_ids, "eos_token_ids")
    _check(len(t.prompt_pieces) in (0, len(t.prompt_ids)), "prompt_pieces and prompt_ids differ in length")
    _check(isinstance(t.prompt_text, str), "prompt_text must be a string")
    _check(isinstance(t.chat, bool) and isinstance(t.recorded, bool), "chat and recorded must be true or false")
    _count(t.max_new_tokens, "max_new_tokens")
    _check(t.stop_reason in _STOP_REASONS, f"stop_reason must be one of {', '.join(map(repr, _STOP_REASONS))}")
    _seconds(t.prefill_seconds, "prefill_seconds"), _seconds(t.seconds, "seconds")


def _check_jacobi(r: JacobiRecord, w: str, blocks: set[int]) -> None:
    for k in ("block", "iteration", "start", "committed"):
        _count(getattr(r, k), f"{w}.{k}")
    n = len(_token_ids(r.before, f"{w}.before"))
    _check(n >= 1 and len(_token_ids(r.after, f"{w}.after")) == n, f"{w}: before and after must be one block of n >= 1 tokens")
    _count(r.start, f"{w}.start", 0, n - 1)
    _count(r.committed, f"{w}.committed", 1, n - r.start)
    _check(not blocks or r.block in blocks, f"{w}.block {r.block} is not one of the trace's blocks")


def _check_lookahead(r: LookaheadRecord, w: str) -> None:
    rows = [_token_ids(row, f"{w}.window[{i}]") for i, row in enumerate(r.window)]
    _check(len({len(row) for row in rows}) <= 1 and all(rows), f"{w}.window must be levels of equal, non-zero width")
    for i, g in enumerate(r.harvested):
        _token_ids(g, f"{w}.harvested[{i}]")
    for i, c in enumerate(r.candidates):
        _token_ids(c, f"{w}.candidates[{i}]")
        _count(r.matched[i], f"{w}.matched[{i}]", 0, len(c))
    _check(all(isinstance(o, str) for o in r.origins), f"{w}.origins must be strings")
    _count(r.chosen, f"{w}.chosen (-1: none matched)", -1, len(r.candidates) - 1)
    for i, (op, g) in enumerate(r.pool_ops):
        _check(op in ("+", "-", "~"), f"{w}.pool_ops[{i}] must start with '+', '-' or '~'")
        _token_ids(g, f"{w}.pool_ops[{i}] gram")


def _check_pld(r: PldRecord, w: str, n_ids: int) -> None:
    n = len(_token_ids(r.draft, f"{w}.draft"))
    _count(r.matched, f"{w}.matched", 0, n)
    _count(r.ngram, f"{w}.ngram")
    _check(type(r.source) is int and -1 <= r.source < n_ids, f"{w}.source must be -1 or an index into prompt + output")
