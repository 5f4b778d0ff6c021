"""The lookahead paper's scaling law on the lab's model: tokens per step against W for each N, and
against the FLOPs fed per step (log scale) with the hardware's measured step cost beside it.

Input: the grid of ``scripts/scaling_grid.py`` ({"parameters", "rows": [{W, N, G, tokens_per_step,
fed_per_step}], ...}) and optionally a ``decoding.perf.costs.CostCurve``. Nothing here runs a model.
"""

from __future__ import annotations

import plotly.graph_objects as go

from viz.style import BLUE, GREEN, GREY, ORANGE, PURPLE, SKY, VERMILLION, base_layout, empty_figure, esc

N_COLOURS = [SKY, GREEN, ORANGE, VERMILLION, PURPLE, BLUE]


def series(grid: dict) -> dict[int, list[dict]]:
    """N -> its rows, by W."""
    out: dict[int, list[dict]] = {}
    for r in sorted(grid.get("rows", []), key=lambda r: (r["N"], r["W"])):
        out.setdefault(r["N"], []).append(r)
    return out


def flops(grid: dict, fed: float) -> float:
    """Forward FLOPs of a step that feeds ``fed`` tokens: fed x 2 x parameters (the usual proxy)."""
    return fed * 2 * grid["parameters"]


def by_window_figure(grid: dict | None) -> go.Figure:
    """Tokens per step against W (log 2 axis), one line per N: the paper's 'compression grows with W'."""
    if not grid or not grid.get("rows"):
        return empty_figure("No scaling grid measured yet (scripts/scaling_grid.py).")
    fig = go.Figure()
    for i, (N, rows) in enumerate(series(grid).items()):
        fig.add_trace(go.Scatter(x=[r["W"] for r in rows], y=[r["tokens_per_step"] for r in rows], mode="lines+markers",
                                 name=f"N = {N}", line=dict(color=N_COLOURS[i % len(N_COLOURS)], width=3),
                                 hovertemplate=f"N = {N}, W = %{{x}}: %{{y:.3f}} tokens/step<extra></extra>"))
    base_layout(fig, esc(f"Tokens per step against the window width W (G = W, window-only pool) · {grid.get('model', '')}"), 380)
    fig.update_xaxes(type="log", title_text="W (window columns, log scale)", tickvals=sorted({r["W"] for r in grid["rows"]}))
    fig.update_yaxes(title_text="tokens per step (AR = 1)", rangemode="tozero")
    return fig


def by_flops_figure(grid: dict | None, curve=None) -> go.Figure:
    """Tokens per step against the FLOPs fed per step (log), one line per N; with a step-cost curve,
    its cost c(fed)/c(1) at the same points on the right axis (dotted): where tokens per step is above
    the step cost, the extra FLOPs pay on this hardware."""
    if not grid or not grid.get("rows"):
        return empty_figure("No scaling grid measured yet (scripts/scaling_grid.py).")
    fig = go.Figure()
    for i, (N, rows) in enumerate(series(grid).items()):
        colour = N_COLOURS[i % len(N_COLOURS)]
        fig.add_trace(go.Scatter(x=[flops(grid, r["fed_per_step"]) for r in rows], y=[r["tokens_per_step"] for r in rows],
                                 mode="lines+markers", name=f"N = {N}: tokens/step", line=dict(color=colour, width=3),
                                 customdata=[[r["W"], r["fed_per_step"]] for r in rows],
                                 hovertemplate=f"N = {N}, W = %{{customdata[0]}}: %{{customdata[1]:.0f}} tokens fed<br>"
                                               "%{x:.2e} FLOPs, %{y:.3f} tokens/step<extra></extra>"))
        if curve is not None:
            fig.add_trace(go.Scatter(x=[flops(grid, r["fed_per_step"]) for r in rows],
                                     y=[curve.relative_cost(r["fed_per_step"]) for r in rows], mode="lines+markers",
                                     name=f"N = {N}: step cost (× a one-token forward)", yaxis="y2",
                                     line=dict(color=colour, width=1.5, dash="dot"), marker=dict(symbol="x"),
                                     hovertemplate="step cost %{y:.2f}× a one-token forward<extra></extra>"))
    title = "Tokens per step against the FLOPs of a step (fed tokens × 2 × parameters)"
    if curve is not None:
        title += esc(f" · step cost: {curve.regime}")
    base_layout(fig, title, 420)
    fig.update_xaxes(type="log", title_text="FLOPs per step (log scale)")
    fig.update_yaxes(title_text="tokens per step", rangemode="tozero")
    if curve is not None:
        top = max([r["tokens_per_step"] for r in grid["rows"]] + [curve.relative_cost(r["fed_per_step"]) for r in grid["rows"]])
        fig.update_layout(yaxis=dict(range=[0, top * 1.1]),
                          yaxis2=dict(title_text="step cost (dotted)", overlaying="y", side="right", range=[0, top * 1.1],
                                      showgrid=False), margin=dict(r=70))
    return fig


def pays_sentence(grid: dict | None, curve) -> str:
    """Which settings commit more tokens per step than their step costs on this hardware."""
    if not grid or not grid.get("rows") or curve is None:
        return ""
    pay = [r for r in grid["rows"] if r["tokens_per_step"] > curve.relative_cost(r["fed_per_step"])]
    best = max(grid["rows"], key=lambda r: r["tokens_per_step"] / curve.relative_cost(r["fed_per_step"]))
    ratio = best["tokens_per_step"] / curve.relative_cost(best["fed_per_step"])
    return (f"{len(pay)} of {len(grid['rows'])} settings commit more tokens per step than a step costs here; the best "
            f"ratio is W = {best['W']}, N = {best['N']} ({best['tokens_per_step']:.2f} tokens/step for "
            f"{curve.relative_cost(best['fed_per_step']):.2f}× a one-token forward: {ratio:.2f}× AR before overheads).")
