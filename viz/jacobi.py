"""Jacobi figures: one block's trajectory animated, the same block as CLLM's static figure, and
per-block counts.

A block's picture: n token cells in a row (position 0 = the token the block started from), each
coloured by its state after an iteration (``decoding.analysis.jacobi_cell_states``), with the
block's fixed point drawn underneath for reference. Frame 0 is the initial guess.
"""

from __future__ import annotations

import plotly.graph_objects as go

from decoding import analysis
from viz.style import (BLUE, FONT, GREEN, JACOBI_STATES, ORANGE, SKY, VERMILLION, animation_controls, base_layout,
                       cell_label, empty_figure, esc, hover_label, legend_entries, page_items, piece, text_colour,
                       token_texts)

CELL = 46  # marker size in px


def trajectory(trace, block: int) -> tuple[list[list[int]], list[list[str]], list[int]]:
    """Rows of (tokens, states) for one block: the state each iteration fed, coloured by
    ``decoding.analysis.jacobi_cell_states`` (which positions that iteration commits, which are
    right, wrong or stationary), then the final state with its committed prefix."""
    recs = analysis.jacobi_iterations(trace, block)
    if not recs:
        return [], [], []
    fp = analysis.jacobi_fixed_point(trace, block)
    rows = [list(r.before) for r in recs]
    states = [list(st) for st in analysis.jacobi_cell_states(trace, block)]
    last = recs[-1]
    done = last.start + last.committed
    rows.append(list(last.after))
    states.append(["committed" if i < done else "correct" if i < len(fp) and t == fp[i] else "wrong"
                   for i, t in enumerate(last.after)])
    return rows, states, fp


def _row_label(recs, k: int) -> str:
    if k == len(recs):
        return "block done: its fixed point" if recs and recs[-1].start + recs[-1].committed >= len(recs[-1].after) \
            else "block cut short"
    r = recs[k]
    ff = " (fast-forward)" if r.committed > 1 else ""
    return f"iteration {r.iteration + 1}/{len(recs)} commits {r.committed}{ff}"


def _cells(tokens, states, fp, texts, y):
    """x, y, colours, text, text colours and hover of one row of cells."""
    colours = [JACOBI_STATES.get(s, (VERMILLION, s))[0] for s in states]
    hover = []
    for i, (t, s) in enumerate(zip(tokens, states)):
        want = piece(texts, fp[i]) if i < len(fp) else "?"
        hover.append(f"position {i}<br>token {hover_label(piece(texts, t))} (id {t})<br>"
                     f"state: {esc(JACOBI_STATES.get(s, ('', s))[1])}<br>fixed point: {hover_label(want)}")
    return dict(
        x=list(range(len(tokens))), y=[y] * len(tokens),
        marker=dict(color=colours, symbol="square", size=CELL, line=dict(color="#333333", width=1)),
        text=[cell_label(piece(texts, t)) for t in tokens],
        textfont=dict(color=[text_colour(c) for c in colours], size=12, family=FONT["family"]),
        hovertext=hover,
    )


def _no_block(block: int) -> go.Figure:
    return empty_figure(f"No Jacobi iterations recorded for block {block}.")


def fixed_point_cells(fp, texts, y):
    """The fixed point as a reference row of white cells with a sky outline."""
    c = _cells(fp, ["correct"] * len(fp), fp, texts, y)
    c["marker"].update(color="#FFFFFF", line=dict(color=SKY, width=2))
    c["textfont"]["color"] = "#000000"
    c["hovertext"] = [f"fixed point, position {i}<br>{hover_label(piece(texts, t))} (id {t})" for i, t in enumerate(fp)]
    return c


def block_animation(trace, block: int = 0, page: int = 0, duration_ms: int = 800) -> go.Figure:
    """Animated trajectory of one Jacobi block (Play / Pause / slider over iterations).

    Trace 0 is the moving row of cells (frames update only it); trace 1 is the fixed point; the
    rest are legend entries. Frame k (named ``str(k)``) is the block as iteration k fed it (frame 0
    = the initial guess); the last frame is the block after its last iteration.
    """
    rows, states, fp = trajectory(trace, block)
    if not rows:
        return _no_block(block)
    recs, texts, n = analysis.jacobi_iterations(trace, block), token_texts(trace), len(rows[0])
    ks = page_items(list(range(len(rows))), page)

    fig = go.Figure()
    first = _cells(rows[ks[0]], states[ks[0]], fp, texts, 1)
    fig.add_trace(go.Scatter(mode="markers+text", name="block", showlegend=False, hoverinfo="text",
                             textposition="middle center", **first))
    fig.add_trace(go.Scatter(mode="markers+text", name="fixed point", showlegend=False, hoverinfo="text",
                             textposition="middle center", **fixed_point_cells(fp, texts, 0)))
    legend_entries(fig, JACOBI_STATES.values())

    frames = []
    for k in ks:
        c = _cells(rows[k], states[k], fp, texts, 1)
        frames.append(go.Frame(name=str(k), traces=[0], data=[go.Scatter(**c)],
                               layout=dict(title=dict(text=_title(trace, block, recs, k)))))
    fig.frames = frames
    labels = [str(k + 1) if k < len(recs) else "done" for k in ks]
    animation_controls(fig, [f.name for f in frames], labels, duration_ms, prefix="iteration ")
    base_layout(fig, _title(trace, block, recs, ks[0]), 380, animated=True)
    fig.update_xaxes(range=[-0.6, n - 0.4], fixedrange=True, showgrid=False, zeroline=False,
                     tickmode="array", tickvals=list(range(n)))
    fig.update_yaxes(range=[-0.6, 1.6], fixedrange=True, showgrid=False, zeroline=False,
                     tickmode="array", tickvals=[0, 1], ticktext=["fixed point", "block"])
    return fig


def _title(trace, block, recs, k) -> str:
    off = next((b.offset for b in trace.blocks if b.index == block), None)
    where = f" (output {off}..)" if off is not None else ""
    return f"Jacobi block {block}{where} · {esc(_row_label(recs, k))}"


def block_figure(trace, block: int = 0) -> go.Figure:
    """CLLM's trajectory figure: one row per iteration (top = the initial guess as iteration 1
    fed it, bottom = the final state), cells coloured against the fixed point. Trace 0 holds all
    cells, row by row."""
    rows, states, fp = trajectory(trace, block)
    if not rows:
        return _no_block(block)
    recs, texts, n = analysis.jacobi_iterations(trace, block), token_texts(trace), len(rows[0])
    xs, ys, colours, text, tcol, hover = [], [], [], [], [], []
    for k, (toks, st) in enumerate(zip(rows, states)):
        c = _cells(toks, st, fp, texts, k)
        xs += c["x"]; ys += c["y"]; colours += c["marker"]["color"]
        text += c["text"]; tcol += c["textfont"]["color"]; hover += c["hovertext"]
    fig = go.Figure()
    fig.add_trace(go.Scatter(
        x=xs, y=ys, mode="markers+text", showlegend=False, hoverinfo="text", hovertext=hover, text=text,
        textposition="middle center", textfont=dict(color=tcol, size=11, family=FONT["family"]),
        marker=dict(color=colours, symbol="square", size=38, line=dict(color="#333333", width=1)),
    ))
    legend_entries(fig, JACOBI_STATES.values())
    base_layout(fig, f"Block {block}: every iteration against the fixed point", 150 + 44 * len(rows))
    fig.update_xaxes(range=[-0.6, n - 0.4], fixedrange=True, showgrid=False, zeroline=False,
                     tickmode="array", tickvals=list(range(n)), title_text="position in block")
    fig.update_yaxes(range=[len(rows) - 0.5, -0.5], fixedrange=True, showgrid=False, zeroline=False,
                     tickmode="array", tickvals=list(range(len(rows))),
                     ticktext=[f"it {r.iteration + 1}" for r in recs] + ["done"])
    return fig


def counts_figure(trace) -> go.Figure:
    """Per block: iterations, fast-forwarded and stationary tokens (grouped bars)."""
    counts = analysis.jacobi_counts(trace)
    if not counts:
        return empty_figure("No Jacobi blocks in this trace.")
    blocks = [c["block"] for c in counts]
    fig = go.Figure()
    for key, colour, name in (("iterations", BLUE, "iterations"), ("fast_forwarded", ORANGE, "fast-forwarded tokens"),
                              ("stationary", GREEN, "stationary tokens")):
        fig.add_trace(go.Bar(x=blocks, y=[c[key] for c in counts], name=name, marker_color=colour,
                             hovertemplate=f"block %{{x}}<br>{name}: %{{y}}<extra></extra>"))
    n = trace.params.get("n")
    base_layout(fig, f"Per block (n = {n}: AR would need n steps per block)" if n else "Per block", 320)
    fig.update_layout(barmode="group")
    fig.update_xaxes(title_text="block", dtick=1)
    fig.update_yaxes(title_text="count")
    return fig
