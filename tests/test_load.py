"""Issue 23, item 6: Explain tells a busy machine apart (decoding/perf/load.py), says why prediction and
measurement part, and every page that shows a run names its kernel."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest

from decoding.perf.account import account
from decoding.perf.costs import CostCurve
from decoding.perf.load import MIN_STEPS, machine_load, why_they_part
from decoding.trace import Step, Trace

ROOT = Path(__file__).resolve().parent.parent
CURVE = CostCurve.load(str(ROOT / "assets" / "cost_curve_cpu.json"))


def example(method: str) -> Trace:
    return Trace.load(str(ROOT / "assets" / f"example_{method}.json"))


def busy_copy(t: Trace, slow: float = 2.5, every: int = 4, outlier: float = 3.0) -> Trace:
    """``t`` as if decoded on a busy machine: every forward ``slow`` times slower, every
    ``every``-th one ``outlier`` times more (the cores taken away mid-forward)."""
    b = copy.deepcopy(t)
    for i, s in enumerate(b.steps):
        f = slow * (outlier if i % every == 0 else 1.0)
        s.seconds += s.forward_seconds * (f - 1)
        s.forward_seconds *= f
    b.seconds = b.prefill_seconds + sum(s.seconds for s in b.steps)
    return b


@pytest.mark.parametrize("method", ["ar", "jacobi", "lookahead", "pld", "tr", "lookahead_auto"])
def test_the_shipped_examples_ran_on_a_quiet_machine(method):
    r = machine_load(example(method), CURVE)
    assert not r.busy and r.signs == []
    assert 0.8 < r.slowdown < 1.1 and r.spread < 1.3 and r.outliers == 0
    assert "quiet machine" in r.sentence()


def test_a_busy_run_is_told_apart_with_its_signs():
    t = busy_copy(example("lookahead"))
    r = machine_load(t, CURVE)
    assert r.busy and r.slowdown > 2.0 and r.outliers > 0.1 * r.steps
    s = r.sentence()
    assert s.startswith("The machine was busy") and "step-cost curve measured" in s and "over twice the median" in s
    # without a curve: each step against the steps of its own size (uneven times, outliers)
    r = machine_load(t)
    assert r.busy and r.slowdown is None and "over twice the median" in r.sentence()
    # uniformly slower (no outliers) is only seen against the curve
    even = busy_copy(example("lookahead"), slow=2.5, every=10**9)
    assert machine_load(even, CURVE).busy and not machine_load(even).busy


def test_the_worked_example_of_the_module_docstring():
    """24 AR steps, 20 at the curve's c(1) and 4 at 0.1 s: slowdown 1.0, spread 3.1, 4 outliers."""
    c1 = CURVE.seconds[0]
    t = Trace("ar", {}, "m", "cpu", "float32", [1], output_ids=list(range(25)),
              steps=[Step(i, 1, [i], 0.1 if i % 6 == 5 else c1, 0.1 if i % 6 == 5 else c1) for i in range(24)])
    r = machine_load(t, CURVE)
    assert r.slowdown == pytest.approx(1.0) and r.spread == pytest.approx(0.1 / c1) and r.outliers == 4
    assert r.busy and "4 of 24 steps took over twice the median" in r.sentence()
    few = Trace("ar", {}, "m", "cpu", "float32", [1], steps=t.steps[:MIN_STEPS - 1])
    assert not machine_load(few, CURVE).busy and "too few" in machine_load(few, CURVE).sentence()


def test_the_warning_says_why_prediction_and_measurement_part():
    """Under load Explain said 'disagree by 503%' with no hint that the machine was busy."""
    ar, la = example("ar"), example("lookahead")
    busy = busy_copy(la)
    acc = account(busy, CURVE, ar)
    assert acc.disagrees
    plain = acc.warning()
    assert "busy during this run" not in plain
    why = why_they_part(machine_load(busy, CURVE), machine_load(ar, CURVE))
    assert "busy during this run" in why and "the AR run" not in why
    w = acc.warning(why)
    assert "busy during this run" in w and "step-cost curve, measured on a quiet machine" in w
    assert why_they_part(machine_load(la, CURVE), machine_load(ar, CURVE)) == ""


# ---- the pages ------------------------------------------------------------------------------------------
st_testing = pytest.importorskip("streamlit.testing.v1")


def upload(at, t: Trace, name: str) -> None:
    at.switch_page("app_pages/traces.py").run()
    at.file_uploader(key="trace_upload").upload(name, t.to_json().encode(), "application/json").run()
    assert not at.exception and not at.error


def test_explain_notes_a_busy_machine_and_a_kernel_mismatch():
    at = st_testing.AppTest.from_file(str(ROOT / "app.py"), default_timeout=90).run()
    at.switch_page("app_pages/explain.py").run()
    assert not at.exception
    assert any("Machine load" in c.value and "quiet machine" in c.value for c in at.caption)
    assert not any("Machine load" in w.value for w in at.warning)
    assert any("This machine now: load average" in c.value for c in at.caption)
    assert any("skinny kernel" in c.value for c in at.caption)  # the run's kernel in the caption
    upload(at, busy_copy(example("lookahead")), "busy.json")
    stock_ar = example("ar")
    stock_ar.kernel = "stock"
    upload(at, stock_ar, "ar.json")
    at.switch_page("app_pages/explain.py").run()
    assert not at.exception
    sb = at.selectbox(key="explain_trace")
    sb.select(next(o for o in sb.options if "busy.json" in o)).run()
    warnings = " ".join(w.value for w in at.warning)
    assert "Machine load" in warnings and "The machine was busy" in warnings
    assert "busy during this run" in warnings  # why prediction and measurement part
    assert "the stock kernel" in warnings and "compares two kernels" in warnings


@pytest.mark.parametrize("page", ["app_pages/jacobi.py", "app_pages/lookahead.py", "app_pages/compare.py",
                                  "app_pages/lecture.py", "app_pages/recycling.py", "app_pages/cllm.py"])
def test_every_page_that_shows_a_run_names_its_kernel(page):
    at = st_testing.AppTest.from_file(str(ROOT / "app.py"), default_timeout=90).run()
    if page != "app_pages/jacobi.py":
        at.switch_page(page).run()
    assert not at.exception
    assert any("kernel" in c.value for c in at.caption), page
    if page == "app_pages/compare.py":
        rows = at.dataframe[0].value
        assert "kernel" in rows.columns and set(rows["kernel"]) == {"skinny"}
