"""CLLM's Jacobi decoding in block mode (DESIGN.md, "Jacobi").

A block of n tokens: position 0 is the current token (always right), the other n-1 start as tokens
drawn from the prompt. Each iteration feeds the unconverged part of the block; the argmax at each
fed row is the new guess for the next position (the Jacobi update), and the guesses that did not
change are committed (they form one chain, verified like any other). The block ends when all n
positions are committed; its final tokens are its fixed point.

With ``budget="auto"`` (issue 20: the CLLM's convergence as wall-clock speed on a CPU) n is an
upper bound: each iteration feeds a window of the first unconverged guesses, w tokens with the
current one, and the Jacobi update refines the fed guesses and the first one not fed (its guess is
the last fed row's prediction), while the guesses past it keep their values. Over the steps the
window slides along the block, each guess refined on its way to the front. The width w (1, 2, 4,
8, ...) is kept for a stint of steps and chosen from the tokens per step measured at each width in
this run against the step costs of this hardware (decoding/budget.py, ``WidthBudget``): a base
model, whose guesses are rarely right, decodes as AR does; a consistency-trained one feeds wider.
With a window narrower than n, a larger n (32-64) loses less at the block ends (where fewer guesses
are left than the window holds).
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import ClassVar

from pydantic import model_validator

from ..budget import WidthBudget, is_auto
from ..records import Count, Gram, Positive, Record, fail
from ..verify import Chain, Proposal
from .base import Method
from .spec import BUDGET_PARAM, MethodSpec, Param

class Jacobi(Method):
    def __init__(self, run, params):
        super().__init__(run, params)
        self.rng = random.Random(params["seed"])
        self.blocks: list[JacobiBlock] = []
        self.index = -1
        self.budget = WidthBudget(run.costs, params["n"]) if is_auto(params) else None
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
        if self.budget is not None:  # the window: the first width - 1 guesses
            guesses = guesses[:self.budget.choose() - 1]
        prop = Proposal(guesses, [Chain(guesses, list(range(1, len(guesses) + 1)), "jacobi")])
        if self.budget is not None:
            prop.budget = self.budget.record(1 + len(guesses))
        return prop

    def update(self, run, proposal, verdict, argmax, committed):
        before, g, c = self.block, len(proposal.tokens), self.c
        if self.budget is not None:
            self.budget.learn(1 + g, len(verdict.keep))
        # the Jacobi update: fed row i predicts block position c + 1 + i. Fed in full, the last row's
        # prediction lies past the block; fed in part, it refines the first guess not fed.
        new = argmax[:min(g + 1, len(before) - 1 - c)]
        self.block = before[:c + 1] + new + before[c + 1 + len(new):]
        rec = JacobiRecord(self.index, self.iteration, c, before, self.block, len(verdict.keep),
                           None if self.budget is None else g)
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


# ---- its record (Step.record) and the trace's blocks ------------------------------------------------
@dataclass
class JacobiBlock:
    """A finished (or cut short) Jacobi block: where it starts in the output and its fixed point."""

    index: Count
    offset: Count  # index in output_ids of the block's position 0
    fixed_point: Gram
    iterations: Count


@dataclass
class JacobiRecord(Record):
    """One Jacobi iteration of one block.

    ``before`` / ``after`` are the block's n-token state (position 0 is the token the block started
    from, always right). Positions ``< start`` were committed by earlier iterations; this iteration
    fed positions ``start..`` and committed positions ``start .. start + committed - 1``.
    ``fed``: with ``budget="auto"``, the guesses fed (positions ``start + 1 .. start + fed``; the
    Jacobi update also refined position ``start + fed + 1``, the others kept their guess); None: all.
    """

    block: Count
    iteration: Count
    start: Count
    before: Gram
    after: Gram
    committed: Positive
    fed: Count | None = None

    trace_fields: ClassVar[dict] = {"blocks": list[JacobiBlock]}
    v1_origin: ClassVar[str] = "jacobi"

    @model_validator(mode="after")
    def _one_block(self):
        n = len(self.before)
        if len(self.after) != n:
            fail("after", f"must be the block's {n} tokens, as before")
        if self.start >= n:
            fail("start", f"must be a position of the block (below {n}), got {self.start}")
        if self.committed > n - self.start:
            fail("committed", f"must be at most the {n - self.start} positions from start on, got {self.committed}")
        if self.fed is not None and self.fed > n - 1 - self.start:
            fail("fed", f"must be at most the {n - 1 - self.start} guesses after start, got {self.fed}")
        if self.fed is not None and self.committed > self.fed + 1:
            fail("committed", f"must be at most the {self.fed} guesses fed and the model's own token, got {self.committed}")
        return self

    def token_ids(self):
        return self.before + self.after

    def v1_guesses(self):
        return "jacobi", self.committed - 1

    def check_in(self, trace, where):
        b = next((b for b in trace.blocks if b.index == self.block), None)
        if b is None:
            fail(f"{where}.block", f"{self.block} is not one of the trace's blocks")
        if len(b.fixed_point) > len(self.before):
            fail(f"{where}.before", f"must hold the {len(b.fixed_point)} tokens of block {self.block}'s fixed point")

    @classmethod
    def check_trace(cls, trace):
        seen, sizes, n_out = set(), {}, len(trace.output_ids)
        for i, b in enumerate(trace.blocks):
            if b.index in seen:
                fail(f"blocks[{i}].index", f"{b.index} is repeated")
            seen.add(b.index)
            if b.offset >= max(n_out, 1):
                fail(f"blocks[{i}].offset", f"must be an index into output_ids (below {n_out}), got {b.offset}")
        its: set = set()
        for i, s in enumerate(trace.steps):
            r = s.record
            if r is None:
                continue
            if sizes.setdefault(r.block, len(r.before)) != len(r.before):
                fail(f"steps[{i}].record.before", f"must be block {r.block}'s {sizes[r.block]} tokens, as in its other iterations")
            if (r.block, r.iteration) in its:
                fail(f"steps[{i}].record.iteration", f"block {r.block} has an iteration {r.iteration} already")
            its.add((r.block, r.iteration))


SPEC = MethodSpec(
    name="jacobi", label="Jacobi", colour="#E69F00", cls=Jacobi, record=JacobiRecord, legacy_record="jacobi",
    params=(
        Param("n", 16, "block size", 1, 256, label="n (tokens per block)", tuned=True),
        Param("seed", 0, "seed of the initial guesses", 0, 2**31 - 1),
        BUDGET_PARAM,
    ),
    grid=({"n": 4}, {"n": 8}, {"n": 16}),
)
