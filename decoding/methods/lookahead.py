"""Lookahead decoding (Fu et al., ICML 2024; DESIGN.md, "Lookahead").

Each step feeds, in one forward: the current token, a 2D window of N-1 levels x W columns of
guesses (lookahead branch) and up to G candidate (N-1)-grams from the n-gram pool for the current
token (verification branch), with the 4D mask of ``lookahead_mask``. The window's top level gets
its Jacobi update from the argmax; once the window is full, each column gives one n-gram to the
pool (``lookahead_pool``) and the window slides one level. The candidates are chains, verified by
the shared verifier: the longest match and the model's own token after it are committed.

Options beyond the paper: seed the pool with the prompt's n-grams (``seed_pool_prompt``) and keep
harvesting n-grams from the committed output (``harvest_output``). With ``budget="auto"`` each step
feeds the window only when its n-grams have paid for it, and the candidates as a draft tree, each
chained through the pool (its last token's newest entry, up to CHAIN_HOPS times) and cut to what
pays on this hardware (decoding/budget.py).
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Any, ClassVar, Literal

from pydantic import model_validator

from ..budget import Acceptance, Budget, DraftTree, Head, is_auto
from ..records import Count, Gram, Int, Record, fail
from ..verify import Chain, Proposal, StepContext
from .base import Method
from .lookahead_mask import lookahead_allowed, lookahead_layout, mask_4d
from .lookahead_pool import NGramPool
from .spec import BUDGET_PARAM, MethodSpec, Param

# lookahead pool entry source (LookaheadRecord.origins) -> the origin of the tokens it gives
POOL_ORIGIN = {"window": "pool", "prompt": "prompt_pool", "output": "output_pool"}
CHAIN_HOPS = 2  # budget="auto": a candidate may go on through the pool this many n-grams deeper
POOL_SOURCE = {origin: source for source, origin in POOL_ORIGIN.items()}  # a chain's origin -> its pool source


def fed_tokens(W: int, N: int, candidates: int, levels: int | None = None) -> int:
    """Tokens fed by one lookahead step: the current token, the window, the candidates."""
    levels = N - 1 if levels is None else levels
    return 1 + levels * W + candidates * (N - 1)


class Lookahead(Method):
    def __init__(self, ctx: StepContext, params):
        super().__init__(ctx, params)
        self.W, self.N, self.G = params["W"], params["N"], params["G"]
        rng = random.Random(params["seed"])
        self.window = [[rng.choice(ctx.prompt_ids) for _ in range(self.W)]]  # level 0 from the prompt
        self.pool = NGramPool(self.G)
        self.pool_seed: list[list[int]] = []
        if params["seed_pool_prompt"]:
            ids = ctx.prompt_ids
            for i in range(len(ids) - self.N + 1):
                self.pool.add(ids[i:i + self.N], "prompt")
            self.pool_seed = [[k, *c] for k, v in self.pool.as_dict().items() for c in v]

        # budget="auto": acceptance per pool source and depth; what the window has given so far
        acc = Acceptance({"window": 0.15, "prompt": 0.12, "output": 0.12})
        self.budget = Budget(ctx.costs, acc) if is_auto(params) else None
        self.window_feeds, self.window_tokens = 0, 0

    def trace_fields(self):
        return {"pool_seed": self.pool_seed}

    def propose(self, ctx: StepContext) -> Proposal:
        return self._propose_auto(ctx) if self.budget else self._propose_fixed(ctx)

    def _propose_fixed(self, ctx: StepContext) -> Proposal:
        W, m, levels = self.W, self.N - 1, len(self.window)
        cands = self.pool.candidates(ctx.cur)[:self.G]
        mask, offsets = mask_4d(W, self.N, len(cands), levels, ctx.past, ctx.dtype, ctx.device)
        tokens = [t for level in self.window for t in level] + [t for c, _ in cands for t in c]
        top = 1 + (levels - 1) * W  # fed row of the top level's column 0
        cand0 = 1 + levels * W  # fed row of the first candidate's first token
        chains = [Chain(list(c), list(range(cand0 + i * m, cand0 + (i + 1) * m)), POOL_ORIGIN[o])
                  for i, (c, o) in enumerate(cands)]
        rows = [0] + list(range(top, top + W)) + list(range(cand0, cand0 + len(cands) * m))
        return Proposal(tokens, chains, offsets, mask, rows)

    # ---- budget="auto": the window and the candidates only where they pay on this hardware ----
    def window_value(self) -> float:
        """Expected tokens a window feed yields later (accepted tokens of window n-grams per feed)."""
        return (self.window_tokens + 4 * 0.25) / (self.window_feeds + 4)

    def _chained(self, cont: tuple, hops: int) -> list[int]:
        """A candidate extended through the pool: after its last token, that token's newest pool
        entry, ``hops`` times at most (n-grams chained into a longer guess)."""
        out = list(cont)
        for _ in range(hops):
            nxt = self.pool.candidates(out[-1])
            if not nxt:
                break
            out += list(nxt[-1][0])
        return out

    def _window_head(self) -> Head:
        """The window as the budget's head block: fed before the candidates, weighed against not."""
        W, levels = self.W, len(self.window)
        layout = lookahead_layout(W, self.N, 0, levels)  # the current token + the window
        first = len(layout)
        return Head([t for level in self.window for t in level], lookahead_allowed(layout),
                    [r["offset"] for r in layout], [first - W + j for j in range(W)], self.window_value())

    def _propose_auto(self, ctx: StepContext) -> Proposal:
        tree = DraftTree()
        for c, o in self.pool.candidates(ctx.cur)[:self.G]:
            tree.add(self._chained(c, CHAIN_HOPS), o)
        return self.budget.propose(tree, ctx, POOL_ORIGIN.get, self._window_head())

    def _learn(self, proposal, verdict) -> None:
        accepted = self.budget.learn(proposal, verdict)
        self.window_tokens += sum(1 for i in accepted if proposal.tree.tree.nodes[i].source == "window")
        self.window_feeds += proposal.budget.window

    def update(self, ctx, proposal, verdict, argmax, committed):
        if self.budget:
            self._learn(proposal, verdict)
            if not proposal.budget.window:  # the window was not fed: it stays as it is
                return self._record(proposal, verdict, [], [], self._harvest_output(ctx, committed))
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
        return self._record(proposal, verdict, window, harvested, ops + self._harvest_output(ctx, committed))

    def _harvest_output(self, ctx: StepContext, committed: list[int]) -> list[list]:
        ops: list[list] = []
        if self.p["harvest_output"]:
            seq, N = ctx.all_ids, self.N
            for end in range(len(seq) - len(committed), len(seq)):
                if end - N + 1 >= 0:
                    ops += self.pool.add(seq[end - N + 1:end + 1], "output")
        return ops

    def _record(self, proposal, verdict, window, harvested, ops) -> LookaheadRecord:
        return LookaheadRecord(
            window=[list(l) for l in window], harvested=harvested,
            candidates=[list(c.tokens) for c in proposal.chains], matched=list(verdict.matched),
            origins=[POOL_SOURCE[c.origin] for c in proposal.chains], chosen=verdict.chosen, pool_ops=ops)


# ---- its record (Step.record) and the trace's pool seed ---------------------------------------------
@dataclass
class LookaheadRecord(Record):
    """One lookahead step.

    ``window`` is the 2D window as fed (levels x W; fewer than N-1 levels during the first N-2
    steps; none when a cost-aware step left it out). ``harvested`` are the n-grams (N tokens,
    first = key) collected from it. ``candidates`` are the verified (N-1)-grams that follow the
    current token, ``matched[i]`` how many of their tokens matched the model's argmax chain,
    ``origins[i]`` where the pool got them ("window", "prompt", "output"), ``chosen`` the index of
    the accepted one (-1 if none matched). ``pool_ops`` replays the pool's changes in order: ["+",
    gram] added, ["~", gram] refreshed (a duplicate moved to newest), ["-", gram] evicted; each
    gram is N tokens, key first.
    """

    window: list[Gram]
    harvested: list[Gram]
    candidates: list[Gram]
    matched: list[Count]
    origins: list[Literal[tuple(POOL_ORIGIN)]]  # type: ignore[valid-type]
    chosen: Int
    pool_ops: list[tuple[Literal["+", "-", "~"], Gram]]

    trace_fields: ClassVar[dict] = {"pool_seed": list[Gram]}
    v1_origin: ClassVar[str] = "pool"

    @model_validator(mode="after")
    def _one_step(self):
        if len({len(row) for row in self.window}) > 1:
            fail("window", "must be levels of equal width")
        if not len(self.matched) == len(self.candidates) == len(self.origins):
            fail("", "one matched/origin per candidate")
        for i, (c, m) in enumerate(zip(self.candidates, self.matched)):
            if m > len(c):
                fail(f"matched[{i}]", f"must be at most its candidate's {len(c)} tokens, got {m}")
        if not -1 <= self.chosen < len(self.candidates):
            fail("chosen", f"must be -1 (none matched) or a candidate's index (below {len(self.candidates)}), got {self.chosen}")
        self.pool_ops = [list(op) for op in self.pool_ops]  # the JSON form: lists
        return self

    def token_ids(self):
        ids = [t for rows in (self.window, self.harvested, self.candidates) for r in rows for t in r]
        return ids + [t for _, g in self.pool_ops for t in g]

    def chains(self):
        return len(self.candidates)

    def v1_guesses(self):
        c = self.chosen
        return POOL_ORIGIN.get(self.origins[c], "pool") if c >= 0 else "pool", self.matched[c] if c >= 0 else 0

    def check_in(self, trace, where):
        W, N = trace.params["W"], trace.params["N"]
        if self.window and (len(self.window) > N - 1 or len(self.window[0]) != W):
            fail(f"{where}.window", f"must be up to N - 1 = {N - 1} levels of W = {W} tokens")
        for k in ("harvested", "pool_ops"):
            for i, g in enumerate(getattr(self, k)):
                if len(g if k == "harvested" else g[1]) != N:
                    fail(f"{where}.{k}[{i}]", f"must be an n-gram of N = {N} tokens")

    @classmethod
    def check_trace(cls, trace):
        N = trace.params["N"]
        for i, g in enumerate(trace.pool_seed):
            if len(g) != N:
                fail(f"pool_seed[{i}]", f"must be an n-gram of N = {N} tokens, got {len(g)}")

    @classmethod
    def trace_token_ids(cls, trace) -> list[Any]:
        return [t for g in trace.pool_seed for t in g]


SPEC = MethodSpec(
    name="lookahead", label="Lookahead", colour="#009E73", cls=Lookahead, samples=True, record=LookaheadRecord,
    legacy_record="lookahead",
    params=(
        Param("W", 5, "window width (columns)", 1, 64, label="W (window columns)", tuned=True),
        Param("N", 4, "n-gram size", 2, 16, label="N (n-gram size)", tuned=True),
        Param("G", 5, "max candidates per step (and per pool key)", 0, 64, label="G (max candidates)", tuned=True),
        Param("seed_pool_prompt", True, "seed the pool with the prompt's n-grams", cli="--no-seed-pool",
              label="Seed the pool with the prompt's n-grams"),
        Param("harvest_output", True, "add committed output n-grams to the pool",
              label="Harvest n-grams from the output too"),
        Param("seed", 0, "seed of the initial guesses", 0, 2**31 - 1),
        BUDGET_PARAM,
    ),
    grid=({"W": 5, "N": 4, "G": 5}, {"W": 3, "N": 3, "G": 3}, {"W": 4, "N": 3, "G": 2},
          {"W": 3, "N": 4, "G": 3}, {"W": 7, "N": 4, "G": 7}, {"W": 5, "N": 5, "G": 5},
          {"W": 15, "N": 5, "G": 15}),  # the last: the paper's setting for 7B models on an A100
)
