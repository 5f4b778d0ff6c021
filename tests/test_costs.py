"""The step-cost model and the speedup account, on hand-made traces and cost curves.

Curve used throughout (relative cost of a forward over k new tokens):
    k     1    2    4    8    16
    c(k)  1.0  1.5  2.0  2.0  4.0        (seconds: 0.01 x c)
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from decoding.perf.account import account, break_even, mean_step_cost, reasons, stats
from decoding.perf.costs import CostCurve, CurveError
from decoding.trace import Step, Trace
from decoding.perf.tune import rank, recommend, what_if
from viz_traces import jacobi_trace, lookahead_trace


def curve(ar_overhead=None) -> CostCurve:
    return CostCurve("hand", "cpu", "float32", 2, 256, [1, 2, 4, 8, 16], [0.01, 0.015, 0.02, 0.02, 0.04],
                     repeats=3, ar_overhead=ar_overhead)


def run(method, fed, tokens, step_s, fwd_s, prefill=0.0) -> Trace:
    """A trace with one step per entry of ``fed``, committing ``tokens[i]`` tokens each."""
    t = Trace(method=method, params={}, model_id="hand", device="cpu", dtype="float32", prompt_ids=[1, 2, 3])
    out, nxt = [100], 101
    guess = {"jacobi": "jacobi", "pld": "pld"}.get(method, "pool")  # the origin of accepted guesses
    for i, (f, n) in enumerate(zip(fed, tokens)):
        toks = list(range(nxt, nxt + n))
        nxt += n
        out += toks
        t.steps.append(Step(i, f, toks, step_s, fwd_s, origins=[guess] * (n - 1) + ["step"]))
    t.output_ids = out
    t.prefill_seconds = prefill
    t.seconds = prefill + step_s * len(fed)
    return t


@pytest.mark.parametrize("k, want", [(1, 1.0), (2, 1.5), (3, 1.75), (4, 2.0), (6, 2.0), (12, 3.0), (16, 4.0),
                                     (24, 6.0), (0.5, 1.0)])
def test_relative_cost_interpolates_and_extrapolates(k, want):
    assert curve().relative_cost(k) == pytest.approx(want)


def test_curve_round_trip_and_validation(tmp_path):
    c = curve(0.05)
    p = tmp_path / "c.json"
    c.save(p)
    assert CostCurve.load(p) == c
    bad = c.to_dict() | {"ks": [2, 4, 8, 16, 32]}
    with pytest.raises(CurveError):
        CostCurve.from_dict(bad)
    with pytest.raises(CurveError):
        CostCurve.from_dict(c.to_dict() | {"version": 9})


def test_prediction_is_tokens_per_step_over_step_cost_without_overhead():
    # 4 steps feeding 4 tokens (c = 2.0) and committing 3 each: 3 / 2 = 1.5x
    t = run("jacobi", [4, 4, 4, 4], [3, 3, 3, 3], step_s=0.02, fwd_s=0.02)
    a = account(t, curve(ar_overhead=0.0))
    assert a.tokens_per_step == 3.0 and a.step_cost == pytest.approx(2.0)
    assert a.overhead == 0.0 and a.prefill_share == 0.0
    assert a.decode_speedup == pytest.approx(1.5) and a.predicted == pytest.approx(1.5)
    assert a.sentence() == "3.00 tokens/step, each step cost 2.00 AR steps, 0% overhead (AR 0%): predicted 1.50x."


def test_mixed_steps_average_their_relative_costs():
    t = run("lookahead", [1, 2, 16, 4], [1, 2, 5, 2], step_s=0.02, fwd_s=0.02)
    assert mean_step_cost([1, 2, 16, 4], curve()) == pytest.approx((1 + 1.5 + 4 + 2) / 4)
    a = account(t, curve(ar_overhead=0.0))
    assert a.predicted == pytest.approx((10 / 4) / ((1 + 1.5 + 4 + 2) / 4))


def test_overhead_correction_against_the_ar_run():
    # method: 25% of each step outside the forward; AR: 10%
    m = run("lookahead", [8] * 5, [4] * 5, step_s=0.04, fwd_s=0.03)
    ar = run("ar", [1] * 20, [1] * 20, step_s=0.01, fwd_s=0.009)
    a = account(m, curve(), ar)
    assert a.overhead == pytest.approx(0.25) and a.ar_overhead == pytest.approx(0.10) and a.ar_overhead_from == "the AR run"
    assert a.overhead_factor == pytest.approx(0.75 / 0.90)
    assert a.predicted == pytest.approx(4 / 2.0 * 0.75 / 0.90)
    # measured: same 21 tokens in 0.2 s vs 0.2 s
    assert a.measured == pytest.approx(1.0)
    assert a.measured_step_cost == pytest.approx(0.03 / 0.009)
    assert a.disagrees and "disagree" in a.warning()


def test_ar_overhead_from_the_curve_when_no_ar_run():
    m = run("lookahead", [8] * 5, [4] * 5, step_s=0.04, fwd_s=0.03)
    a = account(m, curve(ar_overhead=0.2))
    assert a.ar_overhead_from == "the cost curve" and a.overhead_factor == pytest.approx(0.75 / 0.8)
    a = account(m, curve())
    assert a.ar_overhead_from == "assumed equal" and a.overhead_factor == 1.0


def test_prefill_dilutes_the_speedup():
    # decode speedup 2x (8-token steps cost 2.0, commit 4); prefill 0.1 s, method decode 0.1 s
    m = run("lookahead", [8] * 5, [4] * 5, step_s=0.02, fwd_s=0.02, prefill=0.1)
    a = account(m, curve(ar_overhead=0.0))
    assert a.decode_speedup == pytest.approx(2.0)
    # AR decode estimated 0.2 s -> prefill share 1/3 -> 1 / (1/3 + (2/3) / 2) = 1.5
    assert a.prefill_share == pytest.approx(1 / 3) and a.predicted == pytest.approx(1.5)


def test_agreement_within_15_percent_is_not_flagged():
    m = run("lookahead", [4] * 10, [3] * 10, step_s=0.02, fwd_s=0.02)  # predicted 1.5x
    ar = run("ar", [1] * 30, [1] * 30, step_s=0.0105, fwd_s=0.0105)  # measured 0.315/0.2 = 1.575x
    a = account(m, curve(), ar)
    assert a.measured == pytest.approx(0.315 / 0.2)
    assert not a.disagrees and a.warning() == ""


def test_bench_rows_and_traces_give_the_same_account():
    t = run("lookahead", [1, 8, 16], [1, 4, 3], step_s=0.03, fwd_s=0.025, prefill=0.05)
    row = {"method": "lookahead", "fed": [1, 8, 16], "output_ids": t.output_ids, "seconds": t.seconds,
           "prefill_seconds": 0.05, "forward_seconds": t.forward_seconds, "steps": 3}
    assert account(row, curve()) == account(t, curve())
    with pytest.raises(ValueError):
        stats({"method": "generate", "fed": None, "output_ids": [1], "seconds": 1.0})


def test_break_even_tokens_per_step():
    assert break_even(curve().relative_cost(16)) == pytest.approx(4.0)
    assert break_even(4.0, overhead=0.5, ar_overhead=0.0) == pytest.approx(8.0)
    assert break_even(4.0, overhead=0.2, ar_overhead=0.2) == pytest.approx(4.0)  # equal overheads cancel
    # a run at exactly break-even tokens/step is predicted to match AR
    t = run("lookahead", [16] * 4, [4] * 4, step_s=0.02, fwd_s=0.016)  # overhead 20%
    acc = account(t, curve(ar_overhead=0.1))
    assert acc.decode_speedup == pytest.approx(1.0 * 4 / break_even(acc.step_cost, acc.overhead, acc.ar_overhead))
    assert acc.decode_speedup == pytest.approx(4 / 4.0 * 0.8 / 0.9)


def test_reasons_name_the_sources():
    r = reasons(jacobi_trace())  # 1 fast-forward of 5 tokens
    assert r[0].startswith("20% of the output tokens were Jacobi guesses that had converged before their turn")
    r = reasons(lookahead_trace())  # 2 tokens from a window n-gram
    assert r[0].startswith("40% of the output tokens came from n-grams the lookahead window guessed")
    tr = Trace.load(str(Path(__file__).resolve().parents[1] / "assets" / "example_tr.json"))
    share = sum(o == "recycled" for s in tr.steps for o in s.origins) / len(tr.output_ids)
    assert share > 0 and any(x.startswith(f"{share:.0%} of the output tokens came from Token Recycling's matrix") for x in reasons(tr))


def test_tune_ranks_by_predicted_speedup_on_a_hand_made_curve():
    # two prompts; A: 4-token steps committing 2 (2 / 2.0 = 1.0x); B: 16-token steps committing 5
    # (5 / 4.0 = 1.25x); C: 2-token steps committing 1.5 on average (1.5 / 1.5 = 1.0x ... but with
    # more overhead 0.9x). Order: B, A, C.
    rows = []
    for pid in ("p1", "p2"):
        rows.append({"id": pid, "category": "qa", "method": "ar", "params": {}, "fed": [1] * 20,
                     "output_ids": list(range(21)), "seconds": 0.2, "prefill_seconds": 0.0, "forward_seconds": 0.2})
        for setting, fed, n_steps, step_s, fwd_s in (("A", 4, 10, 0.02, 0.02), ("B", 16, 4, 0.04, 0.04),
                                                      ("C", 2, 13, 0.0167, 0.015)):
            rows.append({"id": pid, "category": "qa", "method": "lookahead", "setting": setting, "params": {"W": 1, "N": 2, "G": 1},
                         "fed": [fed] * n_steps, "output_ids": list(range(21)), "seconds": step_s * n_steps,
                         "prefill_seconds": 0.0, "forward_seconds": fwd_s * n_steps})
    ranked = rank(rows, curve())
    assert [r["setting"] for r in ranked] == ["B", "A", "C"]
    assert ranked[0]["predicted"] == pytest.approx(5 / 4.0)
    assert ranked[0]["measured"] == pytest.approx(0.2 / 0.16)
    assert recommend(ranked)["lookahead"]["setting"] == "B"


def test_what_if_replays_the_lookahead_trace():
    t = lookahead_trace()  # W=2 N=3 G=2; step 1 accepts 2 candidate tokens
    rows = what_if(t, curve(ar_overhead=0.0))
    this = next(r for r in rows if r["this run"])
    assert this["tokens/step"] == pytest.approx(t.tokens_per_step)
    assert this["fed per step"] == pytest.approx(sum(s.fed for s in t.steps) / 2)
    n2 = next(r for r in rows if r["N"] == 2 and r["G"] == 2)  # 2-grams: at most one token per candidate
    assert n2["tokens/step"] == pytest.approx((1 + 2) / 2)
    json.dumps(rows)  # plain data for the page


def test_measure_curve_on_a_tiny_model_and_its_cache(tmp_path, monkeypatch):
    from decoding.perf.measure import load_or_measure, measure_curve
    from tiny import tiny_lm

    monkeypatch.setenv("PDL_CACHE", str(tmp_path))
    lm = tiny_lm("llama", 0)
    said = []
    c = measure_curve(lm, ks=(4, 2), context=16, repeats=2, ar_tokens=8, progress=lambda f, m: said.append(f))
    assert (c.ks, c.context, c.repeats, c.model_id) == ([1, 2, 4], 16, 2, lm.model_id)
    assert len(c.seconds) == 3 and all(s > 0 for s in c.seconds)
    assert c.ar_overhead is not None and 0 <= c.ar_overhead < 1
    assert said == sorted(said) and said[-1] == 1.0 and len(said) == 3 * 3 + 2  # 3 rounds of 3 forwards, AR, done
    assert CostCurve.from_dict(json.loads(json.dumps(c.to_dict()))) == c
    first = load_or_measure(lm, ks=(1, 2), context=8, repeats=1, ar_tokens=0)
    assert first.ks == [1, 2] and first.ar_overhead is None
    again = load_or_measure(lm, progress=lambda f, m: pytest.fail("measured again"))
    assert again == first  # from the cache folder


def test_a_curve_keeps_its_ratios_when_the_machine_slows_down_midway(monkeypatch):
    """Each k is timed right after a 1-token forward and the curve keeps the median of those
    ratios: a machine that runs 3x slower for the second half of the measurement (a neighbour's
    burst) bends no point of the curve; medians of raw times would (the k measured in the slow half
    dearer, the k=1 point a mix)."""
    from decoding.perf import measure, timing
    from tiny import tiny_lm

    lm = tiny_lm("llama", 0)
    clock = {"t": 0.0, "calls": 0}
    total = 1 + 7 * (2 * 4 - 1)  # prefill, then 7 rounds of k=1 alone and 3 pairs

    def cost(module, args, kwargs):
        k = kwargs["input_ids"].shape[1]
        clock["calls"] += 1
        clock["t"] += (0.010 + 0.002 * k) * (3.0 if clock["calls"] > total // 2 else 1.0)

    h = lm.model.register_forward_pre_hook(cost, with_kwargs=True)
    monkeypatch.setattr(timing.time, "perf_counter", lambda: clock["t"])
    try:
        c = measure.measure_curve(lm, ks=(2, 4, 8), context=8, repeats=6, ar_tokens=0)
    finally:
        h.remove()
    want = [(0.010 + 0.002 * k) / 0.012 for k in (1, 2, 4, 8)]
    assert c.relative() == pytest.approx(want, rel=1e-9)


def _shipped_for(lm, folder, cpu):
    """A shipped-curve file for ``lm`` measured on ``cpu``: steep where a real one would be flat."""
    c = CostCurve(lm.model_id, str(lm.device), str(lm.dtype), 2, 16, [1, 2, 4, 8], [0.01, 0.05, 0.1, 0.2], cpu=cpu)
    path = folder / "cost_curve_cpu-test.json"
    c.save(path)
    return path


@pytest.mark.parametrize("quiet", [True, False])
def test_a_shipped_curve_from_another_cpu_is_measured_over_at_first_use(tmp_path, monkeypatch, quiet):
    """Issue 21: a curve shipped from another CPU model is not the budgets' prior; a short curve
    measured here is, kept in the cache folder when the machine was quiet, else for this process."""
    import decoding.kernels as kernels
    import decoding.perf.costs as costs
    import decoding.perf.timing as timing
    from decoding.budget import interpolate
    from tiny import tiny_lm

    monkeypatch.setenv("PDL_CACHE", str(tmp_path / "cache"))
    monkeypatch.delenv("PDL_MEASURE_CURVE", raising=False)
    monkeypatch.setattr(costs, "_MEASURED_HERE", {})
    monkeypatch.setattr(kernels, "_quiet", lambda: quiet)
    lm = tiny_lm("llama", 0)
    monkeypatch.setattr(costs, "SHIPPED_CURVES", [_shipped_for(lm, tmp_path, "Some Other CPU 9000")])
    calls = []

    def measured(model, ks, context, repeats, say=None, share=1.0):  # timings of a tiny model are noise
        calls.append((tuple(ks), repeats))
        return context, list(ks), [0.01 * (1 + 0.1 * k) for k in ks]

    monkeypatch.setattr(timing, "forward_seconds", measured)
    first = costs.step_costs_for(lm)
    assert calls == [(costs.SHORT_KS, costs.FIRST_USE_REPEATS)]
    assert "at first use" in first.source and "another CPU's" in first.source
    assert first.prior(2) == pytest.approx(1.2 / 1.1)  # the measured curve, not the shipped one's 5x
    kept = costs.cached_curve(lm.model_id, "cpu", "float32", None, "stock")
    if quiet:
        assert kept is not None and kept.ks == list(costs.SHORT_KS) and kept.cpu
        assert first.prior(3) == pytest.approx(interpolate(kept.ks, kept.relative())(3))
    else:
        assert not (tmp_path / "cache" / "costs").exists()  # under load: not kept
    again = costs.step_costs_for(lm)
    assert len(calls) == 1  # from the cache folder, or this process's first-use curve
    assert again.prior(3) == pytest.approx(first.prior(3))


def test_a_shipped_curve_of_this_cpu_or_a_refusal_to_measure_keeps_the_shipped_curve(tmp_path, monkeypatch):
    import decoding.perf.costs as costs
    import decoding.perf.timing as timing
    from decoding.paths import cpu_name
    from tiny import tiny_lm

    monkeypatch.setenv("PDL_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(costs, "_MEASURED_HERE", {})
    monkeypatch.setattr(timing, "forward_seconds", lambda *a, **kw: pytest.fail("measured"))
    lm = tiny_lm("llama", 0)
    monkeypatch.setattr(costs, "SHIPPED_CURVES", [_shipped_for(lm, tmp_path, cpu_name())])
    here = costs.step_costs_for(lm)
    assert "shipped (cost_curve_cpu-test.json, this CPU model)" in here.source and here.prior(2) == pytest.approx(5.0)
    monkeypatch.setattr(costs, "SHIPPED_CURVES", [_shipped_for(lm, tmp_path, "Some Other CPU 9000")])
    monkeypatch.setenv("PDL_MEASURE_CURVE", "0")
    told = costs.step_costs_for(lm)
    assert "measured on Some Other CPU 9000" in told.source and told.prior(4) == pytest.approx(10.0)
    monkeypatch.delenv("PDL_MEASURE_CURVE")
    assert "measured on Some Other CPU 9000" in costs.step_costs_for(lm, measure=False).source

    def busy(*a, **kw):
        raise RuntimeError("the compiled step's cache is busy or too short for this curve")

    monkeypatch.setattr(timing, "forward_seconds", busy)  # a concurrent run holds the cache: the decode goes on
    held = costs.step_costs_for(lm)
    assert "not measured here: the compiled step's cache is busy" in held.source and held.prior(4) == pytest.approx(10.0)
