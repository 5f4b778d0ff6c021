"""Explain's prediction on shipped GPU curves (issue 14 item 4), on a synthetic curve file: no GPU
curve has been measured yet (no GPU lent)."""

import json

import pytest

from decoding.perf.costs import CURVE_VERSION
from decoding.perf.shipped import predicted_speedup, prediction_lines, shipped_curves
from viz_traces import ar_trace, lookahead_trace


def synthetic(folder, name="cost_curve_h200_llama-7b.json"):
    d = {"model_id": "random llama-7b", "device": "cuda", "dtype": "bfloat16", "threads": 1, "context": 512,
         "ks": [1, 2, 4, 8, 16], "seconds": [0.010, 0.010, 0.0102, 0.0105, 0.011], "version": CURVE_VERSION,
         "measured_at": "2026-12-01 10:00 UTC", "gpu": "NVIDIA H200", "config": "llama-7b"}
    (folder / name).write_text(json.dumps(d))
    return d


def test_shipped_curves_are_found_and_bad_ones_skipped(tmp_path):
    synthetic(tmp_path)
    (tmp_path / "cost_curve_cpu.json").write_text("{}")  # the CPU curve: no config part, not a shipped GPU curve
    (tmp_path / "cost_curve_h100_broken.json").write_text("not json")
    (found,) = shipped_curves(tmp_path)
    assert (found.device, found.config, found.gpu) == ("h200", "llama-7b", "NVIDIA H200")


def test_prediction_is_tokens_per_step_over_the_step_cost(tmp_path):
    synthetic(tmp_path)
    (s,) = shipped_curves(tmp_path)
    assert predicted_speedup([2, 4], 2.0, s.curve) == pytest.approx(2.0 / ((1.0 + 1.02) / 2))
    t = lookahead_trace()
    (line,) = prediction_lines(t, [s])
    fed = [x.fed for x in t.steps]
    x = t.tokens_per_step / (sum(s.curve.relative_cost(k) for k in fed) / len(fed))
    assert f"on NVIDIA H200 with a llama-7b model (bfloat16): predicted {x:.2f}× AR" in line
    assert "a prediction from a measured step-cost curve" in line
    assert prediction_lines(ar_trace(), []) == []


def test_explain_page_shows_the_prediction_from_a_shipped_curve(monkeypatch, tmp_path):
    from pathlib import Path

    from streamlit.testing.v1 import AppTest

    import decoding.perf.shipped as shipped

    synthetic(tmp_path)
    real = shipped.shipped_curves
    monkeypatch.setattr(shipped, "shipped_curves", lambda folder: real(tmp_path))
    at = AppTest.from_file(str(Path(__file__).resolve().parents[1] / "app.py"), default_timeout=120).run()
    at.switch_page("app_pages/explain.py").run()
    assert not at.exception
    infos = [i.value for i in at.info if "predicted" in i.value]
    assert infos and "on NVIDIA H200 with a llama-7b model" in infos[0] and "a prediction from a measured step-cost curve" in infos[0]
    monkeypatch.setattr(shipped, "shipped_curves", real)  # the repository ships none yet: nothing claimed
    at.run()
    assert not [i.value for i in at.info if "NVIDIA H200" in i.value]


def test_the_repository_ships_no_gpu_curve_and_its_cpu_curves_are_not_taken_for_one():
    from pathlib import Path

    assets = Path(__file__).resolve().parents[1] / "assets"
    assert (assets / "cost_curve_cpu-stock.json").is_file() and shipped_curves(assets) == []
