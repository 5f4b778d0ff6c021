"""The lookahead step's input layout and 4D attention mask (DESIGN.md, "Lookahead").

One forward feeds: the current token, the 2D window (``levels`` x W, level 0 first) and the
candidate (N-1)-grams. Visibility inside the new tokens (all of them see the whole KV cache):
- current token: itself;
- window level l, column j: the current token, level-0 columns 0..j, column j of levels 1..l;
- candidate c, token i: the current token and tokens 0..i of candidate c.
Lookahead and verification branches never see each other. Position of a token = position of the
current token + ``offset``: window (l, j) at 1 + l + j (the diagonal), candidate token i at 1 + i.

The layout and visibility are plain Python (the app's mask heatmap uses them without torch);
``mask_4d`` turns them into the float mask passed to the model.
"""

from __future__ import annotations

from functools import lru_cache


def lookahead_layout(W: int, N: int, n_candidates: int, levels: int) -> list[dict]:
    """One dict per fed token: kind, level, column, candidate, index, offset."""
    rows = [dict(kind="current", level=None, column=None, candidate=None, index=0, offset=0)]
    for l in range(levels):
        for j in range(W):
            rows.append(dict(kind="window", level=l, column=j, candidate=None, index=None, offset=1 + l + j))
    for c in range(n_candidates):
        for i in range(N - 1):
            rows.append(dict(kind="candidate", level=None, column=None, candidate=c, index=i, offset=1 + i))
    return rows


# The visibility rules: id -> sentence. A figure maps the ids to colours; the sentences explain them.
SEES: dict[str, str] = {
    "current": "everyone sees the current token",
    "level0_causal": "level 0 is causal: a window token sees level-0 columns up to its own",
    "own_column": "a window token sees its own column on levels 1..its level",
    "own_candidate": "a candidate sees its own earlier tokens",
}
BLOCKED: dict[str, str] = {
    "current_alone": "the current token sees only itself (and the KV cache)",
    "branches": "lookahead and verification never see each other",
    "other_candidate": "another candidate",
    "later_in_candidate": "a later token of the same candidate",
    "level0_later": "level 0 is causal: that column comes later",
    "other_column": "another column above level 0",
    "higher_level": "a higher level of the same column",
}


def rule(q: dict, k: dict) -> str | None:
    """The id (a key of ``SEES``) of the rule by which ``q`` sees ``k``, or None if it does not."""
    if k["kind"] == "current":
        return "current"
    if q["kind"] == "window" and k["kind"] == "window":
        if k["level"] == 0 and k["column"] <= q["column"]:
            return "level0_causal"
        if k["column"] == q["column"] and 1 <= k["level"] <= q["level"]:
            return "own_column"
        return None
    if q["kind"] == "candidate" and k["kind"] == "candidate":
        if k["candidate"] == q["candidate"] and k["index"] <= q["index"]:
            return "own_candidate"
        return None
    return None  # current sees only itself; lookahead and verification never see each other


def blocked_rule(q: dict, k: dict) -> str | None:
    """The id (a key of ``BLOCKED``) of why ``q`` does not see ``k``, or None if it does."""
    if rule(q, k) is not None:
        return None
    if q["kind"] == "current":
        return "current_alone"
    if q["kind"] != k["kind"]:
        return "branches"
    if q["kind"] == "candidate":
        return "other_candidate" if k["candidate"] != q["candidate"] else "later_in_candidate"
    if k["level"] == 0:
        return "level0_later"
    return "other_column" if k["column"] != q["column"] else "higher_level"


def why(q: dict, k: dict) -> tuple[str, str] | None:
    """(rule id, sentence) of why ``q`` sees ``k``, or None if it does not."""
    r = rule(q, k)
    return None if r is None else (r, SEES[r])


def sees(q: dict, k: dict) -> bool:
    """Whether fed token ``q`` attends to fed token ``k`` (both from ``lookahead_layout``)."""
    return rule(q, k) is not None


def lookahead_allowed(layout: list[dict]) -> list[list[bool]]:
    return [[sees(q, k) for k in layout] for q in layout]


@lru_cache(maxsize=64)
def _block(W: int, N: int, n_candidates: int, levels: int, dtype, device: str):
    import torch

    layout = lookahead_layout(W, N, n_candidates, levels)
    allowed = torch.tensor(lookahead_allowed(layout), dtype=torch.bool)
    block = torch.zeros(allowed.shape, dtype=dtype)
    block.masked_fill_(~allowed, torch.finfo(dtype).min)
    offsets = torch.tensor([r["offset"] for r in layout], dtype=torch.long)
    return block.to(device), offsets.to(device)


def mask_4d(W: int, N: int, n_candidates: int, levels: int, past: int, dtype, device):
    """(mask [1, 1, q, past + q] float with 0 = attend / min = blocked, offsets [q])."""
    import torch

    block, offsets = _block(W, N, n_candidates, levels, dtype, str(device))
    q = block.shape[0]
    mask = torch.cat([torch.zeros((q, past), dtype=dtype, device=block.device), block], dim=1)
    return mask.view(1, 1, q, past + q), offsets
