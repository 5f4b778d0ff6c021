"""Feeding a draft tree (decoding/budget.py's DraftTree) after a head block in one forward.

The head is the current token (row 0) plus any branch of its own (lookahead's window); each tree
node sees the current token, its ancestors and itself, at position current + depth; head and tree
never see each other. Each root-to-leaf path of the fed nodes is a Chain for the shared verifiers.
"""

from __future__ import annotations

from typing import Callable

from ..budget import BUDGET_HELP, BUDGETS, DraftTree, paths
from ..verify import Chain
from .spec import Param

# the step budget of every method that can feed a draft tree: fixed (its settings) or auto (what pays here)
BUDGET_PARAM = Param("budget", "fixed", BUDGET_HELP, label="Step budget", choices=BUDGETS)


def tree_attention(head_allowed: list[list[bool]], head_offsets: list[int], parents: list[int],
                   depths: list[int]) -> tuple[list[list[bool]], list[int]]:
    """(who sees whom, position offsets) of the head followed by tree nodes (``parents``: the
    parent's index among the fed nodes, -1 for the current token)."""
    h, n = len(head_allowed), len(parents)
    allowed = [list(row) + [False] * n for row in head_allowed]
    for i, p in enumerate(parents):
        row = [False] * (h + n)
        row[0] = row[h + i] = True
        while p >= 0:
            row[h + p] = True
            p = parents[p]
        allowed.append(row)
    return allowed, list(head_offsets) + list(depths)


def to_mask(allowed: list[list[bool]], offsets: list[int], past: int, dtype, device):
    """(4D float mask [1, 1, q, past + q]: 0 attend / min blocked, offsets tensor [q])."""
    import torch

    block = torch.tensor(allowed, dtype=torch.bool, device=device)
    q = block.shape[0]
    mask = torch.zeros((q, past + q), dtype=dtype, device=device)
    mask[:, past:].masked_fill_(~block, torch.finfo(dtype).min)
    return mask.view(1, 1, q, past + q), torch.tensor(offsets, dtype=torch.long, device=device)


def fed_tree(tree: DraftTree, chosen: list[int], first_row: int, origin: Callable[[str], str]):
    """(tokens, parents among the fed nodes, depths, chains) for the chosen nodes fed from ``first_row``."""
    pos = {node: k for k, node in enumerate(chosen)}
    nodes = [tree.nodes[i] for i in chosen]
    parents = [pos[n.parent] if n.parent >= 0 else -1 for n in nodes]
    chains = [Chain([tree.nodes[i].token for i in p], [first_row + pos[i] for i in p], origin(tree.nodes[p[-1]].source))
              for p in paths(tree, chosen)]
    return [n.token for n in nodes], parents, [n.depth for n in nodes], chains
