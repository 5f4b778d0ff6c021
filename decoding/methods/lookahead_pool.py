"""The lookahead n-gram pool.

Keys are the first token of an n-gram; each key holds at most ``G`` continuations (the other N-1
tokens), oldest first. Adding a continuation already present refreshes it (moves it to newest);
adding one more than G evicts the oldest. Every change is returned as an op so a trace can replay
the pool without storing it whole each step.

    >>> pool = NGramPool(G=2)
    >>> pool.add((7, 1, 2), "window")
    [['+', [7, 1, 2]]]
    >>> pool.add((7, 3, 4), "window"); _ = pool.add((7, 1, 2), "prompt")   # refresh (7,1,2)
    [['+', [7, 3, 4]]]
    >>> pool.add((7, 5, 6), "window")     # (7,3,4) is now the oldest: evicted
    [['-', [7, 3, 4]], ['+', [7, 5, 6]]]
    >>> pool.candidates(7)
    [((1, 2), 'prompt'), ((5, 6), 'window')]
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Iterable


class NGramPool:
    def __init__(self, G: int):
        if G < 0:
            raise ValueError("G must be >= 0")
        self.G = G
        self._by_key: dict[int, OrderedDict[tuple[int, ...], str]] = {}

    def add(self, gram: Iterable[int], origin: str) -> list[list]:
        """Insert one n-gram (key first). Returns the ops it caused, in order."""
        gram = tuple(gram)
        if self.G == 0 or len(gram) < 2:
            return []
        key, cont = gram[0], gram[1:]
        entries = self._by_key.setdefault(key, OrderedDict())
        if cont in entries:
            entries.move_to_end(cont)
            entries[cont] = origin
            return [["~", list(gram)]]
        ops = []
        if len(entries) >= self.G:
            old, _ = entries.popitem(last=False)
            ops.append(["-", [key, *old]])
        entries[cont] = origin
        ops.append(["+", list(gram)])
        return ops

    def candidates(self, key: int) -> list[tuple[tuple[int, ...], str]]:
        """The continuations stored for ``key``, oldest first, with where they came from."""
        return list(self._by_key.get(key, {}).items())

    def as_dict(self) -> dict[int, list[list[int]]]:
        return {k: [list(c) for c in v] for k, v in self._by_key.items() if v}

    def __len__(self) -> int:
        return sum(len(v) for v in self._by_key.values())


def replay(seed: list[list[int]], steps_ops: Iterable[list[list]], G: int) -> dict[int, list[list[int]]]:
    """Rebuild a pool's contents from a seed and recorded ops (see ``LookaheadRecord.pool_ops``)."""
    by_key: dict[int, OrderedDict[tuple[int, ...], None]] = {}
    for gram in seed:
        _apply(by_key, "+", gram)
    for ops in steps_ops:
        for op, gram in ops:
            _apply(by_key, op, gram)
    return {k: [list(c) for c in v] for k, v in by_key.items() if v}


def _apply(by_key, op: str, gram: list[int]) -> None:
    key, cont = gram[0], tuple(gram[1:])
    entries = by_key.setdefault(key, OrderedDict())
    if op == "-":
        entries.pop(cont, None)
    else:  # "+" adds at the newest end, "~" moves to the newest end
        entries.pop(cont, None)
        entries[cont] = None
