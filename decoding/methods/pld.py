"""Prompt lookup decoding: the draft is what followed the last earlier occurrence of the trailing
n-gram (longest n first) in prompt + output, verified as one chain.

Example: seq = [5, 1, 2, 3, 9, 1, 2], max_ngram = 2 -> trailing (1, 2) occurred at index 1,
so the draft is [3, 9, 1, ...] (up to k tokens).
"""

from __future__ import annotations

from ..trace import PldRecord
from ..verify import Chain, Proposal
from .base import Method
from .spec import MethodSpec, Param


def find_draft(seq: list[int], k: int, max_ngram: int) -> tuple[list[int], int, int]:
    """(draft, size of the trailing n-gram that matched (0: none), index the draft starts at (-1))."""
    if k <= 0:
        return [], 0, -1
    for ng in range(min(max_ngram, len(seq) - 1), 0, -1):
        pat = seq[-ng:]
        for i in range(len(seq) - ng - 1, -1, -1):
            if seq[i + ng - 1] == pat[-1] and seq[i:i + ng] == pat:
                draft = seq[i + ng:i + ng + k]
                if draft:
                    return draft, ng, i + ng
                break
    return [], 0, -1


class PromptLookup(Method):
    def propose(self, run) -> Proposal:
        room = run.max_new_tokens - len(run.output)  # accepted draft tokens + the model's token
        draft, ngram, source = find_draft(run.all_ids, min(self.p["k"], room - 1), self.p["max_ngram"])
        chains = [Chain(draft, list(range(1, len(draft) + 1)), "pld")] if draft else []
        return Proposal(list(draft), chains, info={"ngram": ngram, "source": source})

    def update(self, run, proposal, verdict, argmax, committed):
        draft = proposal.tokens
        return PldRecord(list(draft), verdict.matched[0] if draft else 0, proposal.info["ngram"], proposal.info["source"])


SPEC = MethodSpec(
    name="pld", label="Prompt lookup", colour="#D55E00", cls=PromptLookup, samples=True, record="pld",
    summary="copies the continuation of the trailing n-gram's last earlier occurrence",
    params=(
        Param("k", 10, "max draft tokens", 1, 64, label="k (max draft tokens)", tuned=True),
        Param("max_ngram", 3, "longest trailing n-gram to look up", 1, 16, label="max n-gram", tuned=True),
    ),
    grid=({"k": 10, "max_ngram": 3}, {"k": 4, "max_ngram": 3}),
)
