"""Jacobi bookkeeping on hand-made trajectories, provenance, histograms, pool replay."""

from pathlib import Path

import pytest

from decoding.analysis import (accepted_histogram, committed_curve, jacobi_cell_states, jacobi_commits, jacobi_counts,
                               pool_at, provenance, provenance_shares)
from decoding.loop import decode
from decoding.methods.jacobi import JacobiBlock, JacobiRecord
from decoding.trace import Step, Trace, legacy_origins
from tiny import tiny_lm


def jacobi_trace(fixed, iterations):
    """iterations: (start, before, committed) per iteration of block 0, fixed point ``fixed``."""
    steps, out = [], [fixed[0]]
    for i, (start, before, committed) in enumerate(iterations):
        after = before  # not used by the bookkeeping
        toks = fixed[start + 1:start + committed + 1]
        out += toks
        step = Step(i, len(before) - start, toks, 0.01, 0.01, record=JacobiRecord(0, i, start, before, after, committed))
        step.origins = legacy_origins("jacobi", step)  # committed - 1 converged guesses, then the model's token
        steps.append(step)
    return Trace("jacobi", {"n": len(fixed)}, "m", "cpu", "float32", [1], output_ids=out, steps=steps,
                 blocks=[JacobiBlock(0, 0, list(fixed), len(iterations))])


# fixed point A B C D E; letters as ids 10..14, wrong guesses 90+
A, B, C, D, E = 10, 11, 12, 13, 14


def test_stationary_tokens_are_not_fast_forwarded():
    tr = jacobi_trace([A, B, C, D, E], [
        (0, [A, 90, C, 91, E], 1),  # B wrong; C, E right behind it -> stationary (never change)
        (1, [A, B, C, 92, E], 2),   # commits B and C (C was right before this forward: stationary)
        (3, [A, B, C, D, E], 2),    # commits D, E
    ])
    rows = jacobi_cell_states(tr, 0)  # one row per state: the initial guess, then after each iteration
    assert rows[0] == ["committed", "wrong", "stationary", "wrong", "stationary"]
    assert rows[1] == ["committed", "new", "stationary", "wrong", "stationary"]  # B right; C joins the prefix
    assert rows[2] == ["committed"] * 3 + ["new", "stationary"]  # C confirmed and committed; D right; E joins
    assert rows[3] == ["committed"] * 5
    assert jacobi_commits(tr, 0) == [[], [1], [2, 3], [4]]
    assert jacobi_counts(tr) == [{"block": 0, "size": 5, "iterations": 3, "tokens": 4, "fast_forwarded": 0,
                                  "stationary": 2, "extra_committed": 2}]
    # C was a converged guess, D the model's own token after it; the run ends after E (a guess)
    assert provenance(tr) == ["prefill", "step", "jacobi", "step", "jacobi"]


def jacobi_run(fixed, states, starts):
    """A block from its states y(0) .. y(K) (``after`` recorded, as a live run does) and the start
    of each iteration; committed = the right prefix of what it fed minus its start."""
    def prefix(y):
        n = 0
        while n < len(fixed) and y[n] == fixed[n]:
            n += 1
        return n
    steps, out = [], [fixed[0]]
    for i, start in enumerate(starts):
        before, after = states[i], states[i + 1]
        committed = prefix(before) - start
        toks = (fixed + [99])[start + 1:start + committed + 1]
        out += toks
        origins = ["jacobi"] * (committed - 1) + ["step"]
        steps.append(Step(i, len(before) - start, toks, 0.01, 0.01,
                          record=JacobiRecord(0, i, start, before, after, committed), origins=origins))
    return Trace("jacobi", {"n": len(fixed)}, "m", "cpu", "float32", [1], output_ids=out, steps=steps,
                 blocks=[JacobiBlock(0, 0, list(fixed), len(starts))])


def test_fast_forward_is_marked_at_the_forward_that_made_the_tokens_right():
    """Issue 11, error 2: CLLM's fast-forward = several consecutive tokens made right by one
    forward. The forward of iteration 1 gets B (as AR would) and C, D too: C and D are
    fast-forwarded at iteration 1, although iteration 2 commits them (it feeds and confirms them)."""
    tr = jacobi_run([A, B, C, D, E], [
        [A, 90, 91, 92, 93],   # y(0): the initial guess
        [A, B, C, D, 94],      # y(1): B, C, D right after one forward
        [A, B, C, D, E],       # y(2): iteration 2 confirms C, D, commits them and E
        [A, B, C, D, E],       # y(3): iteration 3 feeds E alone (its token is the next block's)
    ], starts=[0, 1, 4])
    rows = jacobi_cell_states(tr, 0)
    assert rows[1] == ["committed", "new", "fast_forward", "fast_forward", "wrong"]
    assert rows[2] == ["committed"] * 4 + ["new"]
    # iteration 3 commits the model's token after E: position 5, the next block's first (issue 23, item 4)
    assert jacobi_commits(tr, 0) == [[], [1], [2, 3, 4], [5]]
    c = jacobi_counts(tr)[0]
    assert (c["fast_forwarded"], c["stationary"], c["extra_committed"], c["iterations"]) == (2, 0, 2, 3)


def test_a_guess_right_by_chance_is_not_a_fast_forward():
    """B and D are right in the initial guess: D stays right behind the wrong C (stationary), B is
    right with nothing wrong before it (correct); neither was made right by a forward."""
    tr = jacobi_run([A, B, C, D], [
        [A, B, 90, D],
        [A, B, C, D],
        [A, B, C, D],
    ], starts=[0, 3])
    rows = jacobi_cell_states(tr, 0)
    assert rows[0] == ["committed", "correct", "wrong", "stationary"]
    assert rows[1] == ["committed", "committed", "new", "stationary"]
    assert jacobi_counts(tr)[0]["fast_forwarded"] == 0


def test_right_but_changes_later_is_not_stationary():
    tr = jacobi_trace([A, B, C], [
        (0, [A, 90, C], 1),  # C right now but it changes next iteration -> "correct", not stationary
        (1, [A, B, 91], 1),
        (2, [A, B, C], 1),
    ])
    assert jacobi_cell_states(tr, 0)[0] == ["committed", "wrong", "correct"]
    assert jacobi_counts(tr)[0]["stationary"] == 0


def test_live_jacobi_counts_add_up():
    lm = tiny_lm("qwen2", 1)
    tr = decode(lm, [3, 4, 5, 3, 4, 5, 3, 4], "jacobi", {"n": 8}, 40)
    counts = jacobi_counts(tr)
    assert sum(c["iterations"] for c in counts) == tr.n_steps
    assert sum(c["tokens"] for c in counts) == tr.step_tokens
    # every step commits one token of its own plus the guesses it confirmed
    assert sum(c["extra_committed"] for c in counts) == tr.step_tokens - tr.n_steps
    for b in tr.blocks:
        rows = jacobi_cell_states(tr, b.index)
        commits = jacobi_commits(tr, b.index)
        assert len(rows) == len(commits) == b.iterations + 1
        for k, row in enumerate(rows[1:], 1):
            assert row.count("new") <= 1
            # a fast-forwarded token is committed by the next iteration, never by its own
            ff = [p for p, s in enumerate(row) if s == "fast_forward"]
            assert not set(ff) & set(commits[k])
            if ff and k + 1 < len(commits):
                assert set(ff) <= set(commits[k + 1])


def test_commits_add_up_to_the_blocks_committed_tokens():
    """Issue 23, item 4: a block's last iteration commits one token, the next block's first
    (position n); the commits left it out ("0 committed"), so they added up to 15 of a full
    block's 16 tokens. Per block they now add up to jacobi_counts' tokens, on the shipped example
    and on a live run whose last block is cut by max_new_tokens."""
    lm = tiny_lm("llama", 2)
    live = decode(lm, [3, 4, 5, 3, 4, 5, 3, 4], "jacobi", {"n": 6}, 21)
    shipped = Trace.load(str(Path(__file__).resolve().parents[1] / "assets" / "example_jacobi.json"))
    for tr in (live, shipped):
        n = tr.params["n"]
        for c in jacobi_counts(tr):
            commits = jacobi_commits(tr, c["block"])
            assert sum(len(p) for p in commits) == c["tokens"]
            if c["tokens"] == n:  # a full block: its last iteration commits the next block's first token
                assert commits[-1][-1] == n
        assert sum(c["tokens"] for c in jacobi_counts(tr)) == tr.step_tokens


def test_a_block_without_early_guesses_takes_one_iteration_per_token():
    """The words 'a block with no guess right early takes as many iterations as it commits tokens
    (n for a full block)' hold on a live run: blocks with extra_committed 0."""
    lm = tiny_lm("llama", 2)
    tr = decode(lm, [5, 6, 7, 8], "jacobi", {"n": 4}, 24)
    plain = [c for c in jacobi_counts(tr) if c["extra_committed"] == 0]
    assert plain
    for c in plain:
        assert c["iterations"] == c["tokens"]
    full = [c for c in jacobi_counts(tr) if c["tokens"] == 4]
    assert full and all(c["iterations"] == 4 - c["extra_committed"] for c in full)


def test_histogram_curve_and_provenance_of_lookahead():
    lm = tiny_lm("llama", 0)
    prompt = [7, 8, 9, 10] * 6
    tr = decode(lm, prompt, "lookahead", {"W": 4, "N": 3, "G": 4}, 40)
    hist = accepted_histogram(tr)
    assert sum(hist.values()) == tr.n_steps and sum(k * v for k, v in hist.items()) == tr.step_tokens
    curve = committed_curve(tr)
    assert curve[0] == 1 and curve[-1] == 40 and len(curve) == tr.n_steps + 1
    labels = provenance(tr)
    assert len(labels) == 40
    # every step ends with the model's own token, but the last one, which max_new_tokens may cut
    assert all(s.origins[-1] == "step" for s in tr.steps[:-1])
    assert tr.n_steps - 1 <= labels.count("step") <= tr.n_steps
    la = [s for s in tr.steps if len(s.tokens) > 1 and s is not tr.steps[-1]]
    assert la and all(set(s.origins[:-1]) <= {"pool", "prompt_pool", "output_pool"} for s in la)
    assert abs(sum(provenance_shares(tr).values()) - 1) < 1e-9


def test_pool_at_matches_live_pool():
    lm = tiny_lm("llama", 2)
    tr = decode(lm, [1, 2, 3, 4, 1, 2, 3, 4], "lookahead", {"W": 3, "N": 3, "G": 2}, 30)
    for i, s in enumerate(tr.steps):
        pool = pool_at(tr, i)
        key = tr.prompt_ids[-1] if i == 0 else None
        # the candidates each step verified are exactly the pool's entries for its current token
        cur = (tr.prompt_ids + tr.output_ids)[len(tr.prompt_ids) + sum(len(x.tokens) for x in tr.steps[:i])]
        assert [list(c) for c in s.record.candidates] == pool.get(cur, [])
        assert all(len(v) <= 2 for v in pool.values())
