"""Jacobi with budget="auto" (issue 20, item 6): each iteration feeds the prefix of the unconverged
guesses that pays; whatever it feeds, greedy output equals transformers' greedy generate, the
Jacobi update refines the fed guesses and the next one, and the record says how many were fed."""

from __future__ import annotations

import random

import pytest

from decoding.budget import LOOK_AGAIN, STINT, StepCosts, WidthBudget
from decoding.loop import decode
from decoding.trace import Trace, TraceError
from tiny import generate_greedy, tiny_lm

# cost curves: flat (an accelerator: feeding is nearly free), steep (feeding is dear), a CPU's
FLAT = lambda k: 1.0 + 0.001 * (k - 1)  # noqa: E731
STEEP = lambda k: 1.0 + 0.5 * (k - 1)  # noqa: E731
CPU = lambda k: 1.0 + 0.1 * (k - 1) ** 0.8  # noqa: E731


KEYS = [("llama", 0), ("qwen2", 1)]


@pytest.fixture(scope="module")
def models():
    return [tiny_lm(*k) for k in KEYS]


def _prompt(seed: int, length: int) -> list[int]:
    rng = random.Random(seed)
    base = [rng.randrange(96) for _ in range(max(1, length // 3))]
    return (base * 4)[:length]


class Curve(StepCosts):
    """The cost curve as given: this machine's step times do not recalibrate it (deterministic choices)."""

    def observe(self, fed, seconds):
        pass


def _auto(lm, prompt, n, K, curve):
    return decode(lm, prompt, "jacobi", {"n": n, "budget": "auto"}, K, step_costs=Curve(curve, calibrate_first=False))


@pytest.mark.parametrize("curve", [FLAT, STEEP, CPU], ids=["flat", "steep", "cpu"])
@pytest.mark.parametrize("n", [2, 5, 16])
def test_auto_matches_generate(models, curve, n):
    for (_, seed), lm in zip(KEYS, models):
        for plen, K in ((1, 21), (9, 30), (45, 37)):  # test_equivalence's prompts (no near-tie in fp32 there)
            prompt = _prompt(plen * 7 + seed, plen)
            out = _auto(lm, prompt, n, K, curve)
            assert out.output_ids == generate_greedy(lm, prompt, K), (plen, K)
            assert out.stop_reason == "max_new_tokens"
            assert all(s.budget is not None and s.record.fed is not None for s in out.steps)


def test_the_curve_decides_how_much_is_fed(models):
    lm, prompt = models[0], _prompt(3, 12)
    fed = {}
    for name, curve in (("flat", FLAT), ("steep", STEEP), ("linear", lambda k: float(k))):
        tr = _auto(lm, prompt, 16, 60, curve)
        fed[name] = sum(s.record.fed for s in tr.steps) / len(tr.steps)
        assert all(s.fed == 1 + s.record.fed for s in tr.steps)  # the forward fed the current token and those
    assert fed["flat"] > 1.3 * fed["steep"], fed
    # a step that costs as many AR steps as it feeds tokens never pays for a guess: only the few
    # steps that explore (budget.Acceptance.wants_data) feed one
    assert fed["linear"] < 0.4, fed


def test_partial_feed_updates_the_fed_guesses_and_the_next_one(models):
    tr = _auto(models[1], _prompt(7, 12), 16, 60, CPU)
    partial = [s.record for s in tr.steps if s.record.fed < len(s.record.before) - 1 - s.record.start]
    assert partial, "a CPU-like curve feeds part of the block"
    for r in partial:
        lo, hi = r.start + 1, r.start + r.fed + 2  # fed guesses and the first one not fed
        assert r.after[:lo] == r.before[:lo]
        assert r.after[hi:] == r.before[hi:], "guesses not fed keep their values"
    # greedy output all the same
    assert tr.output_ids == generate_greedy(models[1], _prompt(7, 12), 60)


def test_fixed_budget_is_the_full_block(models):
    lm, prompt = models[0], _prompt(2, 12)
    a = decode(lm, prompt, "jacobi", {"n": 8}, 40)
    assert all(s.record.fed is None and s.fed == len(s.record.before) - s.record.start for s in a.steps)
    assert all(s.budget is None for s in a.steps)


def test_record_fed_is_validated_and_round_trips(models):
    tr = _auto(models[0], _prompt(4, 12), 8, 30, CPU)
    assert Trace.from_json(tr.to_json()) == tr
    d = tr.to_dict()
    i = next(i for i, s in enumerate(tr.steps) if s.record.start == 0)
    d["steps"][i]["record"]["fed"] = len(tr.steps[i].record.before)  # more guesses than the block has
    with pytest.raises(TraceError, match="fed"):
        Trace.from_dict(d)


def _settle(commits, curve, max_width=16, steps=20 * STINT):
    """The widths a WidthBudget chooses, step by step, when a step feeding w tokens commits commits(w)."""
    wb, chosen = WidthBudget(Curve(curve, calibrate_first=False), max_width), []
    for _ in range(steps):
        w = wb.choose()
        chosen.append(w)
        wb.learn(w, commits(w))
    return chosen


def test_width_goes_where_tokens_per_cost_is_highest():
    # at most 5 tokens a step: per cost 1 / 1.82 / 3.08 / 2.94 / 2.0 at widths 1 / 2 / 4 / 8 / 16
    chosen = _settle(lambda w: min(w, 5), lambda k: 1.0 + 0.1 * (k - 1))
    late = chosen[-10 * STINT:]
    assert late.count(4) >= 7 * STINT and set(late) <= {4, 8}, chosen  # 4, now and then looking at 8 again
    # the width-2 steps all filled the window, so wider ones were extrapolated as promising: it
    # looked wider, measured less per cost there, and came back
    assert max(chosen) > 4 and chosen[:STINT] == [2] * STINT, chosen


def test_guesses_never_right_decode_as_ar():
    chosen = _settle(lambda w: 1, CPU)
    assert chosen[:STINT] == [2] * STINT  # the first stint looks at one guess
    # then LOOK_AGAIN stints of AR, and one stint looking at a guess again, and so on
    k = STINT * (LOOK_AGAIN + 1)
    assert chosen[STINT:k] == [1] * STINT * LOOK_AGAIN and chosen[k:k + STINT] == [2] * STINT, chosen
    assert chosen.count(2) <= STINT * (1 + len(chosen) // k), chosen


def test_a_text_that_becomes_easy_is_looked_at_again():
    easy = [False]  # guesses never right at first, then a width of 4 commits 4

    def commits(w):
        return min(w, 4) if easy[0] else 1
    wb, chosen = WidthBudget(Curve(CPU, calibrate_first=False), 16), []
    for i in range(30 * STINT):
        easy[0] = i >= 3 * STINT
        w = wb.choose()
        chosen.append(w)
        wb.learn(w, commits(w))
    assert 1 in chosen[:10 * STINT] and chosen[-STINT:] == [4] * STINT, chosen


def test_a_flat_curve_feeds_the_widest_that_helps():
    chosen = _settle(lambda w: min(w, 6), FLAT, max_width=8)  # 2, 4, 6 tokens at widths 2, 4, 8
    assert chosen[-STINT:] == [8] * STINT, chosen


def test_estimates_read_wider_steps_and_extrapolate_narrower_ones():
    wb = WidthBudget(Curve(CPU, calibrate_first=False), 16)
    assert wb.estimate(1) == 1.0
    assert wb.estimate(2) == pytest.approx(1.15)  # nothing measured: FIRST_GUESS
    for c in (1, 4, 8, 8):  # steps at width 8
        wb.width = 8
        wb.learn(8, c)
    assert wb.estimate(8) == pytest.approx(5.25)
    assert wb.estimate(4) == pytest.approx((1 + 4 + 4 + 4) / 4)  # cut at 4 tokens
    # 16 from 8: half the steps filled the window; of those reaching the last guess, all accepted it
    assert wb.estimate(16) == pytest.approx(5.25 + 0.5 * 8)
    wb.learn(4, 3)  # a step at a width other than the stint's (the block's end) is not counted
    assert len(wb.seen[4]) == 0


def test_until_one_token_steps_are_timed_it_feeds_one():
    costs = StepCosts(CPU)  # calibrate_first: the unit of cost is measured first
    wb = WidthBudget(costs, 16)
    assert wb.choose() == 1
    costs.observe(1, 0.02)
    costs.observe(1, 0.02)
    assert wb.choose() == 2


def test_auto_records_the_widths_weighed(models):
    tr = _auto(models[1], _prompt(9, 12), 16, 50, FLAT)
    for s in tr.steps:
        assert s.budget.fed == s.fed
        assert [o[0] for o in s.budget.options] == [1, 2, 4, 8, 16]
        assert s.budget.realized == len(s.tokens)
