"""Cost-aware step budgets: before each forward, choose what to feed so that the expected tokens
committed per unit of step cost is highest (``budget="auto"`` of prompt lookup, lookahead and Token
Recycling).

Four parts, plain Python (no torch but the mask):

- ``StepCosts``: what a step that feeds k tokens costs, relative to a one-token (AR) step, on this
  hardware. The prior is a measured step-cost curve (decoding.perf.costs.step_costs_for finds one) or
  a generic one for the device; it is calibrated online from the step times the run observes: once
  one-token steps and k-token steps have been timed, their measured ratio replaces the curve's, and
  sizes not yet seen are scaled by the excess the run has shown over the curve (a curve measured in
  isolation underestimates what a step costs inside a run).
- ``Acceptance``: the probability that a guessed token is accepted given that its parent was,
  per guess source (a pool entry's origin, a prompt-lookup match length) and depth, estimated from
  what verification has shown so far in the run, with priors for the first steps.
- ``choose``: the guesses form a tree (decoding/draft.py; shared prefixes fed once); a node's chance
  to be accepted is its parent's times its own conditional acceptance (siblings exclude each other:
  the model's argmax is one token). Nodes are added most likely first; the prefix with the highest
  (1 + expected accepted) / cost(fed) wins. Feeding nothing but the current token is an option
  (a plain AR step).
- ``Budget``: the above for one run of one method, written once: ``propose`` takes the method's
  draft tree (and any head block it may feed, lookahead's window) and returns the Proposal: what to
  feed, its mask and offsets, the fed tree and the step's BudgetRecord; ``learn`` updates the
  acceptance from the verdict. A method keeps only how it builds its tree (``feed`` feeds a whole
  tree the same way, for fixed budgets).

The budget only changes what is guessed, never what is accepted: greedy output stays AR's, and
sampled output keeps AR's distribution (decoding/verify.py decides).
"""

from __future__ import annotations

import statistics
from collections import deque
from dataclasses import dataclass, field
from typing import Callable

from .draft import DraftTree, FedTree, paths, to_mask, tree_attention
from .records import BudgetRecord
from .verify import Chain, Proposal, StepContext, Verdict

BUDGETS = ("fixed", "auto")


def is_auto(params: dict) -> bool:
    """Whether a method's resolved params ask for the cost-aware budget (the one place that reads it)."""
    return params.get("budget") == "auto"

BUDGET_HELP = ("fixed: every step feeds the full settings (the papers' fixed budget); auto: each step feeds only "
               "the guesses that pay on this hardware (measured step costs, acceptance learnt in the run), "
               "the settings as upper bounds")

# Generic relative step costs when no measured curve exists for this model/device: on a CPU a
# forward's cost grows with the tokens fed (measured SmolLM2-135M, 2 threads: c(8) ~ 1.6,
# c(32) ~ 1.9, c(64) ~ 2.5); on an accelerator extra tokens are nearly free until compute bound.
GENERIC = {
    "cpu": ([1, 2, 4, 8, 16, 32, 64, 128], [1.0, 1.1, 1.3, 1.6, 1.8, 2.1, 2.8, 4.8]),
    "accelerator": ([1, 64, 256, 1024], [1.0, 1.05, 1.3, 3.0]),
}


def interpolate(ks: list[int], rel: list[float]) -> Callable[[float], float]:
    """Piecewise-linear c(k) through (ks, rel), extrapolated linearly past the last point, made
    non-decreasing (feeding more never costs less; a dip in a measured curve is noise)."""
    rel = [max(rel[:i + 1]) for i in range(len(rel))]

    def c(k: float) -> float:
        if k <= ks[0]:
            return rel[0]
        for i in range(1, len(ks)):
            if k <= ks[i]:
                return rel[i - 1] + (rel[i] - rel[i - 1]) * (k - ks[i - 1]) / (ks[i] - ks[i - 1])
        return rel[-1] + (rel[-1] - rel[-2]) * (k - ks[-1]) / (ks[-1] - ks[-2])
    return c


def padded(prior: Callable[[float], float], sizes: tuple[int, ...]) -> Callable[[float], float]:
    """The prior of a step whose fed rows are padded up to one of ``sizes`` (a compiled step,
    decoding/compiled.py): k rows cost what the padded size costs, so the guesses that fill the
    padding are free, and the budget sees it. Past the largest size, ``prior`` itself (an eager step).

    >>> c = padded(interpolate([1, 8, 16], [1.0, 1.3, 1.6]), (1, 2, 4, 8, 16))
    >>> round(c(5), 3), round(c(8), 3), round(c(9), 3), round(c(20), 3)
    (1.3, 1.3, 1.6, 1.75)
    """
    def c(k: float) -> float:
        return prior(next((s for s in sizes if s >= k), k))
    return c


def generic_prior(device_type: str) -> Callable[[float], float]:
    return interpolate(*GENERIC["cpu" if device_type == "cpu" else "accelerator"])


def bucket(k: int) -> int:
    """Fed sizes that cost about the same share one bucket: 1, 2, 3, 4, then up to each power of 2."""
    return k if k <= 4 else 1 << (k - 1).bit_length()


class StepCosts:
    """Relative step cost c(k) = time(step feeding k) / time(step feeding 1), calibrated online."""

    def __init__(self, prior: Callable[[float], float], source: str = "", keep: int = 24, min_obs: int = 2,
                 calibrate_first: bool = True):
        self.prior, self.source = prior, source
        self.keep, self.min_obs, self.calibrate_first = keep, min_obs, calibrate_first
        self._obs: dict[int, deque] = {}
        self._memo: dict = {}  # medians and excess since the last observation (choose asks for every prefix)

    def observe(self, fed: int, seconds: float) -> None:
        if seconds > 0:
            self._obs.setdefault(bucket(fed), deque(maxlen=self.keep)).append((fed, seconds))
            self._memo.clear()

    def _median(self, b: int) -> tuple[float, float] | None:
        """(median fed, median seconds) of bucket b, if it has enough observations."""
        if b not in self._memo:
            self._memo[b] = self._bucket_median(b)
        return self._memo[b]

    def _bucket_median(self, b: int) -> tuple[float, float] | None:
        obs = self._obs.get(b)
        if not obs or len(obs) < self.min_obs:
            return None
        return statistics.median(f for f, _ in obs), statistics.median(s for _, s in obs)

    def t1(self) -> float | None:
        """Median seconds of a one-token step in this run (None until measured)."""
        m = self._median(1)
        return m[1] if m else None

    def excess(self) -> float:
        """How much dearer than the prior curve the run's multi-token steps were (1.0: as the curve)."""
        if "excess" not in self._memo:
            self._memo["excess"] = self._excess()
        return self._memo["excess"]

    def _excess(self) -> float:
        t1 = self.t1()
        if t1 is None:
            return 1.0
        ratios = []
        for b in self._obs:
            m = self._median(b) if b > 1 else None
            if m:
                ratios.append(m[1] / t1 / self.prior(m[0]))
        return min(max(statistics.median(ratios), 0.5), 3.0) if ratios else 1.0

    def cost(self, k: int) -> float:
        """c(k) relative to a one-token step (k <= 1: 1.0); memoised until the next observation
        (``choose`` asks for every prefix of every step's tree)."""
        if k <= 1:
            return 1.0
        c = self._memo.get(("cost", k))
        if c is None:
            c = self._memo[("cost", k)] = self._cost(k)
        return c

    def _cost(self, k: int) -> float:
        t1 = self.t1()
        m = self._median(bucket(k)) if t1 is not None else None
        if m:  # measured in this run: the bucket's median, scaled within the bucket by the curve's shape
            return max(m[1] / t1 * self.prior(k) / self.prior(m[0]), 1.0)
        return max(self.prior(k) * self.excess(), 1.0)

    def needs_ar_sample(self) -> bool:
        """True until one-token steps have been timed (the calibration's unit), unless the prior is
        to be trusted as it is (``calibrate_first=False``)."""
        return self.calibrate_first and self.t1() is None


@dataclass
class Acceptance:
    """P(a guessed token is accepted | its parent was), per (source, depth), with priors.

    Depth 1 starts from ``priors``, depth 2 from ``deep``, and deeper depths from the estimate of
    the depth above (a copied span that has matched so far tends to go on matching); observations
    take over within a few steps."""

    priors: dict[str, float]  # depth 1
    deep: float = 0.5  # depth 2 (a guess whose first token matched often goes on matching)
    strength: float = 2.0  # the prior counts as this many observations
    default: float = 0.1
    counts: dict[tuple[str, int], list[int]] = field(default_factory=dict)
    idle: int = 0  # steps in a row that fed no guess
    _memo: dict[tuple[str, int], float] = field(default_factory=dict, repr=False, compare=False)  # p until the next observe

    def p(self, source: str, depth: int) -> float:
        q = self._memo.get((source, depth))
        if q is None:
            q = self._memo[(source, depth)] = self._p(source, depth)
        return q

    def _p(self, source: str, depth: int) -> float:
        if depth <= 1:
            prior = self.priors.get(source, self.default)
        else:
            prior = self.deep if depth == 2 else self.p(source, depth - 1)
        a, n = self.counts.get((source, depth), (0, 0))
        return (a + self.strength * prior) / (n + self.strength)

    def observe(self, source: str, depth: int, accepted: bool) -> None:
        self._memo.clear()
        c = self.counts.setdefault((source, depth), [0, 0])
        c[0] += int(accepted)
        c[1] += 1

    def wants_data(self) -> bool:
        """Whether the next step should feed at least its most likely guess even where the estimates
        say it does not pay: while fewer than EXPLORE_MIN first guesses have been verified, and after
        EXPLORE_EVERY steps in a row without a guess (estimates only move when guesses are fed)."""
        seen = sum(n for (_, d), (_, n) in self.counts.items() if d == 1)
        return seen < EXPLORE_MIN or self.idle >= EXPLORE_EVERY

    def chose(self, nodes: int) -> None:
        """Count the steps in a row that fed no guess."""
        self.idle = 0 if nodes else self.idle + 1

    def snapshot(self, depth: int = 1) -> dict[str, float]:
        sources = sorted({s for s, _ in self.counts} | set(self.priors))
        return {s: round(self.p(s, depth), 3) for s in sources}


TOLERANCE = 0.002  # relative gains in tokens per cost smaller than this are ignored
EXPLORE_MIN = 6  # first guesses to verify before the estimates alone decide
EXPLORE_EVERY = 8  # after this many steps without a guess, feed the most likely one to look again


@dataclass
class Choice:
    nodes: list[int]  # selected node indices, parents before children
    fed: int  # tokens fed by the step (the current token and any fixed part included)
    expected: float  # expected tokens committed (1 + expected accepted guesses + any extra value)
    cost: float  # c(fed)
    options: list[list[float]]  # [fed, expected, cost] of the prefixes weighed (a sample of them)

    @property
    def rate(self) -> float:
        return self.expected / self.cost


def plain_step() -> Choice:
    """Feed nothing but the current token: what a budget does until one-token steps are timed
    (StepCosts.needs_ar_sample), the unit of every cost."""
    return Choice([], 1, 1.0, 1.0, [[1, 1.0, 1.0]])


def choose(tree: DraftTree, acc: Acceptance, costs: StepCosts, base_fed: int = 1, bonus: float = 0.0,
           max_nodes: int | None = None, explore: bool = False) -> Choice:
    """The prefix of the nodes (most likely first) that maximises expected tokens per cost.
    ``base_fed``: tokens fed whatever the choice (the current token, a window); ``bonus``: expected
    value of that fixed part (e.g. the window's future n-grams); ``explore``: where nothing pays,
    feed the most likely node alone, so that the estimates can learn (Acceptance.wants_data)."""
    reach = tree.reach(acc)
    order = sorted(range(len(tree.nodes)), key=lambda i: (-reach[i], tree.nodes[i].depth, i))
    if max_nodes is not None:
        order = order[:max_nodes]
    cum = 0.0
    options = [[base_fed, 1 + bonus, costs.cost(base_fed)]]
    exp_at, rates = [1 + bonus], [(1 + bonus) / costs.cost(base_fed)]
    for n, i in enumerate(order, 1):
        cum += reach[i]
        e, c = 1 + bonus + cum, costs.cost(base_fed + n)
        exp_at.append(e)
        rates.append(e / c)
        if n & (n - 1) == 0 or n == len(order):  # record powers of two and the full tree
            options.append([base_fed + n, round(e, 3), round(c, 3)])
    # the smallest prefix within TOLERANCE of the best rate: a gain inside the cost model's noise
    # is not worth feeding for
    best_n = next(n for n, r in enumerate(rates) if r >= max(rates) / (1 + TOLERANCE))
    if explore and best_n == 0 and order:  # look, at the least cost: the most likely guess alone
        best_n = 1
    chosen = sorted(order[:best_n])  # node indices grow with depth along a path: parents first
    return Choice(chosen, base_fed + best_n, exp_at[best_n], costs.cost(base_fed + best_n), options)


def observe_tree(tree: DraftTree, chosen: list[int], accepted: list[int], acc: Acceptance) -> None:
    """Update acceptance from one verified step: ``accepted`` = the nodes on the accepted path."""
    on_path = set(accepted)
    for i in chosen:
        n = tree.nodes[i]
        if n.parent < 0 or n.parent in on_path:  # its parent was accepted: it had its chance
            acc.observe(n.source, n.depth, i in on_path)


# ---- feeding a draft tree, and the budget of one run written once --------------------------------
@dataclass(frozen=True)
class Head:
    """A block a method may feed between the current token and the draft tree (lookahead's window),
    weighed by the budget against not feeding it."""

    tokens: list[int]  # fed after the current token when the head is fed
    allowed: list[list[bool]]  # who sees whom among [current token] + tokens
    offsets: list[int]  # their positions relative to the current token
    rows: list[int]  # the head's fed rows whose logits the method reads (after row 0)
    value: float  # expected tokens a feed of it yields later (choose's ``bonus``)


def feed(tree: DraftTree, nodes: list[int], ctx: StepContext, origin: Callable[[str], str],
         head: Head | None = None, head_fed: bool = False) -> Proposal:
    """The Proposal that feeds ``nodes`` of ``tree`` (parents first) after the current token and, if
    ``head_fed``, the head. ``origin``: a node source -> the origin of its chain's tokens.

    The mask: a tree with branches, or a method with a head (fed or not), gets a 4D mask; a single path
    without a head is a plain causal sequence (no mask). A method with a head names the logit rows it
    reads ([0], the head's rows if fed, the tree's); one without reads all rows. (So lookahead, the
    method with a head, keeps the mask and rows it always passed: the same attention either way, but
    another SDPA path and logits_to_keep, so the same bits only by keeping them.)"""
    h_tokens = list(head.tokens) if head_fed else []
    h_allowed, h_offsets = (head.allowed, head.offsets) if head_fed else ([[True]], [0])
    first = 1 + len(h_tokens)  # fed row of the first tree node
    fed = [tree.nodes[i] for i in nodes]
    pos = {node: k for k, node in enumerate(nodes)}
    parents = [pos[n.parent] if n.parent >= 0 else -1 for n in fed]
    leaves = paths(tree, nodes)
    chains = [Chain([tree.nodes[i].token for i in p], [first + pos[i] for i in p], origin(tree.nodes[p[-1]].source))
              for p in leaves]
    tokens = h_tokens + [n.token for n in fed]
    mask = offsets = None
    if tokens and (head is not None or any(p != i - 1 for i, p in enumerate(parents))):
        allowed, offs = tree_attention(h_allowed, h_offsets, parents, [n.depth for n in fed])
        mask, offsets = to_mask(allowed, offs, ctx.past, ctx.dtype, ctx.device)
    rows = None
    if head is not None:
        rows = [0] + (list(head.rows) if head_fed else []) + list(range(first, first + len(nodes)))
    return Proposal(tokens, chains, offsets, mask, rows, FedTree(tree, list(nodes), parents, leaves, ctx.cur))


class Budget:
    """``budget="auto"`` for one run of a method that guesses a draft tree: the cost model (the run's
    StepCosts, calibrated by the loop's step times), the acceptance estimates, and per step
    ``propose`` (what of the tree, and of a head, to feed) and ``learn`` (what verification showed).

    ``idle_on_calibration``: whether the plain steps that time the unit of cost (before one-token
    steps are measured) count as steps without a guess (Acceptance.idle, which triggers exploring).
    Prompt lookup and lookahead count them; Token Recycling's copy of the budget did not, and aligning
    it would change its choices, so it keeps False (issue 19: behaviour unchanged)."""

    def __init__(self, costs: StepCosts, acc: Acceptance, idle_on_calibration: bool = True):
        self.costs, self.acc, self.idle_on_calibration = costs, acc, idle_on_calibration

    def propose(self, tree: DraftTree, ctx: StepContext, origin: Callable[[str], str],
                head: Head | None = None) -> Proposal:
        """The Proposal of this step: the part of ``tree`` (and ``head``) that pays, with its record."""
        choice, head_fed = self.choose(tree, head)
        prop = feed(tree, choice.nodes, ctx, origin, head, head_fed)
        prop.budget = BudgetRecord(choice.fed, round(choice.expected, 3), round(choice.cost, 3), 0, head_fed,
                                   choice.options, self.acc.snapshot(), round(self.costs.excess(), 3))
        return prop

    def choose(self, tree: DraftTree, head: Head | None = None) -> tuple[Choice, bool]:
        """(the choice, whether the head is fed): a plain step until one-token steps are timed (the
        unit of every cost), then the best prefix of the tree, with and without the head."""
        if self.costs.needs_ar_sample():
            if self.idle_on_calibration:
                self.acc.chose(0)
            return plain_step(), False
        explore = self.acc.wants_data()
        choice, head_fed = choose(tree, self.acc, self.costs, 1, explore=explore), False
        if head is not None:
            on = choose(tree, self.acc, self.costs, 1 + len(head.tokens), bonus=head.value, explore=explore)
            if on.rate > choice.rate:
                choice, head_fed = on, True
        self.acc.chose(len(choice.nodes))
        return choice, head_fed

    def learn(self, proposal: Proposal, verdict: Verdict) -> list[int]:
        """Update the acceptance from one verified step; returns the nodes on the accepted path.

        The accepted path is the chosen chain's first len(tokens) - 1 nodes: the verifiers commit the
        matched guesses and then one token of the model's own (verify.py), so that count equals
        ``verdict.matched[verdict.chosen]``, which prompt lookup's copy read instead (the same nodes)."""
        fed = proposal.tree
        accepted = fed.accepted(verdict.chosen, len(verdict.tokens) - 1)
        observe_tree(fed.tree, fed.nodes, accepted, self.acc)
        return accepted


def accepted_path(budget: Budget | None, proposal: Proposal, verdict: Verdict) -> list[int]:
    """The accepted branch of a fed draft tree as indices into the fed tokens, root first; with a
    budget, its acceptance estimates learn from the step first."""
    fed = proposal.tree
    nodes = budget.learn(proposal, verdict) if budget else fed.accepted(verdict.chosen, len(verdict.tokens) - 1)
    pos = {node: i for i, node in enumerate(fed.nodes)}
    return [pos[n] for n in nodes]


# ---- a fed width kept for a stint (Jacobi: guesses improve by being fed) --------------------------
WIDTHS = (1, 2, 4, 8, 16, 32)  # tokens fed (the current one and width - 1 guesses); a compiled step's sizes
STINT = 8  # steps a chosen width is kept before choosing again
RECENT = 24  # steps kept per width: its estimate follows the text's recent part
MIN_DIRECT = 4  # steps measured at a width before they alone make its estimate
FIRST_GUESS = 0.15  # prior P(one guess is accepted) before anything is measured
LOOK_AGAIN = 4  # after this many stints at one width, the wider widths are estimated afresh


class WidthBudget:
    """``budget="auto"`` for a method whose guesses get better by being fed: Jacobi's update refines
    every fed guess and the first one not fed, so what feeding w tokens commits depends on the width
    kept over the last steps, not on one step's guesses (a per-step choice of the most likely guesses
    starves them: unfed guesses stay fresh, fresh guesses are rarely right, so they are never fed).

    The width (1, 2, 4, 8, ... up to ``max_width``) is chosen per stint of STINT steps: the one whose
    tokens committed per step, over its cost c(w) (the run's StepCosts), is highest. A width's
    tokens per step: measured at that width in this run (its last RECENT steps); else read from a
    wider width's steps (each cut at w tokens: optimistic, since a narrower window refines less);
    else the bound from the widest narrower width measured (its steps that filled the window accepting
    every further guess: optimistic, so a wider width is tried once where it might pay, one width
    wider than the stint's at a time, and its own steps then decide; a wider window also refines
    each guess more often before it reaches the front, so an extrapolation of the narrower window's
    acceptance would undervalue it); else FIRST_GUESS. Width 1 is AR (1.0). After LOOK_AGAIN stints at one width the wider widths'
    measurements are dropped, so a text that became easier is looked at again."""

    def __init__(self, costs: StepCosts, max_width: int):
        self.costs = costs
        self.widths = [w for w in WIDTHS if w <= max(1, max_width)]
        self.seen: dict[int, deque] = {w: deque(maxlen=RECENT) for w in self.widths}
        self.width, self.left = self.widths[min(1, len(self.widths) - 1)], STINT
        self.same = 0  # stints in a row at this width

    def estimate(self, w: int) -> float:
        """Expected tokens committed by a step feeding ``w`` tokens."""
        if w == 1:
            return 1.0
        if len(self.seen[w]) >= MIN_DIRECT:
            return statistics.fmean(self.seen[w])
        wider = [v for v in self.widths if v > w and len(self.seen[v]) >= MIN_DIRECT]
        if wider:
            return statistics.fmean(min(c, w) for c in self.seen[wider[0]])
        narrower = [v for v in self.widths if 1 < v < w and self.seen[v]]
        if not narrower:
            return 1.0 + sum(FIRST_GUESS ** d for d in range(1, w))
        v = narrower[-1]
        seen = self.seen[v]
        full = sum(c == v for c in seen) / len(seen)  # steps that accepted every guess fed
        return statistics.fmean(seen) + full * (w - v)

    def options(self) -> list[list[float]]:
        return [[w, round(self.estimate(w), 3), round(self.costs.cost(w), 3)] for w in self.widths]

    def choose(self) -> int:
        """The width of this step: a plain step until one-token steps are timed (the unit of every
        cost); then the stint's width, chosen again when the stint ends."""
        if self.costs.needs_ar_sample():
            return 1
        if self.left <= 0:
            rate = {w: self.estimate(w) / self.costs.cost(w) for w in self.widths  # one step wider at a time
                    if w <= 2 * self.width or len(self.seen[w]) >= MIN_DIRECT}
            best = max(rate.values())
            if rate[self.width] < best * (1 - TOLERANCE):
                self.width, self.same = min(w for w in rate if rate[w] == best), 0
            self.same += 1
            if self.same >= LOOK_AGAIN:  # forget the wider widths: the text may have become easier
                for w in self.widths:
                    if w > self.width:
                        self.seen[w].clear()
                self.same = 0
            self.left = STINT
        self.left -= 1
        return self.width

    def record(self, fed: int) -> BudgetRecord:
        """The step's record (``fed``: the width, or fewer where the block has fewer guesses left):
        the widths weighed; ``acceptance``: the share of the width's recent steps that accepted at
        least one guess."""
        seen = self.seen.get(self.width) or ()
        accepted = {"jacobi": round(sum(c > 1 for c in seen) / len(seen), 3)} if seen else {}
        options = self.options()  # each width's estimate once a step
        est = {int(w): e for w, e, _ in options}
        expected = est[fed] if fed in est else min(est[self.width], fed)
        return BudgetRecord(fed, expected, round(self.costs.cost(fed), 3), 0, False, options, accepted,
                            round(self.costs.excess(), 3))

    def learn(self, fed: int, committed: int) -> None:
        """A step that fed ``fed`` tokens (the width, or fewer where the block had fewer guesses left)
        committed ``committed``."""
        if fed > 1 and fed == self.width:
            self.seen[fed].append(committed)
