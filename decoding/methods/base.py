"""The base class of a decoding method: what the loop (decoding/loop.py) asks of it.

Per step the loop calls ``propose(run)``, feeds ``[current token] + proposal.tokens`` in one
forward, has a shared verifier (decoding/verify.py) decide the tokens from the proposal's chains,
commits them, and hands everything the step showed back to ``update``, which advances the method's
own state (window, pool, Jacobi block) and returns the step's record for the trace.

``run`` (a decoding.loop.Run) is read-only for a method: prompt_ids, output, cur (the current
token), all_ids, past (cached positions), max_new_tokens, dtype, device.
"""

from __future__ import annotations

from typing import Any

from ..verify import Proposal, Verdict


class Method:
    def __init__(self, run, params: dict[str, Any]):
        self.p = params

    def trace_fields(self) -> dict[str, Any]:
        """Trace fields this method fills (the objects stay live: e.g. Jacobi's list of blocks)."""
        return {}

    def propose(self, run) -> Proposal:
        return Proposal([])

    def update(self, run, proposal: Proposal, verdict: Verdict, argmax: list[int], committed: list[int]) -> Any:
        """Learn from the step (``argmax``: per logits row, as ``proposal.logit_rows``); return its record."""
        return None

    def finish(self, run) -> None:
        """The run ended (done, or stopped between steps)."""
