"""The n-gram pool: keying, cap G, oldest-first eviction, duplicates refreshed, replay."""

import pytest

from decoding.methods.lookahead_pool import NGramPool, replay

# (G, grams added in order, key asked, expected continuations oldest first)
CASES = [
    # keyed by the first token; other keys untouched
    (3, [(1, 2, 3), (4, 5, 6), (1, 7, 8)], 1, [(2, 3), (7, 8)]),
    (3, [(1, 2, 3), (4, 5, 6)], 4, [(5, 6)]),
    (3, [(1, 2, 3)], 9, []),
    # cap G: the oldest goes first
    (2, [(1, 2, 3), (1, 4, 5), (1, 6, 7)], 1, [(4, 5), (6, 7)]),
    # a duplicate is refreshed (moved to newest), so it survives the next eviction
    (2, [(1, 2, 3), (1, 4, 5), (1, 2, 3), (1, 6, 7)], 1, [(2, 3), (6, 7)]),
    # G = 0 keeps nothing
    (0, [(1, 2, 3)], 1, []),
]


@pytest.mark.parametrize("G,grams,key,expected", CASES)
def test_pool_table(G, grams, key, expected):
    pool = NGramPool(G)
    for g in grams:
        pool.add(g, "window")
    assert [c for c, _ in pool.candidates(key)] == expected


def test_ops_replay_rebuilds_the_pool():
    pool = NGramPool(2)
    seed_ops = [pool.add(g, "prompt") for g in [(1, 2, 3), (2, 3, 4)]]
    seed = [op[1] for ops in seed_ops for op in ops]
    steps = [[op for g in grams for op in pool.add(g, "window")]
             for grams in [[(1, 9, 9), (1, 2, 3)], [(1, 5, 5), (2, 3, 4), (2, 6, 6), (2, 7, 7)]]]
    assert steps[1][0] == ["-", [1, 9, 9]]  # (1,2,3) was refreshed, so (1,9,9) was the oldest
    assert replay(seed, steps, 2) == pool.as_dict()


def test_origin_follows_the_latest_insert():
    pool = NGramPool(4)
    pool.add((1, 2), "prompt")
    pool.add((1, 2), "window")
    assert pool.candidates(1) == [((2,), "window")]


def test_negative_G_is_refused():
    with pytest.raises(ValueError):
        NGramPool(-1)
