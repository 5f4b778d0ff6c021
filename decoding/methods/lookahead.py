"""Lookahead decoding (Fu et al., ICML 2024; DESIGN.md, "Lookahead").

Each step feeds, in one forward: the current token, a 2D window of N-1 levels x W columns of
guesses (lookahead branch) and up to G candidate (N-1)-grams from the n-gram pool for the current
token (verification branch), with the 4D mask of ``lookahead_mask``. The window's top level gets
its Jacobi update from the argmax; once the window is full, each column gives one n-gram to the
pool (``lookahead_pool``) and the window slides one level. The candidates are chains, verified by
the shared verifier: the longest match and the model's own token after it are committed.

Options beyond the paper: seed the pool with the prompt's n-grams (``seed_pool_prompt``) and keep
harvesting n-grams from the committed output (``harvest_output``).
"""

from __future__ import annotations

import random

from ..trace import LookaheadRecord
from ..verify import Chain, Proposal
from .base import Method
from .lookahead_mask import mask_4d
from .lookahead_pool import NGramPool
from .spec import MethodSpec, Param

# pool entry source -> the origin of the tokens it gives (decoding.verify.ORIGINS)
POOL_ORIGIN = {"window": "pool", "prompt": "prompt_pool", "output": "output_pool"}


def fed_tokens(W: int, N: int, candidates: int, levels: int | None = None) -> int:
    """Tokens fed by one lookahead step: the current token, the window, the candidates."""
    levels = N - 1 if levels is None else levels
    return 1 + levels * W + candidates * (N - 1)


class Lookahead(Method):
    def __init__(self, run, params):
        super().__init__(run, params)
        self.W, self.N, self.G = params["W"], params["N"], params["G"]
        rng = random.Random(params["seed"])
        self.window = [[rng.choice(run.prompt_ids) for _ in range(self.W)]]  # level 0 from the prompt
        self.pool = NGramPool(self.G)
        self.pool_seed: list[list[int]] = []
        if params["seed_pool_prompt"]:
            ids = run.prompt_ids
            for i in range(len(ids) - self.N + 1):
                self.pool.add(ids[i:i + self.N], "prompt")
            self.pool_seed = [[k, *c] for k, v in self.pool.as_dict().items() for c in v]

    def trace_fields(self):
        return {"pool_seed": self.pool_seed}

    def propose(self, run) -> Proposal:
        W, m, levels = self.W, self.N - 1, len(self.window)
        cands = self.pool.candidates(run.cur)[:self.G]
        mask, offsets = mask_4d(W, self.N, len(cands), levels, run.past, run.dtype, run.device)
        tokens = [t for level in self.window for t in level] + [t for c, _ in cands for t in c]
        top = 1 + (levels - 1) * W  # fed row of the top level's column 0
        cand0 = 1 + levels * W  # fed row of the first candidate's first token
        chains = [Chain(list(c), list(range(cand0 + i * m, cand0 + (i + 1) * m)), POOL_ORIGIN[o])
                  for i, (c, o) in enumerate(cands)]
        rows = [0] + list(range(top, top + W)) + list(range(cand0, cand0 + len(cands) * m))
        return Proposal(tokens, chains, offsets, mask, rows, info={"sources": [o for _, o in cands]})

    def update(self, run, proposal, verdict, argmax, committed):
        top_out = argmax[1:1 + self.W]  # logits rows: [current, the top level (W), candidates]
        window, ops, harvested = self.window, [], []
        if len(window) < self.N - 1:  # filling: the top level's argmax becomes a new level
            self.window = window + [list(top_out)]
        else:  # full: harvest one n-gram per column, then slide one level
            for j in range(self.W):
                gram = [level[j] for level in window] + [top_out[j]]
                harvested.append(gram)
                ops += self.pool.add(gram, "window")
            self.window = window[1:] + [list(top_out)]
        if self.p["harvest_output"]:
            seq, N = run.all_ids, self.N
            for end in range(len(seq) - len(committed), len(seq)):
                if end - N + 1 >= 0:
                    ops += self.pool.add(seq[end - N + 1:end + 1], "output")
        return LookaheadRecord(
            window=[list(l) for l in window], harvested=harvested,
            candidates=[list(c.tokens) for c in proposal.chains], matched=list(verdict.matched),
            origins=list(proposal.info["sources"]), chosen=verdict.chosen, pool_ops=ops)


SPEC = MethodSpec(
    name="lookahead", label="Lookahead", colour="#009E73", cls=Lookahead, samples=True, record="lookahead",
    summary="a 2D Jacobi window fills an n-gram pool whose entries are verified in the same forward",
    params=(
        Param("W", 5, "window width (columns)", 1, 64, label="W (window columns)", tuned=True),
        Param("N", 4, "n-gram size", 2, 16, label="N (n-gram size)", tuned=True),
        Param("G", 5, "max candidates per step (and per pool key)", 0, 64, label="G (max candidates)", tuned=True),
        Param("seed_pool_prompt", True, "seed the pool with the prompt's n-grams", cli="--no-seed-pool",
              label="Seed the pool with the prompt's n-grams"),
        Param("harvest_output", True, "add committed output n-grams to the pool",
              label="Harvest n-grams from the output too"),
        Param("seed", 0, "seed of the initial guesses", 0, 2**31 - 1),
    ),
    grid=({"W": 5, "N": 4, "G": 5}, {"W": 3, "N": 3, "G": 3}, {"W": 4, "N": 3, "G": 2},
          {"W": 3, "N": 4, "G": 3}, {"W": 7, "N": 4, "G": 7}, {"W": 5, "N": 5, "G": 5}),
)
