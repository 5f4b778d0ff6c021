"""Where a committed token came from (Step.origins): the origin ids the verifier decides
(decoding/verify.py) and every analysis and figure reads (viz/style.py colours them)."""

from __future__ import annotations

from typing import Literal

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
    "suffix": "suffix drafting: a continuation of an end of the text that occurred before (usually its longest)",
}

Origin = Literal[tuple(ORIGINS)]  # type: ignore[valid-type]
