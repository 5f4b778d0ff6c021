"""Draft trees: guessed continuations of the current token merged into a tree (a shared prefix
once), and how a chosen part of one is fed in one forward.

    >>> t = DraftTree(); t.add([5, 6, 7], "a"); t.add([5, 9], "a")
    >>> [n.token for n in t.nodes], paths(t, [0, 1, 2, 3])
    ([5, 6, 7, 9], [[0, 1, 2], [0, 3]])

Fed after a head block (the current token, plus any block of the method's own such as lookahead's
window), each tree node sees the current token, its ancestors and itself, at position current +
depth; head and tree never see each other (``tree_attention``). Plain Python; ``to_mask`` imports
torch when called.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class Node:
    token: int
    parent: int  # index of the parent node, -1: the current token
    depth: int  # 1 = right after the current token
    source: str  # where the guess came from (a decoding.budget.Acceptance source)
    tag: object = None  # what the first chain through this node was (the method's own note)


class DraftTree:
    """Guessed continuations of the current token merged into a tree (a shared prefix once)."""

    def __init__(self):
        self.nodes: list[Node] = []
        self._child: dict[tuple[int, int], int] = {}

    def add(self, tokens: list[int], source: str, tag: object = None) -> None:
        parent = -1
        for t in tokens:
            parent = self.child(parent, t, source, tag)

    def child(self, parent: int, token: int, source: str, tag: object = None) -> int:
        """The index of ``parent``'s child ``token`` (-1: the current token's), added with this
        source and tag unless it is there already (then it keeps its own)."""
        i = self._child.get((parent, token))
        if i is None:
            i = len(self.nodes)
            self.nodes.append(Node(token, parent, self.nodes[parent].depth + 1 if parent >= 0 else 1, source, tag))
            self._child[(parent, token)] = i
        return i

    def reach(self, acc) -> list[float]:
        """P(each node is accepted) under ``acc`` (a decoding.budget.Acceptance): its parent's times
        its own share of P(some sibling is). Siblings exclude each other (the argmax is one token), so
        P(some sibling) = 1 - prod(1 - q) of their own estimates q (as if they were independent
        guesses), shared in proportion to q."""
        q = [acc.p(n.source, n.depth) for n in self.nodes]
        total: dict[int, float] = {}
        miss: dict[int, float] = {}
        for n, qi in zip(self.nodes, q):
            total[n.parent] = total.get(n.parent, 0.0) + qi
            miss[n.parent] = miss.get(n.parent, 1.0) * (1.0 - qi)
        out: list[float] = []
        for n, qi in zip(self.nodes, q):  # parents come before children
            share = qi / total[n.parent] * (1.0 - miss[n.parent]) if total[n.parent] > 0 else 0.0
            out.append(share * (out[n.parent] if n.parent >= 0 else 1.0))
        return out


def paths(tree: DraftTree, chosen: list[int]) -> list[list[int]]:
    """Root-to-leaf paths (node indices) of the chosen subtree."""
    sel = set(chosen)
    has_child = {tree.nodes[i].parent for i in chosen}
    out = []
    for i in chosen:
        if i in has_child:
            continue
        path = []
        while i >= 0:
            path.append(i)
            i = tree.nodes[i].parent
        out.append(path[::-1])
    assert all(all(j in sel for j in p) for p in out), "a chosen node's parent was not chosen"
    return out


@dataclass(frozen=True)
class FedTree:
    """The part of a draft tree a step fed: handed back to the method's ``update`` in its Proposal."""

    tree: DraftTree
    nodes: list[int]  # the fed node indices, parents first (fed in this order after the head)
    parents: list[int]  # each fed node's parent among the fed nodes (-1: the current token)
    paths: list[list[int]]  # root-to-leaf node paths of the fed nodes: one per chain, in the chains' order
    root: int  # the current token the tree hangs from (fed row 0)

    def accepted(self, chain: int, n: int) -> list[int]:
        """The nodes on the accepted path: the first ``n`` of chain ``chain``'s (-1: none accepted)."""
        return self.paths[chain][:n] if chain >= 0 else []


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
