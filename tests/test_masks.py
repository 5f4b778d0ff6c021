"""The lookahead 4D mask: its rules, and a brute-force check that one masked forward gives the
same logits as running every branch as its own plain causal sequence."""

import pytest
import torch

from decoding.methods.lookahead_mask import (BLOCKED, SEES, blocked_rule, lookahead_allowed, lookahead_layout, mask_4d,
                                              rule, why)
from decoding.model import cache_kw
from tiny import tiny_lm


def test_layout_positions_follow_the_diagonal():
    rows = lookahead_layout(W=3, N=4, n_candidates=2, levels=3)
    assert len(rows) == 1 + 3 * 3 + 2 * 3
    win = {(r["level"], r["column"]): r["offset"] for r in rows if r["kind"] == "window"}
    assert win == {(l, j): 1 + l + j for l in range(3) for j in range(3)}
    assert [r["offset"] for r in rows if r["kind"] == "candidate"] == [1, 2, 3, 1, 2, 3]


def test_visibility_rules():
    rows = lookahead_layout(W=3, N=3, n_candidates=2, levels=2)
    allowed = lookahead_allowed(rows)
    idx = {(r["kind"], r["level"], r["column"], r["candidate"], r["index"]): i for i, r in enumerate(rows)}
    cur = idx[("current", None, None, None, 0)]
    w = lambda l, j: idx[("window", l, j, None, None)]
    c = lambda k, i: idx[("candidate", None, None, k, i)]
    assert all(allowed[q][cur] for q in range(len(rows)))
    assert allowed[cur] == [q == cur for q in range(len(rows))]
    assert allowed[w(1, 2)][w(0, 0)] and allowed[w(1, 2)][w(0, 2)] and allowed[w(1, 2)][w(1, 2)]
    assert not allowed[w(1, 2)][w(1, 1)] and not allowed[w(0, 1)][w(0, 2)]
    assert allowed[c(1, 1)][c(1, 0)] and not allowed[c(1, 1)][c(0, 0)] and not allowed[c(0, 1)][c(0, 1) + 1]
    assert not any(allowed[c(0, 0)][w(l, j)] for l in range(2) for j in range(3))
    assert not any(allowed[w(l, j)][c(k, i)] for l in range(2) for j in range(3) for k in range(2) for i in range(2))
    assert why(rows[w(1, 2)], rows[w(0, 1)]) == ("level0_causal", SEES["level0_causal"])
    assert why(rows[c(0, 0)], rows[w(0, 0)]) is None
    assert rule(rows[w(1, 2)], rows[w(1, 0)]) is None and blocked_rule(rows[w(1, 2)], rows[w(1, 0)]) == "other_column"
    assert blocked_rule(rows[c(0, 0)], rows[w(0, 0)]) == "branches"


def test_every_pair_has_exactly_one_rule_id():
    """Each (query, key) pair is explained by one rule id: a seeing rule exactly where the mask
    allows attention, a blocking rule everywhere else (the heatmap colours by these ids)."""
    rows = lookahead_layout(W=3, N=4, n_candidates=2, levels=3)
    allowed = lookahead_allowed(rows)
    used = set()
    for i, q in enumerate(rows):
        for j, k in enumerate(rows):
            seen, blocked = rule(q, k), blocked_rule(q, k)
            assert (seen is None) != (blocked is None)
            assert (seen is not None) == allowed[i][j]
            used.add(seen or blocked)
    assert used == set(SEES) | set(BLOCKED)


@pytest.mark.parametrize("kind", ["llama", "qwen2"])
@pytest.mark.parametrize("W,N,n_cand,levels", [(3, 3, 2, 2), (4, 4, 3, 3), (2, 5, 1, 2), (3, 2, 2, 1)])
def test_masked_forward_equals_each_branch_alone(kind, W, N, n_cand, levels):
    from transformers import DynamicCache

    lm = tiny_lm(kind, 5)
    model, kw = lm.model, cache_kw(type(lm.model))
    g = torch.Generator().manual_seed(W * 100 + N)
    past_ids = torch.randint(0, 96, (1, 7), generator=g)
    rows = lookahead_layout(W, N, n_cand, levels)
    fed = torch.randint(0, 96, (1, len(rows)), generator=g)
    with torch.inference_mode():
        cache = DynamicCache(config=model.config)
        model(input_ids=past_ids, use_cache=True, **{kw: cache})
        mask, offsets = mask_4d(W, N, n_cand, levels, past=7, dtype=torch.float32, device="cpu")
        together = model(input_ids=fed, attention_mask=mask, position_ids=(offsets + 7).unsqueeze(0),
                         use_cache=True, **{kw: cache}).logits[0]
        allowed = lookahead_allowed(rows)
        for q in range(len(rows)):
            # the branch q sees, in order, as one plain sequence after the same past
            seen = [k for k in range(len(rows)) if allowed[q][k]]
            alone = model(input_ids=torch.cat([past_ids, fed[:, seen]], dim=1)).logits[0, -1]
            # its position in the plain sequence must equal the diagonal position we gave it
            assert 7 + len(seen) - 1 == 7 + rows[q]["offset"]
            torch.testing.assert_close(together[q], alone, rtol=1e-4, atol=1e-4)
