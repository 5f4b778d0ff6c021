"""CLLM's Jacobi decoding in block mode (DESIGN.md, "Jacobi").

A block of n tokens: position 0 is the current token (always right), the other n-1 start as tokens
drawn from the prompt. Each iteration feeds the unconverged part of the block; the argmax at each
fed row is the new guess for the next position (the Jacobi update), and the guesses that did not
change are committed (they form one chain, verified like any other). The block ends when all n
positions are committed; its final tokens are its fixed point.
"""

from __future__ import annotations

import random

from ..trace import JacobiBlock, JacobiRecord
from ..verify import Chain, Proposal
from .base import Method
from .spec import MethodSpec, Param


class Jacobi(Method):
    def __init__(self, run, params):
        super().__init__(run, params)
        self.rng = random.Random(params["seed"])
        self.blocks: list[JacobiBlock] = []
        self.index = -1
        self._new_block(run)

    def trace_fields(self):
        return {"blocks": self.blocks}

    def _new_block(self, run) -> None:
        self.index += 1
        self.iteration = 0
        self.offset = len(run.output) - 1  # the current token is the block's position 0
        guesses = min(self.p["n"] - 1, run.max_new_tokens - len(run.output))
        self.block = [run.cur] + [self.rng.choice(run.prompt_ids) for _ in range(guesses)]
        self.c = 0  # block positions < c are committed (their KV is cached); c is the current token

    def propose(self, run) -> Proposal:
        guesses = self.block[self.c + 1:]
        return Proposal(guesses, [Chain(guesses, list(range(1, len(guesses) + 1)), "jacobi")])

    def update(self, run, proposal, verdict, argmax, committed):
        before = self.block
        self.block = before[:self.c + 1] + argmax[:len(proposal.tokens)]  # the Jacobi update
        rec = JacobiRecord(self.index, self.iteration, self.c, before, self.block, len(verdict.keep))
        self.c += len(verdict.keep)
        self.iteration += 1
        if self.c >= len(self.block) or run.done:
            self._close_block(run)
            if not run.done:
                self._new_block(run)
        return rec

    def _close_block(self, run) -> None:
        fixed = run.output[self.offset:self.offset + len(self.block)]
        self.blocks.append(JacobiBlock(self.index, self.offset, fixed, self.iteration))

    def finish(self, run) -> None:
        if self.iteration and (not self.blocks or self.blocks[-1].index != self.index):
            self._close_block(run)


SPEC = MethodSpec(
    name="jacobi", label="Jacobi", colour="#E69F00", cls=Jacobi, record="jacobi",
    summary="iterates a block of n guesses to its fixed point",
    params=(
        Param("n", 16, "block size", 1, 256, label="n (tokens per block)", tuned=True),
        Param("seed", 0, "seed of the initial guesses", 0, 2**31 - 1),
    ),
    grid=({"n": 4}, {"n": 8}, {"n": 16}),
)
