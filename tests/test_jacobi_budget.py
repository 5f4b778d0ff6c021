"""Jacobi with budget="auto" (issue 20, item 6): each iteration feeds the prefix of the unconverged
guesses that pays; whatever it feeds, greedy output equals transformers' greedy generate, the
Jacobi update refines the fed guesses and the next one, and the record says how many were fed."""

from __future__ import annotations

import random

import pytest

from decoding.budget import StepCosts
from decoding.loop import decode
from decoding.methods.jacobi import PRIORS, REFINED
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


def test_refinement_sources_are_learnt(models):
    tr = _auto(models[1], _prompt(9, 12), 16, 50, FLAT)
    first, last = tr.steps[0].budget.acceptance, tr.steps[-1].budget.acceptance
    assert set(REFINED) <= set(first)
    assert first == {k: round(v, 3) for k, v in PRIORS.items()}
    moved = [k for k in REFINED if last[k] != first[k]]
    assert "fresh" in moved and len(moved) >= 2, (first, last)  # verification taught it
