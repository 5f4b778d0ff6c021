"""The lookahead paper's scaling law on the lab's model: tokens per step against W for each N, and
against the FLOPs fed per step (log scale) with the hardware's measured step cost beside it; the
law stated (``fit``: least squares of tokens per step on the log of W or of the FLOPs, drawn dashed
and said in words) and the paper's published operating point beside ours.

Input: the grid of ``scripts/scaling_grid.py`` ({"parameters", "rows": [{W, N, G, tokens_per_step,
fed_per_step}], ...}) and optionally a ``decoding.perf.costs.CostCurve``. Nothing here runs a model.
"""

from __future__ import annotations

import plotly.graph_objects as go

import math

from viz.style import BLACK, BLUE, GREEN, GREY, ORANGE, PURPLE, SKY, VERMILLION, base_layout, empty_figure, esc

N_COLOURS = [SKY, GREEN, ORANGE, VERMILLION, PURPLE, BLUE]


def series(grid: dict) -> dict[int, list[dict]]:
    """N -> its rows, by W."""
    out: dict[int, list[dict]] = {}
    for r in sorted(grid.get("rows", []), key=lambda r: (r["N"], r["W"])):
        out.setdefault(r["N"], []).append(r)
    return out


# The lookahead paper's published operating point (Fu et al., ICML 2024): LLaMA-2-7B-chat, W = 15, N = 5,
# G = 15 on an A100, where a step's cost is about flat, so these speedups are close to the compression.
PAPER = {"model": "LLaMA-2-7B-chat (the paper)", "parameters": 6.74e9, "W": 15, "N": 5, "G": 15,
         "points": [("MT-Bench", 1.8), ("HumanEval", 2.3)]}


def fit(xs: list[float], ys: list[float]) -> tuple[float, float, float]:
    """Least squares y = a + b x: (a, b, R²); R² is 1 for a perfect line (0 when y does not vary)."""
    n = len(xs)
    if n < 2:
        raise ValueError("a line needs two points")
    mx, my = sum(xs) / n, sum(ys) / n
    sxx = sum((x - mx) ** 2 for x in xs)
    if sxx == 0:
        raise ValueError("the points share one x")
    b = sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sxx
    a = my - b * mx
    ss = sum((y - my) ** 2 for y in ys)
    res = sum((y - a - b * x) ** 2 for x, y in zip(xs, ys))
    return a, b, (1 - res / ss) if ss > 0 else 0.0


def window_fits(grid: dict) -> dict[int, tuple[float, float, float]]:
    """N -> (a, b, R²) of tokens per step = a + b log2 W (b: what each doubling of W adds)."""
    return {N: fit([math.log2(r["W"]) for r in rows], [r["tokens_per_step"] for r in rows])
            for N, rows in series(grid).items() if len({r["W"] for r in rows}) > 1}


def flops_fit(grid: dict) -> tuple[float, float, float]:
    """(a, b, R²) of tokens per step = a + b log10 FLOPs over every setting (b: per 10x the FLOPs)."""
    rows = grid["rows"]
    return fit([math.log10(flops(grid, r["fed_per_step"])) for r in rows], [r["tokens_per_step"] for r in rows])


def paper_fed(W: int = PAPER["W"], N: int = PAPER["N"], G: int = PAPER["G"]) -> int:
    """Tokens a full lookahead step feeds: the current token, (N-1) x W window, G x (N-1) candidates."""
    return 1 + (N - 1) * W + G * (N - 1)


def law_sentence(grid: dict | None) -> str:
    """The scaling law in words, from the fits: per doubling of W for each N, per 10x FLOPs overall."""
    if not grid or len(grid.get("rows", [])) < 2:
        return ""
    per_n = window_fits(grid)
    a, b, r2 = flops_fit(grid)
    doubling = ", ".join(f"{fb:+.3f} tokens per step at N = {N} (R² {fr2:.2f})" for N, (_, fb, fr2) in per_n.items())
    return (f"**The law, fitted to this grid**: tokens per step grows linearly in log W: each doubling of W adds "
            f"{doubling}. Against the FLOPs of a step, all settings together: tokens per step ≈ {a:.2f} + {b:.3f} × "
            f"log10 FLOPs (R² {r2:.2f}): **+{b:.2f} tokens per step for every 10× the FLOPs**, linear in log FLOPs "
            f"as the lookahead paper states. The paper's 7B model at W = {PAPER['W']}, N = {PAPER['N']}, "
            f"G = {PAPER['G']} ({paper_fed()} tokens fed, the cross marks) reached "
            + " and ".join(f"{v}x on {k}" for k, v in PAPER["points"])
            + " on an A100: a bigger model's window guesses converge more often, so its line sits higher.")


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
    fits = window_fits(grid)
    for i, (N, rows) in enumerate(series(grid).items()):
        if N in fits:
            a, b, r2 = fits[N]
            ws = [r["W"] for r in rows]
            fig.add_trace(go.Scatter(x=ws, y=[a + b * math.log2(w) for w in ws], mode="lines", showlegend=i == 0,
                                     name="fit: a + b log2 W", line=dict(color=N_COLOURS[i % len(N_COLOURS)], width=1.5, dash="dash"),
                                     hovertemplate=f"N = {N} fit: {a:.3f} + {b:.3f} log2 W (R² {r2:.2f})<extra></extra>"))
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
    a, b, r2 = flops_fit(grid)
    xs = sorted(flops(grid, r["fed_per_step"]) for r in grid["rows"])
    fig.add_trace(go.Scatter(x=[xs[0], xs[-1]], y=[a + b * math.log10(x) for x in (xs[0], xs[-1])], mode="lines",
                             name=f"fit: {a:.2f} + {b:.3f} log10 FLOPs (R² {r2:.2f})", line=dict(color=BLACK, width=2, dash="dash"),
                             hoverinfo="skip"))
    px = 2 * PAPER["parameters"] * paper_fed()
    fig.add_trace(go.Scatter(x=[px] * len(PAPER["points"]), y=[v for _, v in PAPER["points"]], mode="markers+text",
                             name=f"the paper: {PAPER['model']}, W = {PAPER['W']}, N = {PAPER['N']}, G = {PAPER['G']} "
                                  "(speedup on an A100 ≈ compression)",
                             text=[k for k, _ in PAPER["points"]], textposition="middle left",
                             marker=dict(symbol="x", size=12, color=BLACK),
                             hovertemplate="the paper (published): %{text} %{y}x at %{x:.2e} FLOPs<extra></extra>"))
    title = "Tokens per step against the FLOPs of a step (fed tokens × 2 × parameters)"
    if curve is not None:
        title += esc(f" · step cost: {curve.regime}")
    base_layout(fig, title, 420 + (120 if curve is not None else 0))  # the legend lists each N twice with a curve
    fig.update_xaxes(type="log", title_text="FLOPs per step (log scale)")
    fig.update_yaxes(title_text="tokens per step", rangemode="tozero")
    if curve is not None:
        top = max([r["tokens_per_step"] for r in grid["rows"]] + [curve.relative_cost(r["fed_per_step"]) for r in grid["rows"]]
                  + [v for _, v in PAPER["points"]])
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
