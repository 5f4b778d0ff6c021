"""Suffix drafting (SuffixDecoding, Oliaro et al., NeurIPS 2025; SAM-Decoding, Hu et al., ACL 2025).

A suffix trie over prompt + output holds every substring of at most D tokens with how often it
occurred (``SuffixTrie``; D = max_match + max_spec). It is updated per committed token: the token
extends each of the up to D current suffix paths by one node and counts it there, O(D) work per
token, which is amortised O(1) for a fixed D (a suffix automaton would make it O(1) for any match
length, but it keeps no counts of what followed).

Each step:
1. the matches: every suffix of the text (at most max_match tokens) whose node has children, i.e.
   that occurred before and was followed by something;
2. each match's draft (SuffixDecoding's tree speculation): the continuations in its node's subtree,
   best first by score = the product of count(child) / count(children of the parent) along the
   path (how often that continuation followed; ties: the most recent continuation first), nodes
   under ``min_prob`` percent left out, at most ``alpha x match + offset`` tokens (SuffixDecoding's
   max_spec_factor and offset: a longer match earns a longer draft), capped at ``max_spec``; the
   step keeps the draft whose scores sum highest (its expected accepted length; ``best_draft``):
   usually the longest match's, a shorter one's where the long match's continuations disagree;
3. a short match (under ``min_match`` tokens, or none): Token Recycling's successor matrix drafts too
   (SAM-Decoding's fallback; decoding/methods/recycling.py's walk and write_rows, the matrix
   seeded with the prompt's bigrams), its tree grafted onto the short match's draft (with
   ``budget="auto"`` only its 15 nodes most likely accepted by the budget's estimates,
   ``recycling.best_walk``: the budget weighs those, not the walk's up to 84);
4. the tree is fed in one forward with a tree mask and verified by the shared verifiers (greedy
   exact, sampling distribution-preserving); with ``budget="auto"`` decoding/budget.py feeds the
   part that pays on this hardware, with acceptance learnt per frequency band and match length
   (``node_source``: "sfx90m3" for a node whose own ratio is >= 0.9 drafted from a match of 3-4
   tokens; bands sfx90, sfx50, sfx20, sfx0; match classes m1, m2, m3 (3-4), m5 (5-8), m9 (9+):
   the longer the match, the likelier its continuation repeats, as SuffixDecoding's draft size
   assumes) and for the fallback per matrix column ("top1", ...).

Optional (``cross_run``, off by default): a store of earlier runs' outputs in this process (a
session, a bench run), SuffixDecoding's global tree, matched too; the draft that promises more wins.

Worked example: D = 4, text [1, 2, 3, 1, 2, 4, 1, 2]. The text's suffixes (2), (1, 2), (4, 1, 2)
are nodes; (4, 1, 2) has no children (it occurred only now), (1, 2) has: 3 (count 1) and 4 (1).
So match = 2; the draft, alpha 2 and offset 0 (up to 4 tokens): [4] 0.5, [3] 0.5, [4, 1] 0.5,
[3, 1] 0.5 (value 2.0, the later continuation first; the match (2) drafts the same continuations,
up to 2 tokens: value 1.0); with alpha 1 (2 tokens): [4] and [3], two branches of one token each.
"""

from __future__ import annotations

import heapq
import threading
from dataclasses import dataclass
from typing import ClassVar, Literal

from pydantic import model_validator

from ..budget import Acceptance, Budget, DraftTree, accepted_path, feed, is_auto
from ..records import Count, Int, Probability, Record, Tokens, check_tree, fail
from ..verify import Proposal, StepContext
from .base import Method
from .recycling import best_walk, prompt_rows, walk, write_rows
from .spec import BUDGET_PARAM, MethodSpec, Param

BANDS = ((0.9, "sfx90"), (0.5, "sfx50"), (0.2, "sfx20"), (0.0, "sfx0"))  # a node's own ratio -> its band
MATCH_CLASSES = (9, 5, 3, 2, 1)  # a match of at least this many tokens -> its class (m9, m5, m3, m2, m1)
# The budget's priors, P(a first draft token is accepted): by match class for a node of ratio >= 0.9,
# scaled down for the lower bands. Round figures after the rule "a longer match repeats more often";
# each run learns its own (Acceptance).
CLASS_PRIOR = {9: 0.9, 5: 0.8, 3: 0.65, 2: 0.5, 1: 0.3}
BAND_FACTOR = {"sfx90": 1.0, "sfx50": 0.5, "sfx20": 0.3, "sfx0": 0.1}
FALLBACK_WEIGHED = 15  # with budget=auto, the fallback's nodes most likely accepted that the budget weighs
# (recycling.best_walk; the fixed budget feeds walk's whole tree): a step feeding more rarely pays on a CPU
STORE_MAX_NODES = 300_000  # the cross-run store stops growing here (memory: ~100 bytes a node)


def band(ratio: float) -> str:
    return next(name for lo, name in BANDS if ratio >= lo)


def node_source(ratio: float, match: int) -> str:
    """A suffix node's Acceptance source: its band and its step's match class.

    >>> node_source(1.0, 4), node_source(0.5, 1), node_source(0.3, 12)
    ('sfx90m3', 'sfx50m1', 'sfx20m9')
    """
    return f"{band(ratio)}m{next((c for c in MATCH_CLASSES if match >= c), 1)}"


def suffix_priors() -> dict[str, float]:
    return {f"{b}m{c}": round(p * f, 3) for b, f in BAND_FACTOR.items() for c, p in CLASS_PRIOR.items()}


def origin(source: str) -> str:
    """A chain's origin: "recycled" for the fallback's matrix successors, "suffix" for the rest."""
    return "recycled" if source.startswith("top") else "suffix"


class SuffixTrie:
    """Every substring of the text of at most ``depth`` tokens as a node: its count (occurrences),
    ``last`` (the text index of the token that ended its latest occurrence) and its children.

    >>> t = SuffixTrie(4); t.extend_all([1, 2, 3, 1, 2, 4, 1, 2])
    >>> m = t.longest_match(t.active, 3); t.level[m], t.continuations(m)
    (2, {3: 1, 4: 1})
    """

    def __init__(self, depth: int):
        self.depth = depth
        self.kids: list[dict[int, int] | None] = [None]  # node -> {token: child} (None: a leaf)
        self.count, self.last, self.level = [0], [-1], [0]
        self.active = [0]  # the nodes of the text's suffixes of length 0 .. depth-1 (the root first)
        self.n = 0  # tokens appended

    def extend(self, t: int) -> None:
        """Append token t: each current suffix path grows by t (a new node where it is new)."""
        nxt = [0]
        for a in self.active:
            kids = self.kids[a]
            if kids is None:
                kids = self.kids[a] = {}
            c = kids.get(t)
            if c is None:  # the node's lists first, then the link: a reader (follow) never sees half a node
                c = len(self.count)
                self.kids.append(None)
                self.count.append(0), self.last.append(-1), self.level.append(self.level[a] + 1)
                kids[t] = c
            self.count[c] += 1
            self.last[c] = self.n
            if self.level[c] < self.depth:
                nxt.append(c)
        self.active = nxt
        self.n += 1

    def extend_all(self, tokens: list[int]) -> None:
        for t in tokens:
            self.extend(t)

    def start_text(self) -> None:
        """The next token starts a new text (a store: no suffix spans two runs)."""
        self.active = [0]

    def follow(self, active: list[int], t: int) -> list[int]:
        """The suffix nodes of another text (``active``, as ``self.active``) after it appends t,
        without changing the trie: how the current run reads the cross-run store."""
        nxt = [0]
        for a in active:
            c = (self.kids[a] or {}).get(t)
            if c is not None and self.level[c] < self.depth:
                nxt.append(c)
        return nxt

    def longest_match(self, active: list[int], max_len: int) -> int:
        """The deepest of ``active`` (a text's suffix nodes) of at most max_len tokens that has
        children (occurred before and was followed); 0 (the root) if none."""
        for a in reversed(active):
            if a and self.kids[a] and self.level[a] <= max_len:
                return a
        return 0

    def continuations(self, node: int) -> dict[int, int]:
        """What followed the node's string: {token: count}."""
        return {t: self.count[c] for t, c in (self.kids[node] or {}).items()}

    def draft(self, node: int, n_max: int, min_prob: float) -> list[tuple[tuple[int, ...], float, float, int]]:
        """Up to n_max draft nodes below ``node``, best score first (parents before children):
        (path of tokens from the match, score, own ratio, trie node). Score = the product of
        count(child) / count(children of its parent) along the path; nodes under min_prob are left out."""
        out: list[tuple[tuple[int, ...], float, float, int]] = []
        heap = [(-1.0, -1, 0, node, (), 1.0)]
        while heap and len(out) < n_max:
            neg, _, _, v, path, ratio = heapq.heappop(heap)
            if v != node:
                out.append((path, -neg, ratio, v))
            kids = list((self.kids[v] or {}).items())  # a copy: the store may grow meanwhile (another run's finish)
            total = sum(self.count[c] for _, c in kids)
            for t, c in kids:
                r = self.count[c] / total
                if -neg * r >= min_prob:  # ties: the shallower, then the most recent continuation first
                    heapq.heappush(heap, (neg * r, len(path), -self.last[c], c, path + (t,), r))
        return out


def best_draft(trie: SuffixTrie, active: list[int], p: dict, room: int, floor: float = 0.0) -> tuple[float, int, list]:
    """(expected accepted tokens, match node, draft items) of the suffix match whose draft promises
    most: each of the text's suffix nodes (``active``) of at most max_match tokens that was followed
    before drafts up to ``alpha x match + offset`` tokens (SuffixDecoding's max_spec_factor and
    offset; at most max_spec and ``room``), valued by the sum of its nodes' scores (each the chance
    the continuation followed, so the sum is the expected accepted length if the text repeats as it
    did). Longest match first; a shorter one must promise more. (0.0, 0, []) if none beats ``floor``.

    A long match usually wins (its draft may be longer); a short match wins where the long one's
    continuations disagree and the short one's agree."""
    best: tuple[float, int, list] = (floor, 0, [])
    for a in reversed(active):
        m = trie.level[a]
        if not a or m > p["max_match"] or not trie.kids[a]:
            continue
        n_max = min(p["max_spec"], p["alpha"] * m + p["offset"], room)
        if n_max <= best[0]:  # a draft's value is at most its size, and shorter matches draft less
            break
        items = trie.draft(a, n_max, p["min_prob"] / 100)
        value = sum(score for _, score, _, _ in items)
        if value > best[0]:
            best = (value, a, items)
    return best if best[1] else (0.0, 0, [])


def graft(tree: DraftTree, other: DraftTree) -> None:
    """Add ``other``'s nodes to ``tree`` (score 0: not a suffix node); a shared prefix stays ``tree``'s."""
    at: list[int] = []  # other's node i -> its index in tree
    for n in other.nodes:  # parents come before children
        at.append(tree.child(at[n.parent] if n.parent >= 0 else -1, n.token, n.source, 0.0))


_STORES: dict[int, SuffixTrie] = {}  # the cross-run stores of this process, one per trie depth
_STORE_LOCK = threading.Lock()  # one writer at a time (app sessions run in threads); readers only follow links


def store(depth: int) -> SuffixTrie:
    """The cross-run store of earlier outputs for tries of this depth (made when first asked)."""
    with _STORE_LOCK:
        return _STORES.setdefault(depth, SuffixTrie(depth))


def clear_stores() -> None:
    """Forget every earlier run (a new session, a new bench)."""
    with _STORE_LOCK:
        _STORES.clear()


@dataclass(frozen=True)
class Match:
    """What a step's draft came from (its record's fields)."""

    length: int
    where: str  # prompt, output, earlier, fallback or ""
    source: int  # text index of the draft's first token's latest earlier occurrence (-1: none)
    drafted: int


class SuffixDrafting(Method):
    def __init__(self, ctx: StepContext, params):
        super().__init__(ctx, params)
        self.trie = SuffixTrie(params["max_match"] + params["max_spec"])
        self.trie.extend_all(ctx.all_ids)
        self.n_prompt = len(ctx.prompt_ids)
        self.store = store(self.trie.depth) if params["cross_run"] else None
        self.cursor = [0]  # the current text's suffix nodes in the store
        if self.store is not None:
            for t in ctx.all_ids:
                self.cursor = self.store.follow(self.cursor, t)
        k = params["successors"]
        self.matrix: dict[int, list[int]] = prompt_rows(ctx.prompt_ids, k) if params["fallback"] else {}
        priors = suffix_priors() | {f"top{c + 1}": 0.5 / (c + 1) for c in range(k)}
        self.budget = Budget(ctx.costs, Acceptance(priors, deep=0.6)) if is_auto(params) else None

    def propose(self, ctx: StepContext) -> Proposal:
        room = ctx.max_new_tokens - len(ctx.output) - 1  # draft tokens that can still be committed
        tree, match = self.draft(ctx.cur, room)
        prop = self.budget.propose(tree, ctx, origin) if self.budget else feed(tree, list(range(len(tree.nodes))), ctx, origin)
        prop.note = match
        return prop

    def draft(self, cur: int, room: int) -> tuple[DraftTree, Match]:
        """The step's draft tree: the best suffix match's (local or, if on, the store's); under
        min_match tokens the fallback's tree joins it (alone where there is no suffix draft)."""
        p, tree = self.p, DraftTree()
        if room <= 0:
            return tree, Match(0, "", -1, 0)
        value, node, items = best_draft(self.trie, self.trie.active, p, room)
        trie, where = self.trie, "local"
        if self.store is not None:
            other = best_draft(self.store, self.cursor, p, room, floor=value)
            if other[1]:
                (value, node, items), trie, where = other, self.store, "earlier"
        m = trie.level[node]
        short = m < p["min_match"]
        at: dict[tuple[int, ...], int] = {(): -1}  # a draft path -> its node in the tree
        for path, score, ratio, _ in items:  # parents first (``SuffixTrie.draft``)
            at[path] = tree.child(at[path[:-1]], path[-1], node_source(ratio, m), max(round(score, 4), 1e-4))
        source = trie.last[items[0][3]] if items and where == "local" else -1
        if where == "local":
            where = ("prompt" if source < self.n_prompt else "output") if items else ""
        if p["fallback"] and short:
            w, depth = p["fallback_width"], min(p["fallback_depth"], room)
            graft(tree, best_walk(self.matrix, cur, depth, w, self.budget.acc.p, FALLBACK_WEIGHED) if self.budget
                  else walk(self.matrix, cur, depth, w, w))
            if len(tree.nodes) > len(items):
                where = "fallback"
        return tree, Match(m, where, source, len(tree.nodes))

    def update(self, ctx, proposal, verdict, argmax, committed, topk=None):
        fed, match = proposal.tree, proposal.note
        path = accepted_path(self.budget, proposal, verdict)
        if self.p["fallback"] and topk is not None:
            write_rows(self.matrix, [fed.root] + list(proposal.tokens), path, topk)
        for t in committed:
            self.trie.extend(t)
            if self.store is not None:
                self.cursor = self.store.follow(self.cursor, t)
        nodes = [fed.tree.nodes[i] for i in fed.nodes]
        scores = [n.tag if isinstance(n.tag, float) else 0.0 for n in nodes]
        return SuffixRecord(match.length, match.where, match.source, match.drafted, list(proposal.tokens),
                            list(fed.parents), scores, path)

    def finish(self, ctx: StepContext) -> None:
        """With ``cross_run``: this run's output joins the store (until it holds STORE_MAX_NODES)."""
        if self.store is None:
            return
        with _STORE_LOCK:
            if len(self.store.count) < STORE_MAX_NODES:
                self.store.start_text()
                self.store.extend_all(ctx.output)
                self.store.start_text()


# ---- its record (Step.record) --------------------------------------------------------------------
SUFFIX_WHERE = ("prompt", "output", "earlier", "fallback", "")


@dataclass
class SuffixRecord(Record):
    """One suffix-drafting step.

    ``match``: the length of the suffix of prompt + output (before the step) the draft came from: of
    those that occurred earlier and were followed by a token, the one whose draft promised most
    (``best_draft``; 0: none). ``where``: what the draft came from: "prompt" or "output" (the latest
    earlier occurrence of its first token's context lies there), "earlier" (the cross-run store of
    earlier runs' outputs), "fallback" (the match was shorter than min_match: Token Recycling's
    matrix drafted too, its nodes scored 0), "" (no draft). ``source``: index in prompt + output of
    the draft's first token in that latest occurrence (-1: earlier, or no suffix draft).
    ``drafted``: nodes of the draft tree before a budget cut it. The tree as fed: ``tokens[i]`` with
    parent ``parents[i]`` (-1: the current token) and ``scores[i]``, its frequency score (the
    product of count(child) / count(children) along its path from the match, at least 0.0001; 0 for
    a node only the fallback drafted).
    ``path``: the accepted branch (indices into ``tokens``, root first; its length is how far the
    draft matched).
    """

    match: Count
    where: Literal[SUFFIX_WHERE]  # type: ignore[valid-type]
    source: Int
    drafted: Count
    tokens: Tokens
    parents: list[Int]
    scores: list[Probability]
    path: list[Count]

    v1_origin: ClassVar[str] = "suffix"

    @model_validator(mode="after")
    def _one_tree(self):
        if not len(self.tokens) == len(self.parents) == len(self.scores):
            fail("", "one parent and score per tree node")
        check_tree(self.parents, self.path, len(self.tokens))
        if self.drafted < len(self.tokens):
            fail("drafted", f"must count the tree's nodes before a cut (at least {len(self.tokens)}), got {self.drafted}")
        return self

    def token_ids(self):
        return self.tokens

    def chains(self):  # one per leaf of the draft tree
        return len(set(range(len(self.parents))) - set(self.parents))

    def v1_guesses(self):
        return "suffix", len(self.path)

    def check_in(self, trace, where):
        n_ids = len(trace.prompt_ids) + len(trace.output_ids)
        if not -1 <= self.source < n_ids:
            fail(f"{where}.source", f"must be -1 or an index into prompt + output (below {n_ids}), got {self.source}")


SPEC = MethodSpec(
    name="suffix", label="Suffix drafting", colour="#56B4E9", cls=SuffixDrafting, samples=True, record=SuffixRecord,
    params=(
        Param("max_match", 12, "longest suffix matched (tokens)", 1, 48, label="max match"),
        Param("max_spec", 32, "most draft tokens per step (the tree's nodes)", 1, 64, label="max draft tokens", tuned=True),
        Param("alpha", 2, "draft tokens per matched token (SuffixDecoding's max_spec_factor)", 1, 16,
              label="alpha (draft per match)", tuned=True),
        Param("min_prob", 10, "leave out continuations whose frequency score is under this (percent)", 0, 100,
              label="min score (%)"),
        Param("offset", 8, "draft tokens beyond alpha x match (SuffixDecoding's max_spec_offset)", 0, 64,
              label="offset (extra draft tokens)", tuned=True),
        Param("min_match", 3, "a shorter match also drafts from the fallback (both in one tree)", 1, 16,
              label="min match", tuned=True),
        Param("fallback", True, "draft from Token Recycling's matrix when the match is short", cli="--no-fallback",
              label="Fall back to Token Recycling's matrix"),
        Param("successors", 8, "top-k successors kept per token (the matrix's columns, the paper's k)", 1, 32,
              label="k (successors per token)"),
        Param("fallback_depth", 6, "levels of the fallback's draft tree", 1, 16, label="fallback depth"),
        Param("fallback_width", 14, "branching and max nodes per level of the fallback's tree", 1, 32,
              label="fallback width"),
        Param("cross_run", False, "match earlier runs' outputs in this process too (SuffixDecoding's global tree)",
              label="Match earlier runs' outputs too"),
        BUDGET_PARAM,
    ),
    grid=({"max_spec": 16, "alpha": 1, "offset": 4, "min_match": 2}, {"max_spec": 32, "alpha": 2, "offset": 8, "min_match": 3},
          {"max_spec": 8, "alpha": 1, "offset": 0, "min_match": 3}),
    topk_param="successors",
)
