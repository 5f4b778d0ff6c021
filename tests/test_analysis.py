"""Jacobi bookkeeping on hand-made trajectories, provenance, histograms, pool replay."""

import pytest

from decoding.analysis import (accepted_histogram, committed_curve, jacobi_cell_states, jacobi_counts, pool_at,
                               provenance, provenance_shares)
from decoding.loop import decode
from decoding.trace import JacobiBlock, JacobiRecord, Step, Trace, legacy_origins
from tiny import tiny_lm


def jacobi_trace(fixed, iterations):
    """iterations: (start, before, committed) per iteration of block 0, fixed point ``fixed``."""
    steps, out = [], [fixed[0]]
    for i, (start, before, committed) in enumerate(iterations):
        after = before  # not used by the bookkeeping
        toks = fixed[start + 1:start + committed + 1]
        out += toks
        step = Step(i, len(before) - start, toks, 0.01, 0.01, jacobi=JacobiRecord(0, i, start, before, after, committed))
        step.origins = legacy_origins("jacobi", step)  # committed - 1 converged guesses, then the model's token
        steps.append(step)
    return Trace("jacobi", {"n": len(fixed)}, "m", "cpu", "float32", [1], output_ids=out, steps=steps,
                 blocks=[JacobiBlock(0, 0, list(fixed), len(iterations))])


# fixed point A B C D E; letters as ids 10..14, wrong guesses 90+
A, B, C, D, E = 10, 11, 12, 13, 14


def test_fast_forward_and_stationary():
    tr = jacobi_trace([A, B, C, D, E], [
        (0, [A, 90, C, 91, E], 1),  # B wrong; C, E right behind it -> stationary (never change)
        (1, [A, B, C, 92, E], 2),   # commits B and C (fast-forward of C)
        (3, [A, B, C, D, E], 2),    # commits D, E
    ])
    rows = jacobi_cell_states(tr, 0)
    assert rows[0] == ["new", "wrong", "stationary", "wrong", "stationary"]
    assert rows[1] == ["committed", "new", "fast_forward", "wrong", "stationary"]
    assert rows[2] == ["committed"] * 3 + ["new", "fast_forward"]
    assert jacobi_counts(tr) == [{"block": 0, "size": 5, "iterations": 3, "fast_forwarded": 2, "stationary": 2}]
    # C was a converged guess, D the model's own token after it; the run ends after E (a guess)
    assert provenance(tr) == ["prefill", "step", "jacobi", "step", "jacobi"]


def test_right_but_changes_later_is_not_stationary():
    tr = jacobi_trace([A, B, C], [
        (0, [A, 90, C], 1),  # C right now but it changes next iteration -> "correct", not stationary
        (1, [A, B, 91], 1),
        (2, [A, B, C], 1),
    ])
    assert jacobi_cell_states(tr, 0)[0] == ["new", "wrong", "correct"]
    assert jacobi_counts(tr)[0]["stationary"] == 0


def test_right_with_nothing_wrong_before_is_correct():
    tr = jacobi_trace([A, B, C], [(0, [A, B, 91], 2), (2, [A, B, C], 1)])
    assert jacobi_cell_states(tr, 0)[0] == ["new", "fast_forward", "wrong"]


def test_live_jacobi_counts_add_up():
    lm = tiny_lm("qwen2", 1)
    tr = decode(lm, [3, 4, 5, 3, 4, 5, 3, 4], "jacobi", {"n": 8}, 40)
    counts = jacobi_counts(tr)
    assert sum(c["iterations"] for c in counts) == tr.n_steps
    # every step commits one token of its own plus its fast-forwarded ones
    assert sum(c["fast_forwarded"] for c in counts) == tr.step_tokens - tr.n_steps
    for b in tr.blocks:
        rows = jacobi_cell_states(tr, b.index)
        assert rows[0][0] == "new" and all(r.count("new") == 1 for r in rows)


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
        assert [list(c) for c in s.lookahead.candidates] == pool.get(cur, [])
        assert all(len(v) <= 2 for v in pool.values())
