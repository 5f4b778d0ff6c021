"""The base class of a decoding method: what the loop (decoding/loop.py) asks of it.

Per step the loop calls ``propose(ctx)``, feeds ``[current token] + proposal.tokens`` in one
forward, has a shared verifier (decoding/verify.py) decide the tokens from the proposal's chains,
commits them, and hands everything the step showed back to ``update``, which advances the method's
own state (window, pool, Jacobi block) and returns the step's record for the trace.

``ctx`` (a decoding.verify.StepContext) is a frozen snapshot of the run: prompt_ids, output, cur (the
current token), all_ids, past (cached positions), max_new_tokens, done, dtype, device and, with
``budget="auto"``, costs. ``propose`` gets it before the step, ``update`` after the commit. What a
method needs from its own proposal in ``update`` travels in the Proposal's typed fields (``tree``,
``budget``, ``note``).
"""

from __future__ import annotations

from typing import Any

from ..verify import Proposal, StepContext, Verdict


class Method:
    def __init__(self, ctx: StepContext, params: dict[str, Any]):
        self.p = params

    def trace_fields(self) -> dict[str, Any]:
        """Trace fields this method fills (the objects stay live: e.g. Jacobi's list of blocks)."""
        return {}

    def propose(self, ctx: StepContext) -> Proposal:
        return Proposal([])

    def update(self, ctx: StepContext, proposal: Proposal, verdict: Verdict, argmax: list[int],
               committed: list[int]) -> Any:
        """Learn from the step (``argmax``: per logits row, as ``proposal.logit_rows``); return its record."""
        return None

    def finish(self, ctx: StepContext) -> None:
        """The run ended (done, or stopped between steps)."""
