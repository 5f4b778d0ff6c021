"""Token Recycling (Luo et al., "Turning Trash into Treasure: Accelerating Inference of Large
Language Models with Token Recycling", ACL 2025).

An adjacency matrix keeps, for every token, the top-k tokens the model predicted after it the last
time that token was fed (k columns, best first; a row per token id, filled as tokens are seen).
Each step builds a draft tree from the current token by a breadth-first walk over the matrix with
a static shape, feeds the whole tree in one forward with a tree attention mask (decoding/methods/
tree.py), and the shared verifier accepts the longest branch that matches (greedy) or is accepted
by speculative sampling. Then every fed token's row is overwritten with the top-k of its own
logits in that forward: the predictions of rejected branches ("trash") become next steps' drafts.

The static tree: level d holds at most ``width`` nodes; the nodes of level d-1, best first (by
their parent's rank, then their column), take ``max(0, branch - rank)`` children each from their
rows, up to ``depth`` levels. depth 6, branch 8, width 14 gives at most 8 + 5 x 14 = 78 nodes,
about the paper's 80-node tree (skewed to the best branches like it).

Initialisation: the paper keeps the matrix across queries ("hot start"); a run here starts from
an empty matrix (a token with no row has no successors: no draft until rows fill), optionally
seeded with the prompt's bigrams (``seed_prompt``: each prompt token's row holds the tokens that
followed it in the prompt, latest first). The prefill's forward keeps only its last logits row, so
the prompt's top-k predictions are not used.

With ``budget="auto"`` the same walk gives the tree (as an upper bound) and each step feeds the
part of it that pays on this hardware (decoding/budget.py), acceptance learnt per matrix column.
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass
from typing import Callable, ClassVar

from pydantic import model_validator

from ..budget import Acceptance, Budget, DraftTree, accepted_path, feed, is_auto
from ..records import Count, Gram, Int, Record, Tokens, check_tree, fail
from ..verify import Proposal, StepContext
from .base import Method
from .spec import BUDGET_PARAM, MethodSpec, Param


def recycled(source: str) -> str:
    """Every guessed token of a recycled tree has the origin "recycled" (whichever column it came from)."""
    return "recycled"


def static_shape(depth: int, branch: int, width: int, k: int) -> list[list[int]]:
    """Children per node of each level for full rows: ``shape[d][rank]`` (the paper's static tree)."""
    shape, n = [], 1
    for _ in range(depth):
        kids, total = [], 0
        for rank in range(n):
            c = max(0, min(branch - rank, k, width - total))
            kids.append(c)
            total += c
        shape.append(kids)
        n = total
        if not n:
            break
    return shape


def walk(matrix: dict[int, list[int]], cur: int, depth: int, branch: int, width: int) -> DraftTree:
    """The draft tree: a breadth-first walk from ``cur`` over the matrix rows. Node tags are
    (column in the parent's row); sources name the column ("top1", "top2", ...)."""
    tree = DraftTree()
    frontier: list[tuple[int, list[int]]] = [(cur, [])]  # (token, path of tokens from the root)
    for _ in range(depth):
        nxt: list[tuple[int, list[int]]] = []
        for rank, (tok, path) in enumerate(frontier):
            row = matrix.get(tok, [])
            for col in range(max(0, min(branch - rank, len(row), width - len(nxt)))):
                tree.add(path + [row[col]], f"top{col + 1}", col)
                nxt.append((row[col], path + [row[col]]))
        if not nxt:
            break
        frontier = nxt
    return tree


def best_walk(matrix: dict[int, list[int]], cur: int, depth: int, width: int, p: Callable[[str, int], float],
              limit: int) -> DraftTree:
    """The ``limit`` nodes of a matrix walk from ``cur`` most likely to be accepted, best first: a
    node's score is the product of ``p(source, depth)`` along its path (a budget's acceptance
    estimates, source "top1", "top2", ... the column), its children the first ``width`` columns of
    its token's row, at most ``depth`` levels. What a cost-aware budget weighs, without building the
    nodes it would never feed (``walk``'s full tree has up to depth x width of them)."""
    tree = DraftTree()
    heap = [(-1.0, 0, cur, -2, 0, 0)]  # (-score, tie, token, parent's node (-2: the root itself), column, level)
    pushed = 0
    while heap and len(tree.nodes) < limit:
        neg, _, tok, parent, col, level = heapq.heappop(heap)
        node = tree.child(parent, tok, f"top{col + 1}", col) if parent > -2 else -1
        if level >= depth:
            continue
        row = matrix.get(tok, [])
        for c in range(min(width, len(row))):
            pushed += 1  # ties: the earlier pushed first (a parent before its children)
            heapq.heappush(heap, (neg * p(f"top{c + 1}", level + 1), pushed, row[c], node, c, level + 1))
    return tree


def prompt_rows(prompt: list[int], k: int) -> dict[int, list[int]]:
    """Each prompt token's row: the distinct tokens that followed it in the prompt, latest first."""
    rows: dict[int, list[int]] = {}
    for a, b in zip(prompt, prompt[1:]):
        row = [b] + [t for t in rows.get(a, []) if t != b]
        rows[a] = row[:k]
    return rows


class TokenRecycling(Method):
    def __init__(self, ctx: StepContext, params):
        super().__init__(ctx, params)
        self.k = params["successors"]
        self.matrix: dict[int, list[int]] = prompt_rows(ctx.prompt_ids, self.k) if params["seed_prompt"] else {}
        acc = Acceptance({f"top{c + 1}": 0.5 / (c + 1) for c in range(self.k)}, deep=0.5)
        # its calibration steps do not count as idle ones (as its own copy of the budget did; see Budget)
        self.budget = Budget(ctx.costs, acc, idle_on_calibration=False) if is_auto(params) else None

    def propose(self, ctx: StepContext) -> Proposal:
        room = ctx.max_new_tokens - len(ctx.output)  # accepted draft tokens + the model's token
        depth = min(self.p["depth"], room - 1)
        tree = walk(self.matrix, ctx.cur, depth, self.p["branch"], self.p["width"]) if depth > 0 else DraftTree()
        if self.budget:
            return self.budget.propose(tree, ctx, recycled)
        return feed(tree, list(range(len(tree.nodes))), ctx, recycled)

    def update(self, ctx, proposal, verdict, argmax, committed, topk=None):
        fed = proposal.tree
        path = accepted_path(self.budget, proposal, verdict)
        written, n = write_rows(self.matrix, [fed.root] + list(proposal.tokens), path, topk)
        return RecyclingRecord(list(proposal.tokens), list(fed.parents), [fed.tree.nodes[i].tag for i in fed.nodes],
                               path, written, n)


def write_rows(matrix: dict[int, list[int]], fed: list[int], path: list[int],
               topk: list[list[int]]) -> tuple[list[list[int]], int]:
    """Overwrite the row of every fed token (``fed[r]`` on logits row r) with the top-k of its
    logits; rejected nodes first, then the current token and the accepted branch (``path``: fed
    tree node indices; their context is the true one, so they win when a token was fed twice).
    Returns (the rows that changed, as [token, *row], and how many rows were written). Suffix
    drafting's fallback (decoding/methods/suffix.py) keeps its matrix with this too."""
    before = {t: matrix.get(t) for t in fed}
    on_path = [0] + [i + 1 for i in path]
    for r in [r for r in range(len(fed)) if r not in set(on_path)] + on_path:
        matrix[fed[r]] = list(topk[r])
    changed = [[t, *matrix[t]] for t in before if matrix[t] != before[t]]
    return changed, len(fed)


# ---- its record (Step.record) --------------------------------------------------------------------
@dataclass
class RecyclingRecord(Record):
    """One Token Recycling step.

    The draft tree as fed: ``tokens[i]`` with parent ``parents[i]`` (an index into ``tokens``, -1:
    the current token), read from column ``cols[i]`` of its parent's matrix row (0: the parent's
    top-1 successor). ``path``: the tree nodes (indices into ``tokens``) of the accepted branch,
    root first (empty: nothing matched). ``written``: the matrix rows this step's forward changed,
    each ``[token, successor 1, .., successor k]`` (the new top-k after that token, in the context
    it was fed in); ``n_written``: how many rows it wrote in all (unchanged ones included).
    The rows read are the parents' rows: a node's token is ``row(parent)[col]``.
    """

    tokens: Tokens
    parents: list[Int]
    cols: list[Count]
    path: list[Count]
    written: list[Gram]
    n_written: Count

    v1_origin: ClassVar[str] = "recycled"

    @model_validator(mode="after")
    def _one_tree(self):
        if not len(self.tokens) == len(self.parents) == len(self.cols):
            fail("", "one parent and column per tree node")
        check_tree(self.parents, self.path, len(self.tokens))
        if self.n_written < len(self.written):
            fail("n_written", f"must count the rows written (at least {len(self.written)}), got {self.n_written}")
        return self

    def token_ids(self):
        return self.tokens + [t for row in self.written for t in row]

    def chains(self):  # one per leaf of the draft tree
        return len(set(range(len(self.parents))) - set(self.parents))

    def v1_guesses(self):
        return "recycled", len(self.path)

    def check_in(self, trace, where):
        k = trace.params["successors"]
        for i, c in enumerate(self.cols):
            if c >= k:
                fail(f"{where}.cols[{i}]", f"must be a column of the matrix (below k = {k}), got {c}")
        for i, row in enumerate(self.written):
            if len(row) > 1 + k:
                fail(f"{where}.written[{i}]", f"must be a token and at most its k = {k} successors")


SPEC = MethodSpec(
    name="tr", label="Token Recycling", colour="#CC79A7", cls=TokenRecycling, samples=True, record=RecyclingRecord,
    legacy_record="recycling",
    params=(
        Param("successors", 8, "top-k successors kept per token (the matrix's columns, the paper's k)", 1, 32,
              label="k (successors per token)"),
        Param("depth", 6, "levels of the draft tree", 1, 16, label="tree depth", tuned=True),
        Param("branch", 8, "children of a level's best node (the next best get one fewer each)", 1, 32,
              label="branching", tuned=True),
        Param("width", 14, "max nodes per tree level", 1, 64, label="max nodes per level", tuned=True),
        Param("seed_prompt", True, "seed the matrix with the prompt's bigrams", cli="--no-seed-prompt",
              label="Seed the matrix with the prompt's bigrams"),
        BUDGET_PARAM,
    ),
    grid=({"depth": 6, "branch": 8, "width": 14}, {"depth": 4, "branch": 4, "width": 8},
          {"depth": 8, "branch": 8, "width": 10}, {"depth": 3, "branch": 2, "width": 4}),
    topk_param="successors",
)
