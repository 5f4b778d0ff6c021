"""Sampling view: the verification decisions of a sampled run (temperature > 0), step by step.

One column per step, its decisions top to bottom in the order they were made (from
``decoding.analysis.sampling_decisions``):
    accepted   a candidate token accepted with probability p
    rejected   a candidate token rejected: its p is set to 0 and the rest renormalised
    residual   no candidate at this position survived: a token drawn from what was left of p
    drawn      no candidate reached this position: a token drawn from p (AR's own draw)
A horizontal band groups the decisions of one output position; the hover says the position,
the candidate, the token and p at that moment.
"""

from __future__ import annotations

import plotly.graph_objects as go

from decoding import analysis
from viz.style import (BLUE, GREEN, LIGHT, ORANGE, VERMILLION, base_layout, cell_label, empty_figure,
                       hover_label, legend_entries, page_items, piece, text_colour, token_texts)

OUTCOMES: dict[str, tuple[str, str]] = {
    "accepted": (GREEN, "candidate accepted (probability p)"),
    "rejected": (VERMILLION, "candidate rejected (p set to 0)"),
    "residual": (ORANGE, "drawn from what was left"),
    "drawn": (BLUE, "drawn from p (no candidate here)"),
}


def decision_cells(trace, page: int = 0) -> list[dict]:
    """The cells of ``decisions_figure``: one per decision of the steps on ``page``.

    Keys: step, x (step index), y (row within the step, 0 at the top), position, candidate, token,
    p, outcome (a key of OUTCOMES), colour, text (escaped, short), hover (escaped).
    """
    rows = analysis.sampling_decisions(trace)
    steps = sorted({r["step"] for r in rows})
    keep = set(page_items(steps, page))
    texts = token_texts(trace)
    cells, y, last = [], 0, None
    for i, r in enumerate(rows):
        if r["step"] not in keep:
            continue
        if r["step"] != last:
            y, last = 0, r["step"]
        outcome = r["outcome"]
        if outcome == "drawn" and i > 0 and rows[i - 1]["outcome"] == "rejected" and rows[i - 1]["step"] == r["step"] \
                and rows[i - 1]["position"] == r["position"]:
            outcome = "residual"
        tok = piece(texts, r["token"])
        who = f"candidate {r['candidate']}" if r["candidate"] >= 0 else "no candidate"
        cut = "" if r["output"] is not None else " (not committed: cut at EOS / max new tokens)"
        cells.append(dict(
            step=r["step"], x=r["step"], y=y, position=r["position"], candidate=r["candidate"], token=r["token"],
            p=r["p"], outcome=outcome, colour=OUTCOMES[outcome][0], text=cell_label(tok, 6),
            hover=(f"step {r['step']} · new token {r['position'] + 1} of the step{cut}<br>{who}: {hover_label(tok)} "
                   f"(id {r['token']})<br>p = {r['p']:.3f} · {OUTCOMES[outcome][1]}"),
        ))
        y += 1
    return cells


def decisions_figure(trace, page: int = 0) -> go.Figure:
    """Every accept / reject / draw of the sampled steps on ``page`` (see the module docstring)."""
    if not trace.sampled or not any(s.sampling is not None for s in trace.steps):
        return empty_figure("This run decoded greedily (temperature 0): candidates are checked against the "
                            "model's argmax, there are no accept/reject draws to show.")
    cells = decision_cells(trace, page)
    fig = go.Figure()
    # bands: alternate shading per output position within a step
    for c in cells:
        if c["position"] % 2 == 1:
            fig.add_shape(type="rect", x0=c["x"] - 0.5, x1=c["x"] + 0.5, y0=c["y"] - 0.5, y1=c["y"] + 0.5,
                          fillcolor=LIGHT, line_width=0, layer="below")
    fig.add_trace(go.Scatter(
        x=[c["x"] for c in cells], y=[c["y"] for c in cells], mode="markers+text", showlegend=False,
        marker=dict(symbol="square", size=30, color=[c["colour"] for c in cells], line=dict(color="#333333", width=1)),
        text=[c["text"] for c in cells], textfont=dict(size=10, color=[text_colour(c["colour"]) for c in cells]),
        hovertext=[c["hover"] for c in cells], hoverinfo="text",
    ))
    legend_entries(fig, OUTCOMES.values())
    p = trace.params
    extra = ", ".join(f"{k}={p[k]}" for k in ("top_k", "top_p") if p.get(k) not in (None, 0, 1, 1.0))
    st = analysis.sampling_stats(trace)
    title = (f"Sampling verification at temperature {p.get('temperature')}{', ' + extra if extra else ''}: "
             f"{st['accepted']} of {st['tries']} candidate tokens accepted")
    depth = max((c["y"] for c in cells), default=0) + 1
    base_layout(fig, title, height=min(900, 160 + 34 * depth))
    fig.update_xaxes(title="step", dtick=1 if len({c["x"] for c in cells}) <= 40 else None, zeroline=False)
    fig.update_yaxes(title="decisions, in order", showticklabels=False, zeroline=False,
                     range=[depth - 0.5, -0.5])
    return fig
