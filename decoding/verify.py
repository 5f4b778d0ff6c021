"""The contract between proposing and verifying, and the two verifiers every method shares.

A method's ``propose`` gets a ``StepContext`` (what it may read of the run) and returns a ``Proposal``: the tokens to feed after the current token, their
positions and mask, the fed rows whose logits are needed, and its guesses as ``Chain``s (a chain is
a guessed continuation of the current token and the fed row each of its tokens sits on). The loop
runs the forward and hands the proposal and the logits to one verifier:

- ``verify_greedy``: a chain matches as far as each of its tokens equals the argmax at the row
  before it (the current token's row for the first); the longest match wins (the first chain on a
  tie), and the model's own argmax after the matched tokens is appended. So a step commits
  ``[c1 .. cm, b]``: m guessed tokens, then the model's own token ``b``.
- ``verify_sampled``: the same chains through ``verify_tree`` (speculative sampling with one-hot
  drafts), so the output is distributed as AR sampling.

Both return a ``Verdict`` that carries everything the rest of the run needs: the tokens, the fed
rows whose KV stays, the origin of each token (decided here, once, and stored in the trace), how far
each chain matched and which one was taken.

No torch here: logits arrive as whatever the sampler reads; greedy verification reads plain lists.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable

from .draft import FedTree
from .origins import ORIGINS  # noqa: F401 (ORIGINS: where a committed token came from)
from .records import BudgetRecord, SampleRecord

if TYPE_CHECKING:
    import torch

@dataclass
class Chain:
    """A guessed continuation of the current token: ``tokens[i]`` is fed on row ``rows[i]``."""

    tokens: list[int]
    rows: list[int]
    origin: str  # a key of ORIGINS: what the accepted tokens of this chain count as

    def row_before(self, d: int) -> int:
        """The fed row whose logits predict depth d (0: the current token's row)."""
        return 0 if d == 0 else self.rows[d - 1]


@dataclass(frozen=True)
class StepContext:
    """What a method sees of the run (decoding.loop.Run) at a step: a snapshot, taken before the
    step for ``propose`` and after its commit for ``update``."""

    prompt_ids: list[int]
    output: list[int]  # committed so far (the prefill's token first)
    max_new_tokens: int
    done: bool  # the run has ended (EOS or max_new_tokens): this was its last step
    dtype: torch.dtype  # the model's dtype (for masks)
    device: torch.device | str  # the model's device
    costs: Any = None  # budget="auto": the run's decoding.budget.StepCosts (calibrated by the loop), else None

    @property
    def cur(self) -> int:
        """The current token: the last committed one (its KV is not cached yet)."""
        return self.output[-1]

    @property
    def all_ids(self) -> list[int]:
        return self.prompt_ids + self.output

    @property
    def past(self) -> int:
        """Cached positions: everything but the current token."""
        return len(self.prompt_ids) + len(self.output) - 1


@dataclass
class Proposal:
    tokens: list[int]  # fed after the current token (fed row i + 1 is tokens[i])
    chains: list[Chain] = field(default_factory=list)
    offsets: torch.Tensor | None = None  # positions relative to the current token (None: 1, 2, ...)
    mask: torch.Tensor | None = None  # 4D float mask, or None for a plain causal sequence
    logit_rows: list[int] | None = None  # fed rows whose logits are needed (None: all)
    tree: FedTree | None = None  # the draft tree fed, for methods that guess one (decoding/draft.py)
    budget: BudgetRecord | None = None  # budget="auto": what the step weighed and chose (realized left 0)
    note: Any = None  # the method's own frozen note to its update (e.g. decoding.methods.pld.Lookup), or None

    def logit_index(self, row: int) -> int:
        """Index into the forward's logits of fed row ``row``."""
        return row if self.logit_rows is None else self.logit_rows.index(row)


@dataclass
class Verdict:
    tokens: list[int]  # decided tokens: accepted guesses first, the model's own token last
    keep: list[int]  # fed rows whose KV stays (0, the current token, first)
    origins: list[str]  # one per token (keys of ORIGINS)
    matched: list[int]  # per chain: how many of its tokens matched
    chosen: int = -1  # the chain the accepted tokens belong to (-1: none)
    sampling: SampleRecord | None = None  # the sampled verification's record


def _verdict(proposal: Proposal, tokens: list[int], chosen: int, matched: list[int], rec=None) -> Verdict:
    a = len(tokens) - 1
    if chosen < 0:
        return Verdict(tokens, [0], ["step"], matched, -1, rec)
    chain = proposal.chains[chosen]
    return Verdict(tokens, [0] + chain.rows[:a], [chain.origin] * a + ["step"], matched, chosen, rec)


def verify_greedy(proposal: Proposal, argmax: list[int]) -> Verdict:
    """``argmax[i]``: the argmax at logits row i (rows as ``proposal.logit_rows``)."""
    pred = lambda c, d: argmax[proposal.logit_index(c.row_before(d))]
    matched = []
    for c in proposal.chains:
        k = 0
        while k < len(c.tokens) and c.tokens[k] == pred(c, k):
            k += 1
        matched.append(k)
    best = max(range(len(matched)), key=lambda i: (matched[i], -i), default=-1)
    if best < 0 or matched[best] == 0:
        return _verdict(proposal, [argmax[0]], -1, matched)
    chain, k = proposal.chains[best], matched[best]
    return _verdict(proposal, chain.tokens[:k] + [pred(chain, k)], best, matched)


def verify_sampled(proposal: Proposal, logits, sampler) -> Verdict:
    """``logits`` rows as ``proposal.logit_rows``; ``sampler`` a decoding.sampling.Sampler."""
    chains = proposal.chains
    dist = lambda c, d: sampler.probs(logits[proposal.logit_index(chains[c].row_before(d) if c >= 0 else 0)])
    tokens, best, rec = verify_tree([c.tokens for c in chains], dist, sampler)
    matched = [_common_prefix(c.tokens, tokens) for c in chains]
    return _verdict(proposal, tokens, best, matched, rec)


def _common_prefix(a: list[int], b: list[int]) -> int:
    n = 0
    while n < len(a) and n < len(b) and a[n] == b[n]:
        n += 1
    return n


def verify_tree(cands: list[list[int]], dist: Callable, sampler) -> tuple[list[int], int, SampleRecord]:
    """Sampling verification of candidate continuations of the current token (one-hot drafts).

    ``dist(c, d)``: p for the token at depth d (0 = right after the current token), computed from
    the logits at the fed position that precedes it along candidate c (c = -1 before any candidate
    is accepted, at depth 0): the current token for d = 0, candidate c's token d-1 otherwise (any
    candidate with the same accepted prefix has the same context there, so the same p).

    At each depth the candidates that share the accepted prefix are tried in order:
        # q = p(t) / sum(p): token t of the candidate is accepted with probability q
        # rejected: p(t) = 0 (the rest renormalised); the next candidate is tried
        # nothing accepted, or no candidate reaches this depth: draw from what is left of p
    Each accept is speculative sampling's min(1, p/q_draft) rule with a one-hot draft, and each
    rejection leaves the residual max(0, p - q_draft) normalised, so the token at every depth has
    exactly the distribution p: the output is distributed as AR sampling.

    Returns (tokens decided, the candidate the accepted prefix belongs to or -1, the record).
    """
    tokens: list[int] = []
    chosen = -1
    active = list(range(len(cands)))
    rec = SampleRecord([], [], [])
    while True:
        d = len(tokens)
        p = dist(chosen, d).clone()
        tried, hit = _try_depth(cands, active, d, p, sampler)
        rec.tried.append(tried)
        if hit < 0:  # draw from what is left (all of p if nothing was tried)
            t = sampler.draw(p)
            rec.final.append(t)
            rec.final_p.append(round(float(p[t] / p.sum()), 6))
            tokens.append(t)
            return tokens, chosen, rec
        t = cands[hit][d]
        rec.final.append(t)
        rec.final_p.append(tried[-1][2])
        tokens.append(t)
        chosen = hit
        active = [c for c in active if cands[c][:d + 1] == tokens]


def _try_depth(cands, active, d: int, p, sampler) -> tuple[list[list], int]:
    """Try the active candidates' tokens at depth d in order; returns (the tries, the accepted one or -1)."""
    tried, rejected = [], set()
    for c in active:
        if d >= len(cands[c]) or cands[c][d] in rejected:
            continue
        t = cands[c][d]
        q = float(p[t] / p.sum())
        ok = sampler.accepts(q)
        tried.append([c, t, round(q, 6), ok])
        if ok:
            return tried, c
        sampler.reject(p, t)
        rejected.add(t)
    return tried, -1
