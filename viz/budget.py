"""The cost-aware budget's decisions (``budget="auto"``): what each step fed, the tokens it expected
and the tokens it got, and how the run's estimates moved (decoding.records.BudgetRecord).

Plain data in, Plotly figures out; no model, no torch.
"""

from __future__ import annotations

import plotly.graph_objects as go
from plotly.subplots import make_subplots

from viz.style import BLACK, BLUE, GREEN, GREY, ORANGE, PURPLE, SKY, VERMILLION, base_layout, empty_figure, esc

SOURCE_COLOURS = [GREEN, SKY, PURPLE, ORANGE, VERMILLION, BLUE]


def budget_steps(trace) -> list:
    return [s for s in trace.steps if s.budget is not None]


def summary(trace) -> dict | None:
    """Counts for the page's sentences (None when the run had no budget records)."""
    steps = budget_steps(trace)
    if not steps:
        return None
    b = [s.budget for s in steps]
    n = len(b)
    return {
        "steps": n,
        "plain": sum(x.fed == 1 for x in b),  # steps that fed only the current token (AR steps)
        "window": sum(x.window for x in b),
        "mean_fed": sum(x.fed for x in b) / n,
        "expected": sum(x.expected for x in b) / n,
        "realized": sum(x.realized for x in b) / n,
        "calibration": b[-1].calibration,
        "acceptance": b[-1].acceptance,
    }


def sentence(trace) -> str:
    """One paragraph: what the controller did in this run (from ``summary``)."""
    s = summary(trace)
    if s is None:
        return ""
    win = f", fed the lookahead window in {s['window']}" if trace.method == "lookahead" else ""
    return (f"Budget **auto**: over {s['steps']} steps the controller fed {s['mean_fed']:.1f} tokens per step on "
            f"average{win}, and chose a plain AR step (nothing but the current token) {s['plain']} times. It expected "
            f"{s['expected']:.2f} tokens per step and got {s['realized']:.2f}. In this run a multi-token step cost "
            f"{s['calibration']:.2f}× what the prior cost curve said (its costs are calibrated from the run's own "
            "step times).")


def learnt_sources(steps) -> list[str]:
    """The sources whose estimate moved during the run (a guess of theirs was verified), or all of
    them if none did: a method with many sources (suffix: band x match length) would otherwise draw a
    flat line at the prior for every source it never fed."""
    sources = sorted({k for s in steps for k in s.budget.acceptance})
    moved = [k for k in sources if len({s.budget.acceptance.get(k) for s in steps}) > 1]
    return moved or sources


def decisions_figure(trace) -> go.Figure:
    """Top: tokens fed per step (bars) and expected vs committed tokens (lines). Bottom: the run's
    estimate that a first guess from each source is accepted, step by step (``learnt_sources``)."""
    steps = budget_steps(trace)
    if not steps:
        return empty_figure("This run has no budget records: it used the fixed budget (or recording was off).")
    x = [s.index for s in steps]
    fig = make_subplots(rows=2, cols=1, shared_xaxes=True, row_heights=[0.62, 0.38], vertical_spacing=0.08,
                        specs=[[{"secondary_y": True}], [{}]])
    fig.add_trace(go.Bar(x=x, y=[s.budget.fed for s in steps], name="tokens fed", marker_color=GREY, opacity=0.55,
                         customdata=[[s.budget.cost, "yes" if s.budget.window else "no"] for s in steps],
                         hovertemplate="step %{x}: fed %{y} tokens<br>cost %{customdata[0]:.2f}× an AR step"
                                       "<br>window fed: %{customdata[1]}<extra></extra>"), row=1, col=1, secondary_y=True)
    fig.add_trace(go.Scatter(x=x, y=[s.budget.expected for s in steps], name="expected tokens", mode="lines+markers",
                             line=dict(color=BLUE, width=2), marker=dict(size=5),
                             hovertemplate="step %{x}: expected %{y:.2f} tokens<extra></extra>"), row=1, col=1)
    fig.add_trace(go.Scatter(x=x, y=[s.budget.realized for s in steps], name="committed tokens", mode="markers",
                             marker=dict(color=BLACK, size=7, symbol="diamond"),
                             hovertemplate="step %{x}: committed %{y}<extra></extra>"), row=1, col=1)
    for i, src in enumerate(learnt_sources(steps)):
        fig.add_trace(go.Scatter(x=x, y=[s.budget.acceptance.get(src) for s in steps], name=esc(f"P(accept) {src}"),
                                 mode="lines", line=dict(color=SOURCE_COLOURS[i % len(SOURCE_COLOURS)], width=2),
                                 hovertemplate=esc(src) + ", step %{x}: %{y:.2f}<extra></extra>"), row=2, col=1)
    base_layout(fig, esc(f"Budget auto: what each step fed, expected and got · {trace.method}"), 560)
    fig.update_yaxes(title_text="tokens committed", rangemode="tozero", row=1, col=1, secondary_y=False)
    fig.update_yaxes(title_text="tokens fed", rangemode="tozero", row=1, col=1, secondary_y=True, showgrid=False)
    fig.update_yaxes(title_text="P(first guess accepted)", range=[0, 1], row=2, col=1)
    fig.update_xaxes(title_text="step", row=2, col=1)
    return fig


def options_figure(trace, step_index: int) -> go.Figure:
    """The choices one step weighed: expected tokens per unit of cost against tokens fed."""
    step = next((s for s in trace.steps if s.index == step_index and s.budget is not None), None)
    if step is None:
        return empty_figure(f"Step {step_index} has no budget record.")
    b = step.budget
    opts = sorted(b.options, key=lambda o: o[0])
    fig = go.Figure()
    fig.add_trace(go.Scatter(x=[o[0] for o in opts], y=[o[1] / o[2] for o in opts], mode="lines+markers",
                             name="weighed", line=dict(color=BLUE), customdata=[[o[1], o[2]] for o in opts],
                             hovertemplate="feed %{x}: expect %{customdata[0]:.2f} tokens for %{customdata[1]:.2f}× "
                                           "an AR step = %{y:.2f} per AR-step cost<extra></extra>"))
    fig.add_trace(go.Scatter(x=[b.fed], y=[b.expected / b.cost], mode="markers", name="chosen",
                             marker=dict(color=VERMILLION, size=14, symbol="star")))
    fig.add_hline(y=1.0, line=dict(color=GREY, dash="dot"), annotation_text="AR", annotation_position="bottom right")
    base_layout(fig, esc(f"Step {step_index}: expected tokens per cost of each choice"), 360)
    fig.update_xaxes(title_text="tokens fed", type="log")
    fig.update_yaxes(title_text="expected tokens / cost", rangemode="tozero")
    return fig
