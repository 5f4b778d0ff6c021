"""Colours, token labels and the small helpers every figure builder shares.

The palette is Okabe & Ito's colour-blind-safe set (https://jfly.uni-koeln.de/color/): eight
colours that stay distinct for the common colour-vision deficiencies and on a washed-out projector.
Every colour that carries meaning has a legend entry (see ``legend_entries``).

Model text reaches Plotly (which renders a subset of HTML in text and hover labels) and Streamlit
markdown; ``esc`` escapes it for both.
"""

from __future__ import annotations

import html
from typing import Iterable

import plotly.graph_objects as go

from decoding.methods import REGISTRY

# Okabe-Ito
BLACK = "#000000"
ORANGE = "#E69F00"
SKY = "#56B4E9"
GREEN = "#009E73"  # bluish green
YELLOW = "#F0E442"
BLUE = "#0072B2"
VERMILLION = "#D55E00"
PURPLE = "#CC79A7"  # reddish purple
GREY = "#BBBBBB"
LIGHT = "#E8E8E8"

DARK_FILLS = {BLACK, BLUE, GREEN, VERMILLION}

# What narration and captions call each colour (say the colour drawn: vermillion is not "red")
COLOUR_NAMES = {BLACK: "black", ORANGE: "orange", SKY: "sky blue", GREEN: "green", YELLOW: "yellow", BLUE: "blue",
                VERMILLION: "vermillion", PURPLE: "reddish purple", GREY: "grey", LIGHT: "light grey",
                "#882255": "wine"}


def colour_name(colour: str) -> str:
    return COLOUR_NAMES.get(colour, colour)


def text_colour(fill: str) -> str:
    """Black or white text, whichever reads on ``fill``."""
    return "#FFFFFF" if fill in DARK_FILLS else "#000000"


# Jacobi cell states (decoding.analysis.jacobi_cell_states: CLLM's reading of each state) -> (colour, legend label).
# Fast-forwarded is yellow, not orange: orange and vermillion ("wrong") looked alike on a projector
# (CIELAB distance 18 under deuteranopia, lightness 71 vs 54); yellow stays far from vermillion for
# every colour vision (tests/test_viz.py checks it under simulated colour-vision deficiencies).
JACOBI_STATES: dict[str, tuple[str, str]] = {
    "committed": (GREY, "committed"),
    "new": (BLUE, "made right by this forward, as AR would"),
    "fast_forward": (YELLOW, "fast-forwarded: made right by this forward too"),
    "stationary": (GREEN, "stationary (right early, never changes)"),
    "correct": (SKY, "right, not stationary"),
    "wrong": (VERMILLION, "wrong"),
}

# Provenance labels (decoding.analysis.provenance) -> (colour, legend label)
PROVENANCE: dict[str, tuple[str, str]] = {
    "prefill": (GREY, "prefill (first token)"),
    "step": (BLUE, "model's own next token (as AR)"),
    "jacobi": (ORANGE, "Jacobi: a guess confirmed (fast-forwarded or stationary)"),
    "pool": (GREEN, "lookahead pool (window n-gram)"),
    "prompt_pool": (SKY, "lookahead pool (prompt n-gram)"),
    "output_pool": (PURPLE, "lookahead pool (output n-gram)"),
    "pld": (VERMILLION, "prompt-lookup draft"),
    "recycled": (YELLOW, "Token Recycling: a successor from the matrix"),
    "suffix": (BLACK, "suffix drafting: what followed an earlier match of the text's end"),
}

# Each method's display name and colour, from the method registry (decoding/methods/)
METHOD_COLOURS: dict[str, str] = {m: s.colour for m, s in REGISTRY.items()}
METHOD_NAMES: dict[str, str] = {m: s.label for m, s in REGISTRY.items()}


def method_name(key: str) -> str:
    """Display name of a method or a bench variant: "pld:auto" -> "Prompt lookup (budget auto)"."""
    base, _, variant = key.partition(":")
    name = METHOD_NAMES.get(base, base)
    if not variant:
        return name
    parts = ["budget auto" if v == "auto" else v for v in variant.split(":")]
    return f"{name} ({', '.join(parts)})"


def method_colour(key: str) -> str:
    """A variant is drawn in its method's colour."""
    return METHOD_COLOURS.get(key.partition(":")[0], GREY)

FONT = dict(family="DejaVu Sans Mono, Menlo, Consolas, monospace", size=14)
MAX_FRAMES = 200  # frames per animated figure; longer traces are paged


def esc(s: str) -> str:
    """Escape model text for Plotly labels and HTML text: ``<``, ``>`` and ``&`` only. Plotly
    decodes ``&lt;`` ``&gt;`` ``&amp;`` but not ``&quot;`` (a ``"`` token showed as &quot;); quotes
    need escaping only inside an HTML attribute (``esc_attr``)."""
    return html.escape(s, quote=False)


def esc_attr(s: str) -> str:
    """Escape text for an HTML attribute value in double quotes."""
    return html.escape(s, quote=True)


def visible(piece: str) -> str:
    """Make whitespace visible: space -> ␣, newline -> ↵, tab -> ⇥ (unescaped)."""
    return piece.replace(" ", "␣").replace("\n", "↵").replace("\r", "").replace("\t", "⇥") or "∅"


def cell_label(piece: str, width: int = 7) -> str:
    """Short escaped label for a token cell: whitespace visible, cut to ``width`` characters."""
    v = visible(piece)
    if len(v) > width:
        v = v[: width - 1] + "…"
    return esc(v)


def hover_label(piece: str) -> str:
    """Escaped full token text for hover boxes, quoted so whitespace shows."""
    return esc(repr(piece))


def token_texts(trace) -> dict[int, str]:
    """Token id -> text piece, from everything the trace carries.

    The trace stores the text of prompt and output tokens. Guesses that never made it into the
    output (wrong Jacobi guesses, window tokens) only have a text if the trace carries a wider
    ``vocab`` map; otherwise ``piece`` falls back to ``⟨id⟩``.
    """
    m: dict[int, str] = {}
    for ids, pieces in ((trace.prompt_ids, trace.prompt_pieces), (trace.output_ids, trace.output_pieces)):
        if len(pieces) == len(ids):
            m.update(zip(ids, pieces))
    extra = getattr(trace, "vocab", None) or {}
    for k, v in dict(extra).items():
        try:
            m.setdefault(int(k), str(v))
        except (TypeError, ValueError):
            continue
    return m


def piece(texts: dict[int, str], tok: int) -> str:
    return texts.get(tok, f"⟨{tok}⟩")


def state_colour(state: str) -> str:
    """The name of a Jacobi state's colour, for narration ("vermillion", never a guess like "red")."""
    return colour_name(JACOBI_STATES[state][0])


def legend_entries(fig: go.Figure, items: Iterable[tuple[str, str]], symbol: str = "square", group: str = "") -> None:
    """Add legend-only traces (one per (colour, label)) so every colour is explained."""
    for colour, label in items:
        fig.add_trace(go.Scatter(
            x=[None], y=[None], mode="markers", name=label, showlegend=True, hoverinfo="skip",
            legendgroup=group or label,
            marker=dict(symbol=symbol, size=14, color=colour, line=dict(color="#333333", width=1)),
        ))


def base_layout(fig: go.Figure, title: str, height: int, animated: bool = False) -> None:
    """Shared look: title top left, legend in one band above the plot, room for the slider below."""
    fig.update_layout(
        title=dict(text=title, x=0.0, xanchor="left", y=0.995, yanchor="top", yref="container",
                   font=dict(size=16)),
        height=height, template="plotly_white", font=FONT,
        margin=dict(l=10, r=10, t=80, b=110 if animated else 20), hoverlabel=dict(font=FONT),
        legend=dict(orientation="h", yanchor="bottom", y=1.01, x=0, xanchor="left", font=dict(size=12)),
    )


def empty_figure(message: str, height: int = 240) -> go.Figure:
    """A figure that says why there is nothing to draw (never an empty chart)."""
    fig = go.Figure()
    fig.add_annotation(text=esc(message), showarrow=False, x=0.5, y=0.5, xref="paper", yref="paper",
                       font=dict(size=16))
    fig.update_xaxes(visible=False)
    fig.update_yaxes(visible=False)
    base_layout(fig, "", height)
    return fig


def pages(n_items: int, per_page: int = MAX_FRAMES) -> list[tuple[int, int]]:
    """Split ``n_items`` frames into pages of at most ``per_page``: [(start, stop), ...]."""
    if n_items <= 0:
        return [(0, 0)]
    return [(a, min(a + per_page, n_items)) for a in range(0, n_items, per_page)]


def page_items(items: list, page: int, per_page: int = MAX_FRAMES) -> list:
    """The items on page ``page`` of ``pages(len(items), per_page)`` (a page out of range gives
    the nearest one)."""
    spans = pages(len(items), per_page)
    a, b = spans[min(max(page, 0), len(spans) - 1)]
    return items[a:b]


def page_of(i: int, per_page: int = MAX_FRAMES) -> int:
    """The page that holds item ``i``."""
    return i // per_page


def animation_controls(fig: go.Figure, frame_names: list[str], labels: list[str], duration_ms: int = 700,
                       prefix: str = "") -> None:
    """Play / Pause buttons and a slider over the named frames, below the plot (redraw on, so
    text and titles update with the colours)."""
    play = dict(frame=dict(duration=duration_ms, redraw=True), fromcurrent=True,
                transition=dict(duration=0), mode="immediate")
    pause = dict(frame=dict(duration=0, redraw=True), transition=dict(duration=0), mode="immediate")
    fig.update_layout(
        updatemenus=[dict(
            type="buttons", direction="left", showactive=False, x=0.0, y=0.0, xanchor="left", yanchor="top",
            pad=dict(t=62, r=10),
            buttons=[dict(label="▶ Play", method="animate", args=[None, play]),
                     dict(label="❚❚ Pause", method="animate", args=[[None], pause])],
        )],
        sliders=[dict(
            active=0, x=0.2, y=0.0, len=0.8, xanchor="left", yanchor="top", pad=dict(t=40, b=0),
            currentvalue=dict(prefix=prefix, visible=True, xanchor="right", font=dict(size=13)),
            transition=dict(duration=0),
            steps=[dict(method="animate", label=lab, args=[[name], pause])
                   for name, lab in zip(frame_names, labels)],
        )],
    )


# ---- lecture helpers: one frame of an animation, highlighted regions, projector type -------------
HIGHLIGHT = BLACK


def freeze(fig: go.Figure, frame_name: str) -> go.Figure:
    """The figure as a still of frame ``frame_name``: the frame's data and title replace the
    first traces, and the animation controls go."""
    frame = next((f for f in fig.frames if f.name == frame_name), None)
    if frame is not None:
        for i, d in zip(frame.traces or range(len(frame.data)), frame.data):
            fig.data[i].update({k: v for k, v in d.to_plotly_json().items() if k != "type"})
        title = frame.layout.title.text if frame.layout and frame.layout.title else None
        if title:
            fig.update_layout(title_text=title)
    fig.frames = []
    fig.layout.updatemenus, fig.layout.sliders = (), ()
    fig.update_layout(margin=dict(b=20))
    return fig


def highlight_boxes(fig: go.Figure, boxes: Iterable[tuple[float, float, float, float]], label: str = "",
                    pad_y: float = 0.5) -> go.Figure:
    """Thick dashed black frames around cell regions (x0, x1, y0, y1 in cell units, inclusive):
    a shape, not a colour, so it reads for every colour vision and on any projector."""
    for i, (x0, x1, y0, y1) in enumerate(boxes):
        fig.add_shape(type="rect", x0=x0 - 0.5, x1=x1 + 0.5, y0=y0 - pad_y, y1=y1 + pad_y, xref="x", yref="y",
                      line=dict(color=HIGHLIGHT, width=5, dash="dash"), fillcolor="rgba(0,0,0,0)", layer="above")
        if label and i == 0:  # a tag on the box's upper edge, outside it
            rng = fig.layout.yaxis.range
            down = rng is not None and rng[0] > rng[1]  # reversed axis: the top row has the smallest y
            fig.add_annotation(x=x0 - 0.5, y=(y0 - pad_y) if down else (y1 + pad_y), xref="x", yref="y", text=esc(label),
                               showarrow=False, xanchor="left", yanchor="bottom", font=dict(size=13, color="#FFFFFF"),
                               bgcolor=HIGHLIGHT, borderpad=3)
    return fig


PROJECTOR_TITLE_CHARS = 100  # characters of a 16 px monospace title that fit the page's width


def wrap_title(title: str, width: int) -> str:
    """A long title broken into lines (Plotly titles do not wrap) at its ' · ' separators, or at
    spaces where a part alone is too long."""
    parts = title.split(" · ")
    lines, cur = [], ""
    for part in parts:
        cand = f"{cur} · {part}" if cur else part
        if cur and len(cand) > width:
            lines.append(cur)
            cand = part
        cur = cand
    lines.append(cur)
    out = []
    for line in lines:
        while len(line) > width and " " in line[:width]:
            cut = line.rfind(" ", 0, width)
            out.append(line[:cut])
            line = line[cut + 1:]
        out.append(line)
    return "<br>".join(out)


# ---- projector mode: a still that fits the screen, cells sized to it ----------------------------------
PROJECTOR_HEIGHT = 870  # px of the figure: the lecture's slide fits a 1000 px high window (and 1080)
PROJECTOR_WIDTH = 760  # px of the figure's column at a 1400 px wide window (wider windows: more room)
MIN_CELL = 24  # px: the smallest token cell a class reads from the back row


def _legend_only_what_is_drawn(fig: go.Figure) -> None:
    """Hide the legend entries of colours this still does not draw (a slide's legend says what is
    on it; the halo entry stays when there are changed cells)."""
    fills, lines = set(), set()
    for tr in fig.data:
        m = getattr(tr, "marker", None)
        if m is None or not tr.x or all(x is None for x in tr.x) or tr.showlegend:
            continue
        fills |= set(m.color) if isinstance(m.color, (list, tuple)) else {m.color}
        if m.line is not None and isinstance(m.line.color, (list, tuple)):
            widths = m.line.width if isinstance(m.line.width, (list, tuple)) else [m.line.width] * len(m.line.color)
            lines |= {c for c, w in zip(m.line.color, widths) if (w or 0) >= 3}
    for tr in fig.data:
        if not tr.showlegend or tr.name == HALO_NAME or getattr(tr, "mode", "") != "markers":
            if tr.name == HALO_NAME:
                tr.showlegend = any(x is not None for x in tr.x)
            continue
        m = tr.marker
        outline = m.line is not None and (m.line.width or 0) >= 3
        tr.showlegend = (m.line.color in lines) if outline else (m.color in fills)


def recut(label: str, width: int) -> str:
    """An escaped cell label cut again to ``width`` characters (whitespace stays visible); a label of
    several lines (``<br>``: a token over its score) is cut line by line."""
    if "<br>" in (label or ""):
        return "<br>".join(recut(part, width) for part in label.split("<br>"))
    raw = html.unescape(label or "")
    full = raw[:-1] if raw.endswith("…") else raw
    return esc(raw if len(raw) <= width else full[: max(width - 1, 1)] + "…")


def fit_projector(fig: go.Figure, height: int = PROJECTOR_HEIGHT, width: int = PROJECTOR_WIDTH) -> go.Figure:
    """A still of a cell grid for a projector: at most ``height`` px tall, the title wrapped to the
    width, and every cell as large as the plot area allows (the axes' ranges are the grid: one unit
    per cell) with type that fits it. The legend is not drawn in the figure (the page lists
    ``legend_items`` beside it, only the colours this still draws), so all the height goes to the
    cells. ``cell_px(fig)`` says what size the cells got."""
    _legend_only_what_is_drawn(fig)
    chars = int((width - 30) / (0.62 * 18))
    title = wrap_title(fig.layout.title.text or "", chars)
    left, lines = (120 if fig.layout.yaxis.visible is not False else 24), title.count("<br>") + 1  # room for row names
    top, bottom = 30 + 24 * lines, 44
    xr, yr = fig.layout.xaxis.range, fig.layout.yaxis.range
    xspan, yspan = abs(xr[1] - xr[0]), abs(yr[1] - yr[0])
    unit = min((height - top - bottom) / yspan, (width - left - 20) / xspan, 100)  # a tiny grid: cells, not tiles
    # a grid limited by the width (a Jacobi block's two rows): no empty band, rows still apart
    height = min(height, int(top + bottom + min((height - top - bottom) / yspan, 2.2 * unit) * yspan) + 1)
    cell = int(unit * 0.92)
    text_size = max(13, min(22, int(cell * 0.42)))
    label_chars = max(2, int(cell / (0.6 * text_size)))
    fig.update_layout(height=height, font=dict(size=15), showlegend=False,
                      title=dict(text=title, font=dict(size=18), y=1, yanchor="top",
                                 pad=dict(t=10 + 22 * (lines - 1))),  # plotly lifts the lines after the first
                      margin=dict(t=top, b=bottom, l=left, r=20), meta=dict(cell_px=cell, unit_px=unit))
    fig.update_xaxes(title_text=None, tickfont=dict(size=13))
    for tr in fig.data:
        marker = getattr(tr, "marker", None)
        if marker is None or tr.x is None or not len([x for x in tr.x if x is not None]):
            continue
        if isinstance(marker.size, (int, float)) and tr.mode and "markers" in tr.mode:
            marker.size = cell + HALO_GAP if tr.name == HALO_NAME else cell
        if tr.text is not None and tr.mode and "text" in tr.mode:
            tr.text = [recut(t, label_chars) for t in tr.text]
            tr.textfont.size = text_size
    return fig


def fit_heatmap(fig: go.Figure, height: int = PROJECTOR_HEIGHT, width: int = PROJECTOR_WIDTH) -> go.Figure:
    """``fit_projector`` for a square heatmap (a mask: one unit per cell on both axes, its tick
    labels the tokens fed): at most ``height`` px tall and ``width`` px wide, the cells as large as
    that allows; the legend goes beside it, as for the other slides (the colours of the cells drawn)."""
    z = fig.data[0].z
    n, drawn = len(z), {v for row in z for v in row}
    scale = fig.data[0].colorscale  # value i spans [i / k, (i + 1) / k]: the colour of step 2i
    colours = {scale[2 * int(v)][1] for v in drawn if 2 * int(v) < len(scale)}
    for tr in fig.data[1:]:
        if tr.showlegend and getattr(tr, "marker", None) is not None:
            tr.showlegend = tr.marker.color in colours
    chars = int((width - 30) / (0.62 * 18))
    title = wrap_title(fig.layout.title.text or "", chars)
    lines = title.count("<br>") + 1
    longest = max((len(html.unescape(str(t))) for t in fig.layout.xaxis.ticktext or ()), default=4)
    label = int(longest * 0.62 * 13) + 30  # px of the tick labels (13 px monospace) and the gap
    top, bottom, left = 30 + 24 * lines, label, label
    unit = min((height - top - bottom) / n, (width - left - 20) / n, 90)  # a small mask: cells, not tiles
    fig.update_layout(height=int(top + bottom + unit * n) + 1, width=width, showlegend=False, font=dict(size=15),
                      title=dict(text=title, font=dict(size=18), y=1, yanchor="top", pad=dict(t=10 + 22 * (lines - 1))),
                      margin=dict(t=top, b=bottom, l=left, r=20), meta=dict(cell_px=int(unit) - 1, unit_px=unit))
    fig.update_xaxes(title_text=None, tickfont=dict(size=13))
    fig.update_yaxes(title_text=None, tickfont=dict(size=13))
    return fig


def legend_items(fig: go.Figure) -> list[dict]:
    """The figure's legend as data (for a legend drawn beside it): one dict per entry shown, with
    its fill, outline colour and width, symbol and label."""
    out = []
    for tr in fig.data:
        if tr.showlegend and tr.name and getattr(tr, "marker", None) is not None:
            m = tr.marker
            out.append(dict(label=tr.name, fill=m.color if isinstance(m.color, str) else "#FFFFFF",
                            line=m.line.color if m.line is not None and isinstance(m.line.color, str) else "#333333",
                            width=m.line.width if m.line is not None and isinstance(m.line.width, (int, float)) else 1,
                            symbol=m.symbol or "square"))
    return out


def cell_px(fig: go.Figure) -> int:
    """The cell size (px) ``fit_projector`` gave the figure's cells."""
    return int((fig.layout.meta or {}).get("cell_px", 0))


HALO_NAME = "changed since the previous iteration"  # the trace of open squares around changed cells
HALO_GAP = 10  # px: a halo is this much larger than its cell
HALO = "#882255"  # wine (Paul Tol's muted scheme): darker than every fill, and a ring, not a fill


def mark_changed(fig: go.Figure, cells: list[tuple[float, float]], cell: int) -> go.Figure:
    """Open squares (wine) around the cells at ``cells`` (data coordinates), ``cell`` px
    cells: what changed since the previous iteration. Always one trace, with a legend entry."""
    xs, ys = [c[0] for c in cells] or [None], [c[1] for c in cells] or [None]
    fig.add_trace(go.Scatter(x=xs, y=ys, mode="markers", name=HALO_NAME, showlegend=True, hoverinfo="skip",
                             marker=dict(symbol="square-open", size=cell + HALO_GAP, color=HALO,
                                         line=dict(color=HALO, width=3))))
    return fig
