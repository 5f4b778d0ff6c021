"""Explain figures: the step-cost curve of the hardware, the speedup account of a run, and the
predicted effect of other settings.

Inputs are plain data: a ``decoding.costs.CostCurve`` (ks, seconds), an ``Account`` (numbers),
traces, and rows of ``decoding.tune``. Nothing here runs a model.
"""

from __future__ import annotations

from collections import Counter

import plotly.graph_objects as go

from viz.style import (BLACK, BLUE, GREEN, GREY, ORANGE, PURPLE, SKY, VERMILLION, base_layout, empty_figure, esc)


def cost_curve_figure(curve, fed: list[int] | None = None, label: str = "") -> go.Figure:
    """Relative cost c(k)/c(1) of one forward over k new tokens (log x), measured points joined;
    optionally the steps of a run at their fed sizes (marker area ~ how many steps fed that many).

    Trace 0 is the curve; trace 1 (if ``fed``) the run's steps; the dotted diagonal c(k) = k is what
    k separate one-token forwards would cost.
    """
    if curve is None or not curve.ks:
        return empty_figure("No step-cost curve for this model and device yet.")
    rel = curve.relative()
    fig = go.Figure()
    fig.add_trace(go.Scatter(
        x=curve.ks, y=rel, mode="lines+markers", name="one forward over k new tokens", line=dict(color=BLUE, width=3),
        marker=dict(size=8, color=BLUE),
        customdata=[s * 1000 for s in curve.seconds],
        hovertemplate="k = %{x}<br>%{y:.2f}× a one-token forward<br>%{customdata:.1f} ms<extra></extra>"))
    if fed:
        c = Counter(fed)
        ks = sorted(c)
        size = [8 + 22 * (c[k] / max(c.values())) ** 0.5 for k in ks]
        fig.add_trace(go.Scatter(
            x=ks, y=[curve.relative_cost(k) for k in ks], mode="markers", name=esc(label or "this run's steps"),
            marker=dict(size=size, color=ORANGE, line=dict(color=BLACK, width=1), symbol="diamond"),
            customdata=[c[k] for k in ks],
            hovertemplate="%{customdata} steps fed %{x} tokens<br>each cost %{y:.2f}× a one-token forward<extra></extra>"))
    top = max(curve.ks)
    fig.add_trace(go.Scatter(x=[1, top], y=[1, top], mode="lines", name="k one-token forwards (no parallelism)",
                             line=dict(color=GREY, dash="dot", width=2), hoverinfo="skip"))
    base_layout(fig, esc(f"Step cost: {curve.regime}"), 420)
    fig.update_xaxes(type="log", title_text="tokens fed in one forward (k, log scale)", tickvals=curve.ks)
    fig.update_yaxes(type="log", title_text="× a one-token forward (log)",
                     range=[_log10(min(rel) * 0.8), _log10(max(rel + [2.0]) * 1.8)])
    return fig


def _log10(x: float) -> float:
    import math

    return math.log10(max(x, 1e-9))


ACCOUNT_STAGES = [
    ("AR", BLACK, "AR: one token per one-token forward"),
    ("× tokens/step", GREEN, "each step commits this many tokens"),
    ("÷ step cost", VERMILLION, "each step costs this many one-token forwards"),
    ("× overhead", PURPLE, "time outside the forward, against AR's"),
    ("prefill", GREY, "the prefill is the same for both and dilutes the gain"),
    ("predicted", BLUE, "predicted speedup"),
    ("measured", ORANGE, "measured speedup (tokens/s over AR's)"),
]


def account_values(acc) -> list[tuple[str, float]]:
    """The running speedup after each factor of the account: AR 1.0, x tokens/step, / step cost,
    x overhead factor (= decode speedup), with the prefill (= predicted), then measured."""
    v1 = acc.tokens_per_step
    v2 = v1 / acc.step_cost if acc.step_cost else 0.0
    v3 = acc.decode_speedup
    out = [("AR", 1.0), ("× tokens/step", v1), ("÷ step cost", v2), ("× overhead", v3), ("prefill", acc.predicted),
           ("predicted", acc.predicted)]
    if acc.measured is not None:
        out.append(("measured", acc.measured))
    return out


def account_figure(acc, title: str = "") -> go.Figure:
    """The account as bars of the running speedup, factor by factor (a multiplicative waterfall):
    one bar per stage of ``account_values``, a dashed line at 1 (AR's speed)."""
    if acc is None:
        return empty_figure("No account: this trace has no steps.")
    vals = account_values(acc)
    colours = {s: c for s, c, _ in ACCOUNT_STAGES}
    meaning = {s: m for s, _, m in ACCOUNT_STAGES}
    factor = {"× tokens/step": f"× {acc.tokens_per_step:.2f}", "÷ step cost": f"÷ {acc.step_cost:.2f}",
              "× overhead": f"× {acc.overhead_factor:.2f}", "prefill": f"prefill {acc.prefill_share:.0%} of AR time"}
    fig = go.Figure(go.Bar(
        x=[s for s, _ in vals], y=[v for _, v in vals], marker_color=[colours[s] for s, _ in vals],
        marker_line=dict(color=BLACK, width=1),
        text=[f"{v:.2f}×" for _, v in vals], textposition="outside", textfont=dict(size=14),
        customdata=[esc(f"{meaning[s]}{' · ' + factor[s] if s in factor else ''}") for s, _ in vals],
        hovertemplate="%{x}: %{y:.3f}×<br>%{customdata}<extra></extra>", showlegend=False))
    fig.add_hline(y=1.0, line=dict(color=BLACK, dash="dash", width=1), annotation_text="AR speed",
                  annotation_position="top right")
    base_layout(fig, esc(title or "Speedup over AR, factor by factor"), 400)
    fig.update_yaxes(title_text="speedup over AR (running product)", rangemode="tozero",
                     range=[0, max(v for _, v in vals) * 1.25])
    return fig


def what_if_figure(rows: list[dict], title: str = "") -> go.Figure:
    """Predicted speedup per setting (``decoding.tune.what_if`` or ``rank`` rows), this run's
    setting outlined; the bar text gives tokens/step and step cost."""
    if not rows:
        return empty_figure("No settings to compare.")
    key = "predicted speedup" if "predicted speedup" in rows[0] else "predicted"
    rows = sorted(rows, key=lambda r: -(r.get(key) or 0))
    this = [bool(r.get("this run") or r.get("default")) for r in rows]
    fig = go.Figure(go.Bar(
        x=[esc(r["setting"].split(" ", 1)[-1]) for r in rows], y=[r.get(key) or 0 for r in rows],
        marker_color=[BLUE if t else SKY for t in this], marker_line=dict(color=[BLACK if t else GREY for t in this],
                                                                          width=[3 if t else 1 for t in this]),
        text=[f"{r.get(key) or 0:.2f}×" for r in rows], textposition="outside",
        customdata=[[r.get("tokens/step", r.get("tokens_per_step", 0)), r.get("step cost", r.get("step_cost", 0))] for r in rows],
        hovertemplate="%{x}<br>predicted %{y:.2f}×<br>%{customdata[0]:.2f} tokens/step, step cost %{customdata[1]:.2f}<extra></extra>",
        showlegend=False))
    fig.add_hline(y=1.0, line=dict(color=BLACK, dash="dash", width=1), annotation_text="AR speed",
                  annotation_position="top right")
    base_layout(fig, esc(title or "Predicted speedup of other settings (dark: this run's)"), 380)
    fig.update_yaxes(title_text="predicted speedup over AR", rangemode="tozero",
                     range=[0, max((r.get(key) or 0) for r in rows) * 1.25 + 0.05])
    return fig
