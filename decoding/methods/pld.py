"""Prompt lookup decoding: the draft is what followed the last earlier occurrence of the trailing
n-gram (longest n first) in prompt + output, verified as one chain.

Example: seq = [5, 1, 2, 3, 9, 1, 2], max_ngram = 2 -> trailing (1, 2) occurred at index 1,
so the draft is [3, 9, 1, ...] (up to k tokens).

With ``budget="auto"`` the continuations of the last few occurrences (of every trailing n-gram
size) form a draft tree, and each step feeds the part of it that pays on this hardware
(decoding/budget.py): from nothing (a plain AR step) to k tokens deep.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from pydantic import model_validator

from ..budget import Acceptance, Budget, DraftTree, is_auto
from ..records import Count, Int, Record, Tokens, fail
from ..verify import Chain, Proposal, StepContext
from .base import Method
from .spec import BUDGET_PARAM, MethodSpec, Param

OCCURRENCES = 4  # budget="auto": continuations of up to this many earlier occurrences


def find_drafts(seq: list[int], k: int, max_ngram: int, limit: int = 1) -> list[tuple[list[int], int, int]]:
    """Up to ``limit`` (draft, n-gram size, start index): the continuations after the latest earlier
    occurrences of the trailing n-gram, longest n first, then more recent first."""
    out: list[tuple[list[int], int, int]] = []
    if k <= 0:
        return out
    for ng in range(min(max_ngram, len(seq) - 1), 0, -1):
        pat = seq[-ng:]
        for i in range(len(seq) - ng - 1, -1, -1):
            if seq[i + ng - 1] == pat[-1] and seq[i:i + ng] == pat:
                out.append((seq[i + ng:i + ng + k], ng, i + ng))
                if len(out) >= limit:
                    return out
        if out and limit == 1:
            break
    return out


def find_draft(seq: list[int], k: int, max_ngram: int) -> tuple[list[int], int, int]:
    """(draft, size of the trailing n-gram that matched (0: none), index the draft starts at (-1))."""
    found = find_drafts(seq, k, max_ngram)
    return found[0] if found else ([], 0, -1)


@dataclass(frozen=True)
class Lookup:
    """A fixed-budget step's lookup (its record's fields): the n-gram size that matched (0: none) and
    the index its draft starts at (-1)."""

    ngram: int
    source: int


class PromptLookup(Method):
    def __init__(self, ctx: StepContext, params):
        super().__init__(ctx, params)
        acc = Acceptance({"ngram1": 0.15, "ngram2": 0.3, "ngram3": 0.45}, deep=0.6)
        self.budget = Budget(ctx.costs, acc) if is_auto(params) else None

    def propose(self, ctx: StepContext) -> Proposal:
        room = ctx.max_new_tokens - len(ctx.output)  # accepted draft tokens + the model's token
        k = min(self.p["k"], room - 1)
        if self.budget:  # the continuations of the last few occurrences, as a tree; the budget cuts it
            tree = DraftTree()
            for draft, ng, src in find_drafts(ctx.all_ids, k, self.p["max_ngram"], OCCURRENCES):
                tree.add(draft, f"ngram{min(ng, 3)}", (ng, src))
            return self.budget.propose(tree, ctx, lambda s: "pld")
        draft, ngram, source = find_draft(ctx.all_ids, k, self.p["max_ngram"])
        chains = [Chain(draft, list(range(1, len(draft) + 1)), "pld")] if draft else []
        return Proposal(list(draft), chains, note=Lookup(ngram, source))

    def update(self, ctx, proposal, verdict, argmax, committed):
        if not self.budget:
            draft, note = proposal.tokens, proposal.note
            return PldRecord(list(draft), verdict.matched[0] if draft else 0, note.ngram, note.source)
        self.budget.learn(proposal, verdict)
        leaves = proposal.tree.paths
        best = verdict.chosen if verdict.chosen >= 0 else (0 if leaves else -1)
        if best < 0:
            return PldRecord([], 0, 0, -1)
        ng, src = proposal.tree.tree.nodes[leaves[best][-1]].tag  # the first occurrence through the whole path
        return PldRecord(proposal.chains[best].tokens, verdict.matched[best], ng, src)


# ---- its record (Step.record) --------------------------------------------------------------------
@dataclass
class PldRecord(Record):
    """One prompt-lookup step: the draft, how far it matched, and the n-gram that found it."""

    draft: Tokens
    matched: Count
    ngram: Count  # size of the trailing n-gram that matched (0: no match, no draft)
    source: Int  # index in prompt + output where the draft was copied from (-1: none)

    v1_origin: ClassVar[str] = "pld"

    @model_validator(mode="after")
    def _one_draft(self):
        if self.matched > len(self.draft):
            fail("matched", f"must be at most the draft's {len(self.draft)} tokens, got {self.matched}")
        return self

    def token_ids(self):
        return self.draft

    def v1_guesses(self):
        return "pld", self.matched

    def check_in(self, trace, where):
        n_ids = len(trace.prompt_ids) + len(trace.output_ids)
        if not -1 <= self.source < n_ids:
            fail(f"{where}.source", f"must be -1 or an index into prompt + output (below {n_ids}), got {self.source}")


SPEC = MethodSpec(
    name="pld", label="Prompt lookup", colour="#D55E00", cls=PromptLookup, samples=True, record=PldRecord,
    legacy_record="pld",
    params=(
        Param("k", 10, "max draft tokens", 1, 64, label="k (max draft tokens)", tuned=True),
        Param("max_ngram", 3, "longest trailing n-gram to look up", 1, 16, label="max n-gram", tuned=True),
        BUDGET_PARAM,
    ),
    grid=({"k": 10, "max_ngram": 3}, {"k": 4, "max_ngram": 3}),
)
