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
    assert [t.name for t in fig.data] == ["N = 2", "N = 3"]
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
