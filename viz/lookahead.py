"""Lookahead figures: the step animation (current token, 2D window, candidates, committed
tokens), the n-gram pool as a table and as a growing graph, and the attention mask heatmap.

Grid of the step animation (top to bottom):
    next level   the top level's argmax this step (the window's new top level)
    level N-2 .. level 0   the window as fed; level 0 also holds the current token at column 0
    candidates   the pool entries for the current token that were verified (up to G rows)
    committed    the tokens this step committed, coloured by provenance
Window columns whose n-gram was harvested into the pool this step are outlined.
"""

from __future__ import annotations

import math

import networkx as nx
import plotly.graph_objects as go

from decoding import analysis
from decoding.methods import lookahead_mask as masks
from decoding.methods.lookahead import LookaheadRecord
from viz.style import (BLACK, BLUE, FONT, GREEN, GREY, LIGHT, ORANGE, PROVENANCE, SKY, VERMILLION, YELLOW,
                       animation_controls, base_layout, cell_label, empty_figure, esc, freeze, hover_label,
                       legend_entries, page_items, page_of, piece, text_colour, token_texts, visible, wrap_title)

CELL = 40
WHITE = "#FFFFFF"
HARVEST_LINE = ORANGE

LOOKAHEAD_CELLS: dict[str, tuple[str, str]] = {
    "current": (BLACK, "current token"),
    "window": (WHITE, "window guess"),
    "next": (LIGHT, "next level (top level's argmax)"),
    "candidate": (GREY, "candidate token, not matched"),
    "matched": (YELLOW, "matched prefix (candidate not chosen)"),
    "accepted": (GREEN, "accepted (chosen candidate)"),
}


def lookahead_steps(trace) -> list[int]:
    return [i for i, s in enumerate(trace.steps) if isinstance(s.record, LookaheadRecord)]


def committed_before(trace) -> list[int]:
    """Output tokens committed before each step (the prefill's count first)."""
    before = len(trace.output_ids) - trace.step_tokens
    out = []
    for s in trace.steps:
        out.append(before)
        before += len(s.tokens)
    return out


def harvested_columns(window: list[list[int]], harvested: list[list[int]]) -> dict[int, list[int]]:
    """Column j -> the n-gram harvested from it (the column's tokens, level 0 first, then the
    top level's argmax)."""
    cols: dict[int, list[int]] = {}
    levels = len(window)
    for gram in harvested:
        for j in range(len(window[0]) if window else 0):
            if j not in cols and gram[:levels] == [window[l][j] for l in range(levels)]:
                cols[j] = list(gram)
                break
    return cols


class _Grid:
    """Where the compact step animation puts each cell, for one trace's W, N, G: x = window column
    (1 + j; the current token at 0), one row per level, candidate and the committed tokens. A level-l
    token of column j sits at position t + 1 + l + j: x is a column here, not a position (the
    position view draws positions)."""

    def __init__(self, W: int, N: int, rows_cand: int):
        self.W, self.N, self.G = W, N, max(rows_cand, 1)
        self.next = 0
        self.cand0 = N + 1
        self.committed = self.cand0 + self.G + 1
        self.height = self.committed + 1

    def level(self, l: int) -> int:
        return 1 + (self.N - 2 - l)

    def window(self, l: int, j: int) -> tuple[int, int]:
        return 1 + j, self.level(l)

    def next_level(self, levels: int, j: int) -> tuple[int, int]:
        return 1 + j, self.next

    def current(self) -> tuple[int, int]:
        return 0, self.level(0)

    def candidate(self, c: int, i: int) -> tuple[int, int]:
        return 1 + i, self.cand0 + c

    def commit(self, i: int) -> tuple[int, int]:
        return 1 + i, self.committed

    def ticks(self) -> tuple[list[int], list[str]]:
        vals = [self.next] + [self.level(l) for l in range(self.N - 1)] + \
            [self.cand0 + i for i in range(self.G)] + [self.committed]
        text = ["next level"] + [f"level {l}" for l in range(self.N - 1)] + \
            [f"candidate {i + 1}" for i in range(self.G)] + ["committed"]
        return vals, text


class PositionGrid(_Grid):
    """The paper's picture: x = sequence position relative to the current token t (x = 0), y = level.
    Level l, column j sits at t + 1 + l + j, so each column's n-gram is a diagonal; the text row
    (y = -1) holds the last committed tokens, the current one and this step's committed tokens;
    candidate c's token i sits at t + 1 + i on row -2 - c."""

    CONTEXT = 3  # committed tokens shown before the current one

    def window(self, l: int, j: int) -> tuple[int, int]:
        return 1 + l + j, l

    def next_level(self, levels: int, j: int) -> tuple[int, int]:
        return 1 + levels + j, levels  # the argmax of the top level (levels - 1) predicts one further on

    def current(self) -> tuple[int, int]:
        return 0, -1

    def candidate(self, c: int, i: int) -> tuple[int, int]:
        return 1 + i, -2 - c

    def commit(self, i: int) -> tuple[int, int]:
        return 1 + i, -1

    def context(self, k: int) -> tuple[int, int]:
        return -k, -1  # k = 1 .. CONTEXT tokens before the current one

    def ticks(self) -> tuple[list[int], list[str]]:
        vals = [self.N - 1] + list(range(self.N - 2, -1, -1)) + [-1] + [-2 - c for c in range(self.G)]
        text = ["next level"] + [f"level {l}" for l in range(self.N - 2, -1, -1)] + ["text"] + \
            [f"candidate {c + 1}" for c in range(self.G)]
        return vals, text

    def xrange(self) -> tuple[int, int]:
        return -self.CONTEXT, self.N + self.W - 1


def step_grid(trace, positions: bool = False) -> _Grid:
    """The animation's grid for a trace: W, N and room for G (or the most candidates of any step);
    ``positions``: the position view's grid."""
    W, N = trace.params["W"], trace.params["N"]
    G = max([trace.params["G"]] + [len(trace.steps[i].record.candidates) for i in lookahead_steps(trace)])
    return (PositionGrid if positions else _Grid)(W, N, G)


def next_level(trace, si: int, cols: dict[int, list[int]], W: int) -> list[int | None]:
    """The row above the window: the harvested n-grams' last tokens (the top level's argmax), or,
    while the window fills, the level the next step adds."""
    rec = trace.steps[si].record
    if cols:
        return [cols[j][-1] if j in cols else None for j in range(W)]
    if si + 1 < len(trace.steps) and isinstance(trace.steps[si + 1].record, LookaheadRecord):
        w2 = trace.steps[si + 1].record.window
        if w2 and len(w2) > len(rec.window):
            return list(w2[-1])
    return []


def _step_cells(trace, si: int, grid: _Grid, texts, prov, before) -> dict:
    """All cells of one step: x, y, colours, outlines, text, hover (placed by ``grid``)."""
    step = trace.steps[si]
    rec = step.record
    t = len(trace.prompt_ids) + before[si] - 1  # the current token's position in the sequence
    cur = trace.output_ids[before[si] - 1] if before[si] >= 1 else None
    cells: list[tuple] = []  # (x, y, fill, line colour, line width, label, hover)

    def add(xy, tok, fill, hover, line=BLACK, width=1):
        cells.append((xy[0], xy[1], fill, line, width, cell_label(piece(texts, tok), 6),
                      f"{hover}<br>token {hover_label(piece(texts, tok))} (id {tok})"))

    if cur is not None:
        add(grid.current(), cur, LOOKAHEAD_CELLS["current"][0], f"current token (last committed), position t = {t}")
    if isinstance(grid, PositionGrid):
        for k in range(1, grid.CONTEXT + 1):
            if before[si] - 1 - k >= 0:
                add(grid.context(k), trace.output_ids[before[si] - 1 - k], LIGHT, f"committed text, position t-{k}",
                    line="#999999")
    cols = harvested_columns(rec.window, rec.harvested)
    for l, level in enumerate(rec.window):
        for j, tok in enumerate(level):
            h = cols.get(j)
            note = f"<br>harvested n-gram: {esc(visible(''.join(piece(texts, x) for x in h)))}" if h else ""
            add(grid.window(l, j), tok, LOOKAHEAD_CELLS["window"][0],
                f"window level {l}, column {j}: position t+{1 + l + j}{note}",
                line=HARVEST_LINE if h else "#555555", width=4 if h else 1)
    for j, tok in enumerate(next_level(trace, si, cols, grid.W)):
        if tok is not None:
            L = len(rec.window)
            add(grid.next_level(L, j), tok, LOOKAHEAD_CELLS["next"][0],
                f"argmax of level {L - 1}, column {j}: position t+{1 + L + j}",
                line=HARVEST_LINE if j in cols else "#555555", width=4 if j in cols else 1)
    for ci, cand in enumerate(rec.candidates[: grid.G]):
        m = rec.matched[ci]
        for i, tok in enumerate(cand):
            kind = ("accepted" if ci == rec.chosen else "matched") if i < m else "candidate"
            add(grid.candidate(ci, i), tok, LOOKAHEAD_CELLS[kind][0],
                f"candidate {ci + 1} (from the {esc(rec.origins[ci])} pool), token {i + 1} at position t+{1 + i}: "
                f"{'matched' if i < m else 'not matched'}{' and accepted' if kind == 'accepted' else ''}")
    for i, tok in enumerate(step.tokens):
        src = prov[before[si] + i] if before[si] + i < len(prov) else "step"
        add(grid.commit(i), tok, PROVENANCE.get(src, (BLUE, src))[0],
            f"committed token {i + 1}, position t+{1 + i}: {esc(PROVENANCE.get(src, ('', src))[1])}",
            line=BLACK, width=3 if isinstance(grid, PositionGrid) else 1)
    return dict(
        x=[c[0] for c in cells], y=[c[1] for c in cells],
        marker=dict(symbol="square", size=CELL, color=[c[2] for c in cells],
                    line=dict(color=[c[3] for c in cells], width=[c[4] for c in cells])),
        text=[c[5] for c in cells],
        textfont=dict(color=[text_colour(c[2]) for c in cells], size=11, family=FONT["family"]),
        hovertext=[c[6] for c in cells],
    )


def diagonals(trace, si: int, grid: PositionGrid) -> dict:
    """The harvested n-grams of step ``si`` as lines through their cells (x, y with None between):
    column j's n-gram runs from level 0 at t + 1 + j up to the next level at t + N + j."""
    rec = trace.steps[si].record
    xs, ys = [], []
    for j in sorted(harvested_columns(rec.window, rec.harvested)):
        for l in range(len(rec.window)):
            x, y = grid.window(l, j)
            xs.append(x); ys.append(y)
        x, y = grid.next_level(len(rec.window), j)
        xs += [x, None]; ys += [y, None]
    return dict(x=xs or [None], y=ys or [None])


def _step_title(trace, si, texts, before) -> str:
    step, rec = trace.steps[si], trace.steps[si].record
    cur = trace.output_ids[before[si] - 1] if before[si] >= 1 else None
    curtxt = esc(visible(piece(texts, cur))) if cur is not None else "?"
    if rec.chosen >= 0:
        got = f"accepted {rec.matched[rec.chosen]} from the pool"
    else:
        got = "no match" if rec.candidates else "no candidates"
    return (f"Step {si} · current '{curtxt}' at t = {len(trace.prompt_ids) + before[si] - 1} · {len(rec.candidates)} "
            f"candidate{'s' if len(rec.candidates) != 1 else ''} · {got} · {len(step.tokens)} committed")


def _legend(fig: go.Figure, positions: bool) -> None:
    legend_entries(fig, LOOKAHEAD_CELLS.values())
    if positions:
        fig.add_trace(go.Scatter(x=[None], y=[None], mode="lines", name="harvested n-gram (a diagonal)", hoverinfo="skip",
                                 showlegend=True, line=dict(color=HARVEST_LINE, width=6)))
    else:
        fig.add_trace(go.Scatter(x=[None], y=[None], mode="markers", name="harvested n-gram column", hoverinfo="skip",
                                 showlegend=True, marker=dict(symbol="square", size=14, color=WHITE,
                                                              line=dict(color=HARVEST_LINE, width=3))))
    legend_entries(fig, [PROVENANCE[k] for k in ("step", "pool", "prompt_pool", "output_pool")])


def _frame_data(trace, si, grid, texts, prov, before) -> list[go.Scatter]:
    cells = go.Scatter(**_step_cells(trace, si, grid, texts, prov, before))
    return [go.Scatter(**diagonals(trace, si, grid)), cells] if isinstance(grid, PositionGrid) else [cells]


def _animation(trace, page: int, grid: _Grid, duration_ms: int) -> go.Figure | None:
    """The step animation on ``grid``: compact (trace 0 = the cells) or positions (trace 0 = the
    harvested diagonals, trace 1 = the cells); frames update those and are named after the step index."""
    idx = lookahead_steps(trace)
    if not idx:
        return None
    shown = page_items(idx, page)
    texts, prov, before = token_texts(trace), analysis.provenance(trace), committed_before(trace)
    positions = isinstance(grid, PositionGrid)
    fig = go.Figure()
    first = _frame_data(trace, shown[0], grid, texts, prov, before)
    if positions:
        fig.add_trace(first[0].update(mode="lines", line=dict(color=HARVEST_LINE, width=6), opacity=0.6,
                                      hoverinfo="skip", showlegend=False))
    fig.add_trace(first[-1].update(mode="markers+text", showlegend=False, hoverinfo="text", textposition="middle center"))
    _legend(fig, positions)
    fig.frames = [go.Frame(name=str(si), traces=[0, 1] if positions else [0],
                           data=_frame_data(trace, si, grid, texts, prov, before),
                           layout=dict(title=dict(text=_step_title(trace, si, texts, before)))) for si in shown]
    animation_controls(fig, [str(si) for si in shown], [str(si) for si in shown], duration_ms, prefix="step ")
    rows = grid.N + 1 + grid.G if positions else grid.height
    base_layout(fig, _step_title(trace, shown[0], texts, before), 280 + (CELL + 6) * rows, animated=True)
    return fig


def step_animation(trace, page: int = 0, duration_ms: int = 900) -> go.Figure:
    """Animated lookahead steps, compact (Play / Pause / slider), one page of ``style.pages`` at a time:
    x = window column (see ``_Grid``). Trace 0 holds every cell of the shown step (frames update only it)."""
    if not lookahead_steps(trace):
        return empty_figure("No lookahead steps recorded in this trace.")
    grid = step_grid(trace)
    fig = _animation(trace, page, grid, duration_ms)
    if fig is None:
        return empty_figure("No lookahead steps recorded in this trace.")
    xmax = max(grid.W, grid.N)
    fig.update_xaxes(range=[-0.6, xmax + 0.6], fixedrange=True, showgrid=False, zeroline=False,
                     tickmode="array", tickvals=list(range(xmax + 1)),
                     ticktext=["cur"] + [f"col {j}" if j < grid.W else "" for j in range(xmax)], tickfont=dict(size=10),
                     title_text="window column (level l of column j is position t+1+l+j: see the position view)")
    vals, text = grid.ticks()
    fig.update_yaxes(range=[grid.height - 0.4, -0.6], fixedrange=True, showgrid=False, zeroline=False,
                     tickmode="array", tickvals=vals, ticktext=text)
    return fig


def position_animation(trace, page: int = 0, duration_ms: int = 900) -> go.Figure:
    """The lookahead paper's picture, animated per step: x = sequence position relative to the
    current token t, y = level (see ``PositionGrid``); each harvested n-gram is a diagonal line from
    level 0 to the next level. The text row holds the committed text and this step's committed
    tokens (outlined, coloured by where they came from); the candidates sit after t below it.
    Trace 0 = the diagonals, trace 1 = the cells; frames update both."""
    if not lookahead_steps(trace):
        return empty_figure("No lookahead steps recorded in this trace.")
    grid = step_grid(trace, positions=True)
    fig = _animation(trace, page, grid, duration_ms)
    if fig is None:
        return empty_figure("No lookahead steps recorded in this trace.")
    lo, hi = grid.xrange()
    fig.update_xaxes(range=[lo - 0.6, hi + 0.6], fixedrange=True, showgrid=True, gridcolor="#EEEEEE", zeroline=False,
                     tickmode="array", tickvals=list(range(lo, hi + 1)),
                     ticktext=[f"t{x:+d}" if x else "t" for x in range(lo, hi + 1)], tickfont=dict(size=10),
                     title_text="sequence position (t = the current token's)")
    vals, text = grid.ticks()
    fig.update_yaxes(range=[-1.6 - grid.G, grid.N - 0.4], fixedrange=True, showgrid=False, zeroline=False,
                     tickmode="array", tickvals=vals, ticktext=text)
    return fig


def pool_sources(trace) -> list[str]:
    """Where this trace's pool took n-grams from: "window" always; "prompt" if it was seeded with the
    prompt's n-grams; "output" if it harvested the committed output (the run's parameters)."""
    p = trace.params
    return ["window"] + (["prompt"] if p["seed_pool_prompt"] else []) + (["output"] if p["harvest_output"] else [])


def pool_sources_sentence(trace) -> str:
    """One sentence: which pool sources the shown trace used, against the paper's (the window only)."""
    src = pool_sources(trace)
    if src == ["window"]:
        return ("This trace's pool was fed by the window only, as in the lookahead paper (no prompt seeding, no "
                "output harvesting).")
    extra = " and ".join({"prompt": f"the prompt's n-grams (seeded before the first step: {len(trace.pool_seed)})",
                          "output": "n-grams of the committed output"}[s] for s in src[1:])
    return (f"This trace's pool was fed by the window and by {extra}: more than the lookahead paper, whose pool "
            f"holds window n-grams only (the sidebar's paper-settings preset runs that).")


def lost_with_g(trace, g: int) -> tuple[int, int]:
    """(steps, tokens) the run's accepted candidates would have lost had each step verified only its
    first ``g`` candidates, step by step (later steps as they were: the text and pool would differ)."""
    steps = tokens = 0
    for i in lookahead_steps(trace):
        r = trace.steps[i].record
        if r.chosen >= g:
            lost = r.matched[r.chosen] - max(r.matched[:g], default=0)
            steps, tokens = steps + (lost > 0), tokens + lost
    return steps, tokens


def g_figure(trace) -> go.Figure:
    """What G buys, step by step: the candidates each step verified (the pool's n-grams for its
    current token, at most G) as bars, and the rank of the one accepted (1 = the first) as a dot
    with how many tokens it matched."""
    idx = lookahead_steps(trace)
    if not idx:
        return empty_figure("No lookahead steps recorded in this trace.")
    recs = [trace.steps[i].record for i in idx]
    G = trace.params["G"]
    fig = go.Figure(go.Bar(x=idx, y=[len(r.candidates) for r in recs], marker_color=GREY, name="candidates verified",
                           hovertemplate="step %{x}: %{y} candidates<extra></extra>"))
    acc = [(i, r.chosen + 1, r.matched[r.chosen]) for i, r in zip(idx, recs) if r.chosen >= 0]
    fig.add_trace(go.Scatter(x=[a[0] for a in acc], y=[a[1] for a in acc], mode="markers", name="rank of the accepted one",
                             marker=dict(color=GREEN, size=[8 + 3 * a[2] for a in acc], line=dict(color=BLACK, width=1)),
                             customdata=[a[2] for a in acc],
                             hovertemplate="step %{x}: candidate %{y} accepted, %{customdata} tokens matched<extra></extra>"))
    fig.add_hline(y=G, line=dict(color=BLACK, dash="dot"), annotation_text=f"G = {G}", annotation_position="top left")
    later = sum(a[1] > 1 for a in acc)
    base_layout(fig, wrap_title(f"Candidates per step and the rank accepted (dot size: tokens matched) · {later} of "
                                f"{len(acc)} accepted were not the first", 70), 380)
    fig.update_layout(margin=dict(t=120), title=dict(y=1, yanchor="top", pad=dict(t=32)))  # two lines: as _legend_below
    fig.update_xaxes(title_text="step")
    fig.update_yaxes(title_text="candidates (rank)", rangemode="tozero", dtick=1 if G <= 10 else None)
    return fig


def wng_text(trace) -> str:
    """What W, N and G change, in this run's numbers (markdown; no model text)."""
    W, N, G = (trace.params[k] for k in ("W", "N", "G"))
    idx = lookahead_steps(trace)
    recs = [trace.steps[i].record for i in idx]
    full = [r for r in recs if len(r.window) == N - 1]
    with_c = [r for r in recs if r.candidates]
    acc = [r for r in recs if r.chosen >= 0]
    later = sum(r.chosen > 0 for r in acc)
    most = sum(r.matched[r.chosen] == N - 1 for r in acc)
    lost1 = lost_with_g(trace, 1)
    mean_c = sum(len(r.candidates) for r in with_c) / len(with_c) if with_c else 0.0
    return "\n".join([
        f"- **W = {W}** (window columns): each step feeds {N - 1} × {W} window tokens and, once the window is full "
        f"({len(full)} of {len(idx)} steps here), harvests {W} n-grams into the pool: a wider window guesses more "
        f"continuations per step, at {N - 1} more tokens fed per column.",
        f"- **N = {N}** (n-gram size): a pool n-gram carries {N - 1} guesses after its key, so one step commits at most "
        f"{N} tokens ({N - 1} matched + the model's own). Here {most} of {len(acc)} accepting steps matched all "
        f"{N - 1}: those would have gained from a larger N.",
        f"- **G = {G}** (candidates verified per step): the pool's n-grams for the current token, up to G of them, "
        f"each feeding {N - 1} tokens. Here {len(with_c)} of {len(idx)} steps had candidates ({mean_c:.1f} on "
        f"average); {later} of {len(acc)} accepted candidates were not the first one. With G = 1 those steps alone "
        f"would have committed {lost1[1]} fewer token{'s' if lost1[1] != 1 else ''} ({lost1[0]} step"
        f"{'s' if lost1[0] != 1 else ''}), and every "
        f"step would have fed up to {(G - 1) * (N - 1)} fewer tokens: whether that pays depends on what a fed token "
        f"costs on the hardware (the Explain page).",
    ])


# ---- the pool -------------------------------------------------------------------------------------
def pool_rows(trace, step_index: int) -> list[dict]:
    """The pool before a step's verification as table rows (oldest continuation first per key)."""
    texts = token_texts(trace)
    pool = analysis.pool_at(trace, step_index)
    rows = []
    for key, conts in pool.items():
        for rank, cont in enumerate(conts):
            rows.append({"key": visible(piece(texts, key)), "continuation": visible("".join(piece(texts, t) for t in cont)),
                         "key id": key, "continuation ids": " ".join(map(str, cont)), "age rank (0 = oldest)": rank})
    return rows


def _star_layout(graph: nx.DiGraph, keys: list[int]) -> dict:
    """Keys on a grid (in order of first appearance), each key's n-grams on a ring around it."""
    cols = max(1, math.ceil(math.sqrt(len(keys) * 1.6)))
    pos = {}
    for i, k in enumerate(keys):
        cx, cy = i % cols, -(i // cols)
        pos[("k", k)] = (cx, cy)
        ring = list(graph.successors(("k", k)))
        for r, node in enumerate(ring):
            a = 2 * math.pi * r / max(len(ring), 1)
            pos[node] = (cx + 0.32 * math.cos(a), cy + 0.32 * math.sin(a))
    return pos


def _pool_positions(pools: dict[int, dict]) -> dict:
    """Fixed node positions for every key and n-gram that appears in any of ``pools``."""
    union = nx.DiGraph()
    keys: list[int] = []
    for pool in pools.values():
        for key, conts in pool.items():
            if ("k", key) not in union:
                keys.append(key)
                union.add_node(("k", key))
            for c in conts:
                union.add_edge(("k", key), ("g", key, tuple(c)))
    return _star_layout(union, keys)


def _gram_colour(hit) -> str:
    """Colour of a continuation node: not verified / verified (matched a prefix, accepted)."""
    return GREEN if hit and hit[1] else YELLOW if hit and hit[0] else VERMILLION if hit else SKY


def _pool_frame(trace, si: int, pool: dict, pos: dict, texts) -> list[dict]:
    """Edges, continuation nodes and key nodes of the pool before step ``si``."""
    rec = trace.steps[si].record
    verified = {tuple(c): (i < len(rec.matched) and rec.matched[i] > 0, i == rec.chosen)
                for i, c in enumerate(rec.candidates)}
    before = committed_before(trace)[si]
    cur = trace.output_ids[before - 1] if before >= 1 else None
    ex, ey = [], []
    gx, gy, gc, gh = [], [], [], []
    kx, ky, kc, kt, kh = [], [], [], [], []
    for key, conts in pool.items():
        x, y = pos[("k", key)]
        kx.append(x); ky.append(y)
        kc.append(BLACK if key == cur else GREY)
        kt.append(cell_label(piece(texts, key), 6))
        kh.append(f"key {hover_label(piece(texts, key))} (id {key}): {len(conts)} n-gram(s)"
                  + ("<br><b>current token: its n-grams are this step's candidates</b>" if key == cur else ""))
        for c in conts:
            gxy = pos[("g", key, tuple(c))]
            ex += [x, gxy[0], None]
            ey += [y, gxy[1], None]
            gx.append(gxy[0]); gy.append(gxy[1])
            hit = verified.get(tuple(c)) if key == cur else None
            gc.append(_gram_colour(hit))
            gh.append(f"{hover_label(piece(texts, key))} → {esc(repr(''.join(piece(texts, t) for t in c)))}"
                      + ("" if hit is None else "<br>verified this step: " +
                         ("accepted" if hit[1] else "matched a prefix" if hit[0] else "no match")))
    return [dict(x=ex, y=ey), dict(x=gx, y=gy, marker=dict(color=gc), hovertext=gh),
            dict(x=kx, y=ky, marker=dict(color=kc), text=kt, hovertext=kh,
                 textfont=dict(color=[text_colour(c) for c in kc]))]


def _pool_title(si: int, pool: dict) -> str:
    return f"Pool before step {si}: {len(pool)} keys, {sum(len(v) for v in pool.values())} n-grams"


def pool_graph_animation(trace, page: int = 0, duration_ms: int = 900) -> go.Figure:
    """The n-gram pool as a graph (key token -> its continuations), one frame per lookahead step.

    Node positions are fixed over the page (computed on the union of all frames). Trace 0 = edges,
    trace 1 = continuation nodes, trace 2 = key nodes; frames update all three.
    """
    idx = lookahead_steps(trace)
    if not idx:
        return empty_figure("No lookahead steps recorded in this trace.")
    shown = page_items(idx, page)
    texts = token_texts(trace)
    pools = {si: analysis.pool_at(trace, si) for si in shown}
    pos = _pool_positions(pools)
    d0 = _pool_frame(trace, shown[0], pools[shown[0]], pos, texts)
    fig = go.Figure()
    fig.add_trace(go.Scatter(mode="lines", line=dict(color="#999999", width=1), hoverinfo="skip", showlegend=False, **d0[0]))
    fig.add_trace(go.Scatter(mode="markers", hoverinfo="text", showlegend=False,
                             **{**d0[1], "marker": dict(size=9, color=d0[1]["marker"]["color"], line=dict(color="#333333", width=1))}))
    fig.add_trace(go.Scatter(mode="markers+text", hoverinfo="text", showlegend=False, textposition="middle center",
                             **{**d0[2], "marker": dict(size=30, symbol="square", color=d0[2]["marker"]["color"],
                                                        line=dict(color="#333333", width=1)),
                                "textfont": dict(size=10, family=FONT["family"], color=d0[2]["textfont"]["color"])}))
    legend_entries(fig, [(GREY, "key token"), (BLACK, "key = current token")])
    legend_entries(fig, [(SKY, "n-gram continuation"), (VERMILLION, "verified, no match"),
                         (YELLOW, "verified, prefix matched"), (GREEN, "verified and accepted")], symbol="circle")
    fig.frames = [go.Frame(name=str(si), traces=[0, 1, 2],
                           data=[go.Scatter(**d) for d in _pool_frame(trace, si, pools[si], pos, texts)],
                           layout=dict(title=dict(text=_pool_title(si, pools[si])))) for si in shown]
    animation_controls(fig, [str(si) for si in shown], [str(si) for si in shown], duration_ms, prefix="step ")
    base_layout(fig, _pool_title(shown[0], pools[shown[0]]), 620, animated=True)
    xs = [p[0] for p in pos.values()] or [0]
    ys = [p[1] for p in pos.values()] or [0]
    fig.update_xaxes(visible=False, range=[min(xs) - 0.6, max(xs) + 0.6])
    fig.update_yaxes(visible=False, range=[min(ys) - 0.6, max(ys) + 0.6])
    return fig


def pool_graph_still(trace, si: int) -> go.Figure:
    """The pool graph before step ``si`` as a still (the inspector's: its step control drives it)."""
    idx = lookahead_steps(trace)
    if si not in idx:
        return empty_figure(f"Step {si} is not a lookahead step.")
    return freeze(pool_graph_animation(trace, page_of(idx.index(si))), str(si))


# ---- the attention mask ---------------------------------------------------------------------------
# Rule ids of ``decoding.methods.lookahead_mask`` -> (colour, legend); None = masked
MASK_COLOURS: dict[str | None, tuple[str, str]] = {
    None: ("#F4F4F4", "masked (does not see)"),
    "current": (BLACK, "sees the current token"),
    "level0_causal": (SKY, "sees level 0 up to its column"),
    "own_column": (BLUE, "sees its own column (levels 1..l)"),
    "own_candidate": (GREEN, "sees its candidate's earlier tokens"),
}


def _mask_label(r: dict) -> tuple[str, str]:
    """Short tick label and long description of one fed token."""
    if r["kind"] == "current":
        return "cur", "the current token (position P)"
    if r["kind"] == "window":
        return (f"L{r['level']}c{r['column']}",
                f"window level {r['level']}, column {r['column']} (position P+{r['offset']})")
    return (f"g{r['candidate'] + 1}t{r['index'] + 1}",
            f"candidate {r['candidate'] + 1}, token {r['index'] + 1} (position P+{r['offset']})")


def _layout_cells(layout: list[dict], labels: list[str]) -> tuple[list[list[str | None]], list[list[str]]]:
    """(rule id per query row and key column (None = masked), hover text) of a fed layout."""
    ids, hover = [], []
    for q, ql in zip(layout, labels):
        ids.append([masks.rule(q, k) for k in layout])
        hover.append([f"{ql}<br>sees {kl}<br>why: {esc(masks.SEES[r])}" if r is not None else
                      f"{ql}<br>does NOT see {kl}<br>why: {esc(masks.BLOCKED[masks.blocked_rule(q, k)])}"
                      for k, kl, r in zip(layout, labels, ids[-1])])
    return ids, hover


def mask_cells(W: int, N: int, G: int, levels: int) -> tuple[list[dict], list[list[str | None]], list[list[str]]]:
    """(layout, rule id per query row and key column (None = masked), hover text) of one step's mask."""
    layout = masks.lookahead_layout(W, N, G, levels)
    ids, hover = _layout_cells(layout, [_mask_label(r)[1] for r in layout])
    return layout, ids, hover


def _mask_heatmap(ids: list[list[str | None]], hover: list[list[str]], ticks: list[str], title: str,
                  tick_size: int = 9) -> go.Figure:
    """Who sees whom as a heatmap (rows = queries, columns = keys, numeric axes labelled ``ticks``)."""
    order = list(MASK_COLOURS)
    z = [[order.index(r) for r in row] for row in ids]
    n = len(order)
    scale = []
    for i, (colour, _) in enumerate(MASK_COLOURS.values()):
        scale += [[i / n, colour], [(i + 1) / n, colour]]
    q = len(ids)
    fig = go.Figure(go.Heatmap(z=z, x=list(range(q)), y=list(range(q)), text=hover, hoverinfo="text", colorscale=scale,
                               zmin=-0.5, zmax=n - 0.5, showscale=False, xgap=1, ygap=1))
    legend_entries(fig, MASK_COLOURS.values())
    lines = title.count("<br>") + 1
    base_layout(fig, title, min(1000, 320 + 14 * q) + 22 * (lines - 1))
    _legend_below(fig, lines, 190)
    axis = dict(tickmode="array", tickvals=list(range(q)), ticktext=ticks, tickfont=dict(size=tick_size),
                showgrid=False, zeroline=False)
    fig.update_xaxes(title_text="key (is seen)", side="bottom", tickangle=-90, constrain="domain",
                     range=[-0.5, q - 0.5], **axis)
    fig.update_yaxes(title_text="query (sees)", range=[q - 0.5, -0.5], scaleanchor="x", **axis)
    fig.update_layout(meta=dict(mask_cells=q))
    return fig


def _legend_below(fig: go.Figure, title_lines: int, bottom: int) -> None:
    """A figure for a page column: the legend at the bottom (a narrow column stacks it), the top
    margin the title's lines'."""
    fig.update_layout(legend=dict(orientation="h", yref="container", y=0, yanchor="bottom", x=0, xanchor="left"),
                      margin=dict(t=30 + 24 * title_lines, b=bottom),  # as style.fit_projector's titles
                      title=dict(y=1, yanchor="top", pad=dict(t=10 + 22 * (title_lines - 1))))


def mask_figure(W: int, N: int, G: int, levels: int | None = None) -> go.Figure:
    """Heatmap of who sees whom in one lookahead forward (rows = queries, columns = keys).

    Every fed token also sees the whole committed KV cache (not drawn). Hover gives the reason.
    """
    levels = N - 1 if levels is None else levels
    layout, ids, hover = mask_cells(W, N, G, levels)
    q = len(layout)
    return _mask_heatmap(ids, hover, [_mask_label(r)[0] for r in layout],
                         f"Attention mask of one step: W={W}, N={N}, {G} candidates, {levels} level(s) · "
                         f"{q} fed tokens (all also see the KV cache)")


# ---- one step, everything at once (the page's step inspector and the lecture) ----------------------
def step_layout(trace, si: int, max_columns: int | None = None, max_candidates: int | None = None) -> list[dict]:
    """The tokens step ``si`` fed, in the order fed, as ``lookahead_mask.lookahead_layout`` rows with
    their token ("token"): the current token, the window as fed (none on a step whose budget left it
    out), the verified candidates (each as long as it was fed). ``max_columns`` / ``max_candidates``:
    an excerpt (a slide's): the window's first columns, and the accepted candidate with the first
    others; the rows keep their real column and candidate numbers, and the rules are the same."""
    rec = trace.steps[si].record
    before = committed_before(trace)[si]
    rows = [dict(kind="current", level=None, column=None, candidate=None, index=0, offset=0,
                 token=trace.output_ids[before - 1])]
    W = len(rec.window[0]) if rec.window else 0
    cols = range(W if max_columns is None else min(W, max_columns))
    for l, level in enumerate(rec.window):
        rows += [dict(kind="window", level=l, column=j, candidate=None, index=None, offset=1 + l + j, token=level[j])
                 for j in cols]
    order = list(range(len(rec.candidates)))
    if max_candidates is not None:
        first = ([rec.chosen] if rec.chosen >= 0 else []) + [c for c in order if c != rec.chosen]
        order = sorted(first[:max_candidates])
    for c in order:
        rows += [dict(kind="candidate", level=None, column=None, candidate=c, index=i, offset=1 + i, token=tok)
                 for i, tok in enumerate(rec.candidates[c])]
    return rows


def step_mask_figure(trace, si: int, max_columns: int | None = None, max_candidates: int | None = None) -> go.Figure:
    """The attention mask step ``si`` really used, its rows and columns labelled with the tokens fed
    (see ``step_layout``; hover: both tokens and the rule). A budgeted step (``budget=auto``) fed its
    candidates as a prefix tree (a shared prefix once): drawn here one candidate per row block."""
    if not isinstance(trace.steps[si].record, LookaheadRecord):
        return empty_figure(f"Step {si} is not a lookahead step.")
    texts = token_texts(trace)
    layout = step_layout(trace, si, max_columns, max_candidates)
    labels = [f"{_mask_label(r)[1]}: token {hover_label(piece(texts, r['token']))} (id {r['token']})" for r in layout]
    ids, hover = _layout_cells(layout, labels)
    ticks = [f"{_mask_label(r)[0]} {cell_label(piece(texts, r['token']), 6)}" for r in layout]
    rec = trace.steps[si].record
    full = len(layout) == 1 + len(rec.window) * (len(rec.window[0]) if rec.window else 0) + \
        sum(len(c) for c in rec.candidates)
    what = [f"{len(rec.window)} level(s) of the window" if rec.window else "no window (its budget left it out)",
            f"{len(rec.candidates)} candidate(s)"]
    title = (f"Step {si}'s attention mask · the current token, {' and '.join(what)}"
             + ("" if full else f" · an excerpt: {len(layout)} of its fed tokens")
             + (" · candidates fed as a prefix tree, drawn one per row block" if trace.params.get("budget") == "auto" else ""))
    return _mask_heatmap(ids, hover, ticks, wrap_title(title, 60))


def pool_entries(trace, si: int) -> list[dict]:
    """The pool's n-grams for step ``si``'s current token (the key), oldest first, as the step saw
    them, and what verification made of each: one dict per entry with its tokens ("tokens"), the
    candidate it was fed as (None: not fed), how many tokens matched and whether it was accepted."""
    rec = trace.steps[si].record
    before = committed_before(trace)[si]
    cur = trace.output_ids[before - 1]
    out = []
    for cont in analysis.pool_at(trace, si).get(cur, []):
        c = next((i for i, cand in enumerate(rec.candidates) if cand[:len(cont)] == list(cont)
                  or list(cont)[:len(cand)] == cand), None)
        out.append(dict(tokens=list(cont), candidate=c, matched=rec.matched[c] if c is not None else 0,
                        accepted=c is not None and c == rec.chosen, origin=rec.origins[c] if c is not None else None))
    return out


def pool_entries_figure(trace, si: int) -> go.Figure:
    """The pool's entries for step ``si``'s current token as rows of cells: the key (black), then
    the continuation, coloured by verification (accepted / matched prefix / not matched; sky blue:
    in the pool but not fed this step)."""
    if not isinstance(trace.steps[si].record, LookaheadRecord):
        return empty_figure(f"Step {si} is not a lookahead step.")
    texts = token_texts(trace)
    cur = trace.output_ids[committed_before(trace)[si] - 1]
    entries = pool_entries(trace, si)
    if not entries:
        return empty_figure(f"Before step {si} the pool held no n-gram starting with the current token "
                            f"'{esc(visible(piece(texts, cur)))}': nothing to verify.", height=200)
    xs, ys, fill, text, hover = [], [], [], [], []
    N = trace.params["N"]
    for r, e in enumerate(entries):
        xs.append(0); ys.append(r); fill.append(BLACK); text.append(cell_label(piece(texts, cur), 6))
        hover.append(f"key: the current token {hover_label(piece(texts, cur))} (id {cur})")
        for i, tok in enumerate(e["tokens"]):
            if e["candidate"] is None:
                kind, colour = "in the pool, not fed this step", SKY
            elif i < e["matched"]:
                kind, colour = ("matched and accepted", GREEN) if e["accepted"] else ("matched (not chosen)", YELLOW)
            else:
                kind, colour = "fed, not matched", GREY
            xs.append(1 + i); ys.append(r); fill.append(colour); text.append(cell_label(piece(texts, tok), 6))
            where = f"candidate {e['candidate'] + 1}" if e["candidate"] is not None else "not fed"
            hover.append(f"entry {r + 1} ({where}), token {i + 1} at position t+{1 + i}: {kind}"
                         f"<br>token {hover_label(piece(texts, tok))} (id {tok})")
    fed = sum(e["candidate"] is not None for e in entries)
    title = wrap_title(f"Pool before step {si}: {len(entries)} n-gram(s) for '{esc(visible(piece(texts, cur)))}' · "
                       f"{fed} verified", 34)
    fig = go.Figure(go.Scatter(x=xs, y=ys, mode="markers+text", text=text, hovertext=hover, hoverinfo="text",
                               showlegend=False, textposition="middle center",
                               textfont=dict(color=[text_colour(c) for c in fill], size=11, family=FONT["family"]),
                               marker=dict(symbol="square", size=CELL, color=fill, line=dict(color="#555555", width=1))))
    legend_entries(fig, [(BLACK, "key = the current token"), (GREEN, "matched and accepted"),
                         (YELLOW, "matched (not chosen)"), (GREY, "fed, not matched"), (SKY, "in the pool, not fed")])
    width = max(N, max((len(e["tokens"]) for e in entries), default=0) + 1)
    lines = title.count("<br>") + 1
    base_layout(fig, title, 200 + 22 * lines + (CELL + 6) * len(entries))
    _legend_below(fig, lines, 170)
    fig.update_xaxes(range=[-0.6, width - 0.4], fixedrange=True, showgrid=False, zeroline=False, tickmode="array",
                     tickvals=list(range(width)), ticktext=["key (t)"] + [f"t+{i}" for i in range(1, width)])
    fig.update_yaxes(range=[len(entries) - 0.4, -0.6], fixedrange=True, showgrid=False, zeroline=False,
                     tickmode="array", tickvals=list(range(len(entries))),
                     ticktext=[f"entry {r + 1}" for r in range(len(entries))])
    return fig


def telling_step(trace) -> int | None:
    """The step an inspector opens on: the first whose accepted candidate matched the most tokens
    (else the first with candidates, else the first lookahead step)."""
    idx = lookahead_steps(trace)
    recs = {i: trace.steps[i].record for i in idx}
    best = max((i for i in idx if recs[i].chosen >= 0), key=lambda i: (recs[i].matched[recs[i].chosen], -i), default=None)
    return best if best is not None else next((i for i in idx if recs[i].candidates), idx[0] if idx else None)


def position_still(trace, si: int) -> go.Figure:
    """Step ``si`` of the position view (the paper's picture) as a still."""
    idx = lookahead_steps(trace)
    if si not in idx:
        return empty_figure(f"Step {si} is not a lookahead step.")
    return freeze(position_animation(trace, page_of(idx.index(si))), str(si))
