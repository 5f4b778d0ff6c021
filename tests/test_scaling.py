"""The scaling-law grid (issue 11, figure 5): the script's grid on a tiny model, the figures' data."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from viz import scaling

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "scripts"))


def hand_grid() -> dict:
    rows = [{"W": W, "N": N, "G": W, "prompts": 2, "steps": 10, "tokens_per_step": 1 + 0.1 * W * (N - 1),
             "fed_per_step": 1 + (N - 1) * W + W * (N - 1)} for N in (2, 3) for W in (1, 2, 4)]
    return {"model": "m", "parameters": 1000, "rows": rows}


def test_figures_draw_the_grid():
    g = hand_grid()
    fig = scaling.by_window_figure(g)
    assert [t.name for t in fig.data][:2] == ["N = 2", "N = 3"]
    assert list(fig.data[1].x) == [1, 2, 4] and list(fig.data[1].y) == pytest.approx([1.2, 1.4, 1.8])
    assert fig.layout.xaxis.type == "log"
    fl = scaling.by_flops_figure(g)
    assert list(fl.data[0].x) == [scaling.flops(g, r["fed_per_step"]) for r in g["rows"][:3]]
    assert fl.data[0].x[0] == 3 * 2 * 1000  # W = 1, N = 2: 3 tokens fed
    assert "No scaling grid" in scaling.by_window_figure(None).layout.annotations[0].text


def test_flops_figure_puts_the_step_cost_beside_and_says_where_it_pays():
    from decoding.perf.costs import CostCurve
    g = hand_grid()
    curve = CostCurve("m", "cpu", "float32", 1, 256, [1, 4, 16], [1.0, 1.2, 2.0])
    fig = scaling.by_flops_figure(g, curve)
    cost = [t for t in fig.data if t.yaxis == "y2"]
    assert len(cost) == 2 and list(cost[0].y) == pytest.approx([curve.relative_cost(r["fed_per_step"]) for r in g["rows"][:3]])
    words = scaling.pays_sentence(g, curve)
    pay = sum(r["tokens_per_step"] > curve.relative_cost(r["fed_per_step"]) for r in g["rows"])
    assert words.startswith(f"{pay} of 6 settings")


def test_scaling_grid_script_on_a_tiny_model():
    import scaling_grid
    from tiny import tiny_lm

    lm = tiny_lm("llama", 0)
    prompts = [[7, 8, 9, 10] * 4, [3, 4, 5] * 5]
    rows = scaling_grid.run_grid(lm, prompts, [1, 2], [2, 3], 12, progress=lambda m: None)
    assert [(r["N"], r["W"], r["G"]) for r in rows] == [(2, 1, 1), (2, 2, 2), (3, 1, 1), (3, 2, 2)]
    for r in rows:
        assert r["prompts"] == 2 and r["tokens_per_step"] >= 1.0
        # steps after the window fills feed 1 + (N-1) W + up to G (N-1) tokens
        assert 1 <= r["fed_per_step"] <= 1 + (r["N"] - 1) * r["W"] + r["G"] * (r["N"] - 1)


def test_the_law_is_fitted_and_stated():
    """Issue 23, item 7: the scaling law is stated, not only drawn: tokens per step linear in log W
    per N and in log FLOPs overall, fitted by least squares (exact on a grid made linear), drawn
    dashed, said in words with the paper's operating point beside ours."""
    import math
    assert scaling.fit([0, 1, 2], [1, 3, 5]) == pytest.approx((1, 2, 1))
    a, b, r2 = scaling.fit([0, 1, 2, 3], [1.0, 1.2, 1.1, 1.5])
    assert 0 < r2 < 1 and b == pytest.approx(0.14)
    with pytest.raises(ValueError):
        scaling.fit([1, 1], [1, 2])
    rows = [{"W": W, "N": N, "G": W, "tokens_per_step": 1 + 0.05 * N * math.log2(W), "fed_per_step": 1 + 2 * (N - 1) * W}
            for N in (2, 3) for W in (1, 2, 4, 8)]
    g = {"model": "m", "parameters": 1000, "rows": rows}
    fits = scaling.window_fits(g)
    assert fits[2] == pytest.approx((1, 0.1, 1)) and fits[3] == pytest.approx((1, 0.15, 1))
    fig = scaling.by_window_figure(g)
    dashed = [t for t in fig.data if t.line.dash == "dash"]
    assert len(dashed) == 2 and list(dashed[1].y) == pytest.approx([1, 1.15, 1.3, 1.45])
    words = scaling.law_sentence(g)
    assert "+0.100 tokens per step at N = 2 (R² 1.00)" in words and "+0.150 tokens per step at N = 3" in words and "linear in log FLOPs" in words
    a, b, r2 = scaling.flops_fit(g)
    assert f"+{b:.2f} tokens per step for every 10× the FLOPs" in words and 0 < r2 <= 1
    fl = scaling.by_flops_figure(g)
    paper = next(t for t in fl.data if t.name.startswith("the paper"))
    assert list(paper.y) == [1.8, 2.3] and paper.x[0] == 2 * 6.74e9 * (1 + 4 * 15 + 15 * 4)
    assert scaling.law_sentence(None) == "" and scaling.paper_fed(5, 4, 5) == 31


def test_the_shipped_grid_states_its_law():
    import json
    g = json.loads((ROOT / "assets" / "scaling_cpu.json").read_text())
    words = scaling.law_sentence(g)
    a, b, r2 = scaling.flops_fit(g)
    assert b > 0 and r2 > 0.5  # the shipped grid does follow the law: it rises with log FLOPs
    assert all(fb > 0 for _, fb, _ in scaling.window_fits(g).values()) and "each doubling of W adds" in words
