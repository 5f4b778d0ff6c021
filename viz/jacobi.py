"""Jacobi figures: one block's trajectory animated, the same block as CLLM's static figure, and
per-block counts.

A block's picture: n token cells in a row (position 0 = the token the block started from), one
state of the block per frame: y(0) the initial guess, y(k) the block after iteration k
(``decoding.analysis.jacobi_states``). Cells are coloured by CLLM's reading
(``decoding.analysis.jacobi_cell_states``): a token is fast-forwarded at the iteration whose
forward made it right; the tokens that iteration committed to the output
(``decoding.analysis.jacobi_commits``) are outlined. The block's fixed point is drawn underneath.
The block's last iteration also commits the model's own token after the block: the next block's
first token, drawn as one cell right of the block ("next block") in the state that committed it,
so the outlined cells add up to the tokens the per-block counts give.
"""

from __future__ import annotations

from dataclasses import dataclass

import plotly.graph_objects as go

from decoding import analysis
from viz.style import (BLACK, BLUE, FONT, GREEN, GREY, JACOBI_STATES, SKY, VERMILLION, animation_controls,
                       base_layout, cell_label, empty_figure, esc, hover_label, legend_entries, page_items, piece,
                       state_colour, text_colour, token_texts)

CELL = 46  # marker size in px
COMMIT_LINE = BLACK  # outline of the tokens an iteration committed to the output
COMMIT_LEGEND = "outlined: committed to the output by this iteration"

# Both readings of "fast-forward", in one sentence (the Jacobi and CLLM pages and the lecture say it).
DEFINITIONS = (f"Fast-forwarded ({state_colour('fast_forward')}, CLLM's definition): tokens that one iteration's forward pass made right "
               "together with the token before them, marked at that iteration; committed (black outline): the "
               "tokens an iteration adds to the output, which for those tokens is the next iteration, because "
               "a guess is only confirmed once it has been fed.")
# The colours are a reading in hindsight: Jacobi itself never knows the fixed point while it runs.
HINDSIGHT = ("The colours compare every token with the block's fixed point, which is known only in hindsight, once "
             "the block has converged: while decoding, Jacobi sees only which tokens stopped changing (and commits "
             "those), not which guesses are right.")
LEGEND_TITLE = "colours in hindsight, against the fixed point:"  # (HINDSIGHT says it whole)
LEGEND_ROOM = 50  # px above the plot for the legend's title row (and a wrapped entry row)


@dataclass
class BlockView:
    """One block's states and their readings, as the figures draw them."""

    rows: list[list[int]]  # y(0) .. y(K)
    states: list[list[str]]  # per row and position: a key of JACOBI_STATES
    commits: list[list[int]]  # per row: the positions the iteration that produced it committed
    fp: list[int]  # the fixed point
    recs: list  # the JacobiRecords, in iteration order
    texts: dict[int, str]
    next_id: int | None = None  # the output token after the block (the next block's position 0)

    @property
    def has_next(self) -> bool:
        return any(self.n in c for c in self.commits)

    @property
    def n(self) -> int:
        return len(self.rows[0])

    def next_token(self, k: int) -> int | None:
        """The token at position n (the next block's first) if the iteration that produced y(k)
        committed it, else None."""
        return self.next_id if self.n in self.commits[k] else None

    @property
    def done(self) -> bool:
        return self.states[-1] == ["committed"] * len(self.rows[-1])


def block_view(trace, block: int) -> BlockView | None:
    recs = analysis.jacobi_iterations(trace, block)
    if not recs:
        return None
    rows = analysis.jacobi_states(trace, block)
    off = next((b.offset for b in trace.blocks if b.index == block), None)
    after = off + len(rows[0]) if off is not None else None
    nxt = trace.output_ids[after] if after is not None and after < len(trace.output_ids) else None
    return BlockView(rows, analysis.jacobi_cell_states(trace, block), analysis.jacobi_commits(trace, block),
                     analysis.jacobi_fixed_point(trace, block), recs, token_texts(trace), nxt)


def row_label(v: BlockView, k: int) -> str:
    if k == 0:
        return f"initial guess: {v.n - 1} tokens drawn from the prompt"
    ff = v.states[k].count("fast_forward")
    c = len(v.commits[k])
    nxt = "" if v.next_token(k) is None else (": the next block's first token" if c == 1 else
                                              ", the last is the next block's first token")
    bits = [f"after iteration {k}/{len(v.recs)}", f"{c} committed{nxt}"]
    if ff:
        bits.append(f"{ff} fast-forwarded")
    if k == len(v.recs):
        bits.append("block done: its fixed point" if v.done else "block cut short")
    return " · ".join(bits)


def _cells(v: BlockView, k: int, y, fp_row: bool = False) -> dict:
    """x, y, colours, outlines, text, text colours and hover of row ``k`` of the block (or of its
    fixed point)."""
    tokens = v.fp if fp_row else v.rows[k]
    states = ["correct"] * len(tokens) if fp_row else v.states[k]
    now = set() if fp_row else set(v.commits[k])
    colours = ["#FFFFFF" if fp_row else JACOBI_STATES.get(s, (VERMILLION, s))[0] for s in states]
    hover = []
    for i, (t, s) in enumerate(zip(tokens, states)):
        if fp_row:
            hover.append(f"fixed point, position {i}<br>{hover_label(piece(v.texts, t))} (id {t})")
            continue
        want = piece(v.texts, v.fp[i]) if i < len(v.fp) else "?"
        hover.append(f"position {i}<br>token {hover_label(piece(v.texts, t))} (id {t})<br>"
                     f"state: {esc(JACOBI_STATES.get(s, ('', s))[1])}"
                     f"{'<br>committed to the output by this iteration' if i in now else ''}"
                     f"<br>fixed point: {hover_label(want)}")
    return dict(
        x=list(range(len(tokens))), y=[y] * len(tokens),
        marker=dict(color=colours, symbol="square", size=CELL,
                    line=dict(color=[SKY if fp_row else COMMIT_LINE if i in now else "#333333" for i in range(len(tokens))],
                              width=[2 if fp_row else 5 if i in now else 1 for i in range(len(tokens))])),
        text=[cell_label(piece(v.texts, t)) for t in tokens],
        textfont=dict(color=["#000000" if fp_row else text_colour(c) for c in colours], size=12, family=FONT["family"]),
        hovertext=hover,
    )


NEXT_LABEL = "next block"  # the x tick of the cell right of the block


def _next_cell(v: BlockView, k: int, y) -> dict:
    """The cell right of the block in row ``k``: the next block's first token where the iteration
    that produced y(k) committed it (made right as AR would, outlined), else nothing."""
    t = v.next_token(k)
    if t is None:
        return dict(x=[None], y=[None], text=[""], hovertext=[""],
                    marker=dict(color=["#FFFFFF"], symbol="square", size=CELL, line=dict(color=[COMMIT_LINE], width=[0])),
                    textfont=dict(color=["#000000"], size=12, family=FONT["family"]))
    colour = JACOBI_STATES["new"][0]
    return dict(x=[v.n], y=[y], text=[cell_label(piece(v.texts, t))],
                hovertext=[f"position {v.n}: the next block's first token<br>{hover_label(piece(v.texts, t))} (id {t})"
                           "<br>the model's own token after this block's last position"
                           "<br>committed to the output by this iteration"],
                marker=dict(color=[colour], symbol="square", size=CELL, line=dict(color=[COMMIT_LINE], width=[5])),
                textfont=dict(color=[text_colour(colour)], size=12, family=FONT["family"]))


def _x_axis(fig: go.Figure, v: BlockView, **kw) -> None:
    """Positions 0 .. n-1, and the next block's first token at n when the block committed it."""
    n = v.n + v.has_next
    fig.update_xaxes(range=[-0.6, n - 0.4], fixedrange=True, showgrid=False, zeroline=False, tickmode="array",
                     tickvals=list(range(n)), ticktext=[str(i) for i in range(v.n)] + [NEXT_LABEL] * v.has_next, **kw)


def _no_block(block: int) -> go.Figure:
    return empty_figure(f"No Jacobi iterations recorded for block {block}.")


def legend(fig: go.Figure, hindsight: bool = False) -> None:
    """One entry per cell state, and one for the commit outline; ``hindsight``: a legend title (its
    own row) says the colours come from the fixed point, known only in hindsight (the figure then
    needs ``LEGEND_ROOM`` px more at the top)."""
    if hindsight:
        fig.update_layout(legend_title_text=LEGEND_TITLE, legend_title_side="top")
    legend_entries(fig, JACOBI_STATES.values())
    fig.add_trace(go.Scatter(x=[None], y=[None], mode="markers", name=COMMIT_LEGEND, showlegend=True, hoverinfo="skip",
                             marker=dict(symbol="square", size=14, color="#FFFFFF", line=dict(color=COMMIT_LINE, width=3))))


def block_animation(trace, block: int = 0, page: int = 0, duration_ms: int = 800) -> go.Figure:
    """Animated trajectory of one Jacobi block (Play / Pause / slider over its states).

    Trace 0 is the moving row of cells (frames update only it); trace 1 is the fixed point; the
    rest are legend entries. Frame k (named ``str(k)``) is y(k): frame 0 the initial guess, frame k
    the block after iteration k, with what that iteration's forward made right and what it committed.
    """
    v = block_view(trace, block)
    if v is None:
        return _no_block(block)
    ks = page_items(list(range(len(v.rows))), page)
    fig = go.Figure()
    fig.add_trace(go.Scatter(mode="markers+text", name="block", showlegend=False, hoverinfo="text",
                             textposition="middle center", **_cells(v, ks[0], 1)))
    fig.add_trace(go.Scatter(mode="markers+text", name="fixed point", showlegend=False, hoverinfo="text",
                             textposition="middle center", **_cells(v, 0, 0, fp_row=True)))
    legend(fig, hindsight=True)  # traces 2 .. : legend entries
    fig.add_trace(go.Scatter(mode="markers+text", name=NEXT_LABEL, showlegend=False, hoverinfo="text",
                             textposition="middle center", **_next_cell(v, ks[0], 1)))
    nxt = len(fig.data) - 1
    fig.frames = [go.Frame(name=str(k), traces=[0, nxt], data=[go.Scatter(**_cells(v, k, 1)),
                                                                 go.Scatter(**_next_cell(v, k, 1))],
                           layout=dict(title=dict(text=_title(trace, block, v, k)))) for k in ks]
    animation_controls(fig, [str(k) for k in ks], ["guess" if k == 0 else str(k) for k in ks], duration_ms,
                       prefix="iteration ")
    base_layout(fig, _title(trace, block, v, ks[0]), 400 + LEGEND_ROOM, animated=True)
    fig.update_layout(margin_t=80 + LEGEND_ROOM)
    _x_axis(fig, v)
    fig.update_yaxes(range=[-0.6, 1.6], fixedrange=True, showgrid=False, zeroline=False,
                     tickmode="array", tickvals=[0, 1], ticktext=["fixed point", "block"])
    return fig


def _title(trace, block, v: BlockView, k) -> str:
    off = next((b.offset for b in trace.blocks if b.index == block), None)
    where = f" (output {off}..)" if off is not None else ""
    return f"Jacobi block {block}{where} · {esc(row_label(v, k))}"


def block_figure(trace, block: int = 0) -> go.Figure:
    """CLLM's trajectory figure: one row per state (top = the initial guess, then the block after
    each iteration), cells coloured against the fixed point, commits outlined. Trace 0 holds all
    cells, row by row."""
    v = block_view(trace, block)
    if v is None:
        return _no_block(block)
    cells = [_cells(v, k, k) for k in range(len(v.rows))]
    cells += [_next_cell(v, k, k) for k in range(len(v.rows)) if v.next_token(k) is not None]
    join = lambda f: [x for c in cells for x in f(c)]
    fig = go.Figure()
    fig.add_trace(go.Scatter(
        x=join(lambda c: c["x"]), y=join(lambda c: c["y"]), mode="markers+text", showlegend=False,
        hoverinfo="text", hovertext=join(lambda c: c["hovertext"]), text=join(lambda c: c["text"]),
        textposition="middle center", textfont=dict(color=join(lambda c: c["textfont"]["color"]), size=11,
                                                    family=FONT["family"]),
        marker=dict(color=join(lambda c: c["marker"]["color"]), symbol="square", size=38,
                    line=dict(color=join(lambda c: c["marker"]["line"]["color"]),
                              width=[min(w, 4) for w in join(lambda c: c["marker"]["line"]["width"])])),
    ))
    legend(fig, hindsight=True)
    base_layout(fig, f"Block {block}: every state against the fixed point", 170 + LEGEND_ROOM + 44 * len(v.rows))
    fig.update_layout(margin_t=80 + LEGEND_ROOM)
    _x_axis(fig, v, title_text="position in block")
    fig.update_yaxes(range=[len(v.rows) - 0.5, -0.5], fixedrange=True, showgrid=False, zeroline=False,
                     tickmode="array", tickvals=list(range(len(v.rows))),
                     ticktext=["guess"] + [f"after it {k}" for k in range(1, len(v.rows))])
    return fig


def full_block_tokens(counts: list[dict]) -> int | None:
    """Tokens a full block commits (the most any block of the trace committed), None without blocks."""
    return max((c["tokens"] for c in counts), default=None)


def counts_sentence(trace) -> str:
    """What the per-block counts say, in words (from ``decoding.analysis.jacobi_counts``, as the figure)."""
    counts = analysis.jacobi_counts(trace)
    if not counts:
        return "No Jacobi blocks in this trace."
    full = full_block_tokens(counts)
    its = sum(c["iterations"] for c in counts)
    toks = sum(c["tokens"] for c in counts)
    ff = sum(c["fast_forwarded"] for c in counts)
    st = sum(c["stationary"] for c in counts)
    return (f"A full block commits {full} tokens; AR needs one forward pass per token, and so does Jacobi when no "
            f"guess is right early: {full} iterations. Here {len(counts)} block{'s' if len(counts) != 1 else ''} "
            f"committed {toks} tokens in {its} iterations, with {ff} fast-forwarded and {st} stationary tokens.")


COUNT_BARS = (("tokens", GREY, "tokens committed (= AR's forward passes)"), ("iterations", BLUE, "iterations"),
              ("fast_forwarded", JACOBI_STATES["fast_forward"][0], "fast-forwarded tokens (CLLM)"), ("stationary", GREEN, "stationary tokens"))


def counts_figure(trace) -> go.Figure:
    """Per block: tokens committed (AR's forward passes for them), iterations, fast-forwarded and
    stationary tokens (grouped bars, from ``decoding.analysis.jacobi_counts``)."""
    counts = analysis.jacobi_counts(trace)
    if not counts:
        return empty_figure("No Jacobi blocks in this trace.")
    blocks = [c["block"] for c in counts]
    fig = go.Figure()
    for key, colour, name in COUNT_BARS:
        fig.add_trace(go.Bar(x=blocks, y=[c[key] for c in counts], name=name, marker_color=colour,
                             hovertemplate=f"block %{{x}}<br>{name}: %{{y}}<extra></extra>"))
    full = full_block_tokens(counts)
    base_layout(fig, f"Per block: a full block commits {full} tokens, so {full} iterations without any early guess", 340)
    fig.update_layout(barmode="group")
    fig.update_xaxes(title_text="block", dtick=1)
    fig.update_yaxes(title_text="count")
    return fig
