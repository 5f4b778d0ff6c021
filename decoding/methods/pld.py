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

from ..budget import Acceptance, DraftTree, choose, observe_tree, paths, plain_step
from ..records import BudgetRecord, Count, Int, Record, Tokens, fail
from ..verify import Chain, Proposal
from .base import Method
from .spec import MethodSpec, Param
from .tree import BUDGET_PARAM, fed_tree, to_mask, tree_attention

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


class PromptLookup(Method):
    def __init__(self, run, params):
        super().__init__(run, params)
        self.auto = params["budget"] == "auto"
        self.acc = Acceptance({"ngram1": 0.15, "ngram2": 0.3, "ngram3": 0.45}, deep=0.6)

    def propose(self, run) -> Proposal:
        room = run.max_new_tokens - len(run.output)  # accepted draft tokens + the model's token
        k = min(self.p["k"], room - 1)
        if self.auto:
            return self._propose_auto(run, k)
        draft, ngram, source = find_draft(run.all_ids, k, self.p["max_ngram"])
        chains = [Chain(draft, list(range(1, len(draft) + 1)), "pld")] if draft else []
        return Proposal(list(draft), chains, info={"ngram": ngram, "source": source})

    def _propose_auto(self, run, k: int) -> Proposal:
        tree = DraftTree()
        for draft, ng, src in find_drafts(run.all_ids, k, self.p["max_ngram"], OCCURRENCES):
            tree.add(draft, f"ngram{min(ng, 3)}", (ng, src))
        if run.costs.needs_ar_sample():  # time plain steps first: the unit of every cost
            choice = plain_step()
        else:
            choice = choose(tree, self.acc, run.costs, 1, explore=self.acc.wants_data())
        self.acc.chose(len(choice.nodes))
        tokens, parents, depths, chains = fed_tree(tree, choice.nodes, 1, lambda s: "pld")
        mask = offsets = None
        if any(p != i - 1 for i, p in enumerate(parents)):  # branches: a tree mask (one path is causal)
            allowed, offs = tree_attention([[True]], [0], parents, depths)
            mask, offsets = to_mask(allowed, offs, run.past, run.dtype, run.device)
        budget = BudgetRecord(choice.fed, round(choice.expected, 3), round(choice.cost, 3), 0, False,
                              choice.options, self.acc.snapshot(), round(run.costs.excess(), 3))
        return Proposal(tokens, chains, offsets, mask, None, {"tree": tree, "chosen": choice.nodes}, budget)

    def update(self, run, proposal, verdict, argmax, committed):
        if not self.auto:
            draft = proposal.tokens
            return PldRecord(list(draft), verdict.matched[0] if draft else 0, proposal.info["ngram"], proposal.info["source"])
        tree, chosen = proposal.info["tree"], proposal.info["chosen"]
        leaves = paths(tree, chosen)
        best = verdict.chosen if verdict.chosen >= 0 else (0 if leaves else -1)
        accepted = leaves[best][:verdict.matched[best]] if best >= 0 else []
        observe_tree(tree, chosen, accepted, self.acc)
        if best < 0:
            return PldRecord([], 0, 0, -1)
        ng, src = tree.nodes[leaves[best][-1]].tag  # the first occurrence through the whole path
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
    summary="copies the continuation of the trailing n-gram's last earlier occurrence",
    params=(
        Param("k", 10, "max draft tokens", 1, 64, label="k (max draft tokens)", tuned=True),
        Param("max_ngram", 3, "longest trailing n-gram to look up", 1, 16, label="max n-gram", tuned=True),
        BUDGET_PARAM,
    ),
    grid=({"k": 10, "max_ngram": 3}, {"k": 4, "max_ngram": 3}),
)
