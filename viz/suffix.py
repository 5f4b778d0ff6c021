"""Suffix drafting views (decoding/methods/suffix.py, decoding.trace.SuffixRecord): the matched suffix
in the text it came from, and the draft tree with the frequency scores that chose it.

Plain data in, Plotly figures and escaped HTML out; no torch.
"""

from __future__ import annotations

from types import SimpleNamespace

import plotly.graph_objects as go

from viz.recycling import FED, tree_layout
from viz.style import (BLACK, BLUE, GREY, PROVENANCE, base_layout, cell_label, empty_figure, esc, hover_label,
                       legend_entries, piece, text_colour, token_texts)

SUFFIX, RECYCLED = PROVENANCE["suffix"][0], PROVENANCE["recycled"][0]
# what a token of the text is in a step's match (match_pieces) -> (background, legend label)
MATCH_KINDS = {"suffix": ("#56B4E9", "the text's end: the suffix matched"),
               "earlier": ("#F0E442", "its latest earlier occurrence"),
               "next": ("#E69F00", "what followed it there: the draft's first token")}
WHERE = {"prompt": "in the prompt", "output": "earlier in the output", "earlier": "in an earlier run's output",
         "fallback": "too short to rely on: Token Recycling's matrix drafted too", "": "nowhere: no draft"}


def suffix_steps(trace) -> list[int]:
    """Indices of the steps that carry a suffix-drafting record."""
    return [s.index for s in trace.steps if s.record is not None]


def _rec(trace, si: int):
    return next(s.record for s in trace.steps if s.index == si)


def text_before(trace, si: int) -> list[int]:
    """prompt + output as they stood before step ``si`` (the text the step matched against)."""
    later = sum(len(s.tokens) for s in trace.steps if s.index >= si)
    return list(trace.prompt_ids) + list(trace.output_ids[:len(trace.output_ids) - later])


def match_pieces(trace, si: int, context: int = 12) -> list[tuple[int, int, str]]:
    """The tokens to show for step ``si``'s match: (index in prompt + output, token, kind) with kind
    "suffix", "earlier", "next", "" (context) or "gap" (token -1: text left out), in text order."""
    ids, r = text_before(trace, si), _rec(trace, si)
    kinds: dict[int, str] = {}
    m, n = r.match, len(ids)
    for i in range(max(n - m, 0), n):
        kinds[i] = "suffix"
    if r.where in ("prompt", "output") and 0 <= r.source < n:
        for i in range(max(r.source - m, 0), r.source):
            kinds.setdefault(i, "earlier")
        kinds.setdefault(r.source, "next")
    shown = set(range(max(n - m - context, 0), n))
    if r.where in ("prompt", "output"):
        shown |= set(range(max(r.source - m - context, 0), min(r.source + context, n)))
    out, last = [], -1
    for i in sorted(shown):
        if last >= 0 and i > last + 1:
            out.append((-1, -1, "gap"))
        out.append((i, ids[i], kinds.get(i, "")))
        last = i
    return out


def match_html(trace, si: int, context: int = 12) -> str:
    """The text around step ``si``'s match as HTML: the suffix, its earlier occurrence and what followed it
    highlighted (all model text escaped)."""
    texts, spans = token_texts(trace), []
    for i, t, kind in match_pieces(trace, si, context):
        if kind == "gap":
            spans.append('<span style="color:#777"> … </span>')
            continue
        bg = MATCH_KINDS[kind][0] if kind else "transparent"
        label = MATCH_KINDS[kind][1] if kind else "context"
        spans.append(f'<span title="{esc(label)} · index {i}" style="background:{bg};padding:1px 1px;border-radius:3px;'
                     f'white-space:pre-wrap">{esc(piece(texts, t)).replace(chr(10), "↵<br>")}</span>')
    legend = "".join(f'<span style="background:{c};padding:1px 6px;margin-right:6px;border-radius:3px;font-size:13px">'
                     f'{esc(lab)}</span>' for c, lab in MATCH_KINDS.values())
    return (f"<div>{legend}</div><div style=\"font-family:monospace;font-size:15px;line-height:1.9;\">"
            + "".join(spans) + "</div>")


def match_figure(trace, si: int, context: int = 6, per_row: int = 12) -> go.Figure:
    """Step ``si``'s match as token cells, ``per_row`` to a row in text order (``match_pieces``):
    the text's end (the suffix matched), its latest earlier occurrence and what followed it there
    (the draft's first token) coloured, a gap cell where text is left out."""
    r = _rec(trace, si)
    texts, pieces = token_texts(trace), match_pieces(trace, si, context)
    if not pieces:
        return empty_figure(f"Step {si}: no text to match yet.")
    xs, ys, fill, text, hover = [], [], [], [], []
    for k, (i, t, kind) in enumerate(pieces):
        xs.append(k % per_row); ys.append(k // per_row)
        if kind == "gap":
            fill.append("#FFFFFF"); text.append("…"); hover.append("text left out")
            continue
        fill.append(MATCH_KINDS[kind][0] if kind else "#EEEEEE")
        text.append(cell_label(piece(texts, t), 6))
        hover.append(f"{esc(MATCH_KINDS[kind][1]) if kind else 'context'} · index {i} of prompt + output"
                     f"<br>token {hover_label(piece(texts, t))} (id {t})")
    fig = go.Figure(go.Scatter(x=xs, y=ys, mode="markers+text", text=text, hovertext=hover, hoverinfo="text",
                               showlegend=False, textposition="middle center",
                               textfont=dict(size=11, color=[text_colour(f) for f in fill]),
                               marker=dict(symbol="square", size=40, color=fill, line=dict(color="#555555", width=1))))
    legend_entries(fig, [(c, lab) for c, lab in MATCH_KINDS.values()] + [("#EEEEEE", "context")])
    rows = ys[-1] + 1
    base_layout(fig, esc(f"Step {si}: the last {r.match} tokens, {WHERE.get(r.where, r.where)}"), 200 + 46 * rows)
    fig.update_xaxes(range=[-0.6, per_row - 0.4], visible=False, fixedrange=True)
    fig.update_yaxes(range=[rows - 0.4, -0.6], visible=False, fixedrange=True)
    return fig


def match_cells(trace, si: int, kind: str, context: int = 6, per_row: int = 12) -> list[tuple[int, int, int, int]]:
    """Boxes (x0, x1, y0, y1) around the ``kind`` cells of ``match_figure``: one per run in a row."""
    cells = [(k % per_row, k // per_row) for k, (_, _, kd) in enumerate(match_pieces(trace, si, context)) if kd == kind]
    boxes: list[tuple[int, int, int, int]] = []
    for x, y in cells:
        if boxes and boxes[-1][2] == y and boxes[-1][1] == x - 1:
            boxes[-1] = (boxes[-1][0], x, y, y)
        else:
            boxes.append((x, x, y, y))
    return boxes


def best_step(trace) -> int | None:
    """The step to open on: the one whose draft matched furthest (the first such), None without steps."""
    steps = [s for s in trace.steps if s.record is not None]
    return max(steps, key=lambda s: (len(s.record.path), len(s.record.tokens), -s.index)).index if steps else None


def match_sentence(trace, si: int) -> str:
    r = _rec(trace, si)
    found = f"the last {r.match} tokens occurred {WHERE[r.where]}" if r.where in ("prompt", "output", "earlier") \
        else f"the best earlier match was {r.match} token{'s' if r.match != 1 else ''}; {WHERE[r.where]}"
    cut = f" ({r.drafted} drafted, the budget fed {len(r.tokens)})" if r.drafted != len(r.tokens) else ""
    return f"Step {si}: {found}; a tree of {len(r.tokens)} draft tokens{cut}, {len(r.path)} accepted."


def tree_excerpt(r, max_nodes: int | None = None) -> tuple[list[int], list[int], list[float], list[int]]:
    """(tokens, parents, scores, path) of a step's record's tree, or of an excerpt of at most
    ``max_nodes`` (never fewer than the accepted branch): the accepted branch, then the other nodes in
    the order they were fed, each only with its parent; indices renumbered."""
    n = len(r.tokens)
    if max_nodes is None or n <= max_nodes:
        return list(r.tokens), list(r.parents), list(r.scores), list(r.path)
    keep = set(r.path)
    for i in range(n):
        if len(keep) >= max(max_nodes, len(r.path)):
            break
        if r.parents[i] < 0 or r.parents[i] in keep:
            keep.add(i)
    order = sorted(keep)
    new = {old: k for k, old in enumerate(order)}
    return ([r.tokens[i] for i in order], [new.get(r.parents[i], -1) for i in order], [r.scores[i] for i in order],
            [new[i] for i in r.path])


def tree_figure(trace, si: int, max_nodes: int | None = None) -> go.Figure:
    """Step ``si``'s draft tree as fed (x = depth after the current token), each node labelled with its
    frequency score; the accepted branch in black and coloured. ``max_nodes``: an excerpt of a large
    tree (``tree_excerpt``: the accepted branch and the first nodes fed), said in the title."""
    rec = _rec(trace, si)
    if not rec.tokens:
        return empty_figure(f"Step {si} fed no draft (no earlier match, no fallback successors)")
    tokens, parents, scores, path = tree_excerpt(rec, max_nodes)
    r = SimpleNamespace(tokens=tokens, parents=parents, scores=scores, path=path)
    texts = token_texts(trace)
    depth, y = tree_layout(r.parents)
    root_y = (min(y) + max(y)) / 2
    on = set(r.path)
    accepted = [SUFFIX if sc > 0 else RECYCLED for sc in r.scores]  # score 0: the fallback's matrix drafted it
    fill = [accepted[i] if i in on else FED for i in range(len(r.tokens))] + [BLUE]
    xs, ys = depth + [0], y + [root_y]
    fig = go.Figure()
    for want in (False, True):
        ex, ey = [], []
        for i, p in enumerate(r.parents):
            if (i in on) == want:
                ex += [0 if p < 0 else depth[p], depth[i], None]
                ey += [root_y if p < 0 else y[p], y[i], None]
        fig.add_trace(go.Scatter(x=ex, y=ey, mode="lines", hoverinfo="skip", showlegend=False,
                                 line=dict(color=BLACK if want else GREY, width=3 if want else 1)))
    cur = text_before(trace, si)[-1]
    labels = [f"{cell_label(piece(texts, t), 5)}<br>{s:.2f}" if s > 0 else cell_label(piece(texts, t), 5)
              for t, s in zip(r.tokens, r.scores)] + [cell_label(piece(texts, cur), 5)]
    hover = [f"token {hover_label(piece(texts, t))} (id {t}), " + (f"score {s:.3f}" if s > 0 else "the fallback's matrix")
             for t, s in zip(r.tokens, r.scores)]
    fig.add_trace(go.Scatter(x=xs, y=ys, mode="markers+text", text=labels, showlegend=False, hoverinfo="text",
                             hovertext=hover + [f"the current token: token {hover_label(piece(texts, cur))} (id {cur})"],
                             marker=dict(symbol="square", size=30, color=fill, line=dict(color="#333333", width=1)),
                             textfont=dict(size=10, color=[text_colour(f) for f in fill])))
    kinds = [(SUFFIX, "accepted, from the suffix match"), (RECYCLED, "accepted, from the fallback's matrix")]
    legend_entries(fig, [(BLUE, "current token"), (FED, "draft token (fed, rejected or not reached)")]
                   + [k for k in kinds if k[0] in set(accepted)])
    fig.update_xaxes(range=[-0.6, max(depth) + 0.6], dtick=1, title="depth after the current token", zeroline=False)
    fig.update_yaxes(visible=False, range=[min(y) - 0.6, max(y) + 0.6])
    store = " [cross-run store of earlier outputs: on]" if trace.params.get("cross_run") else ""
    shown = f" (showing {len(tokens)}: the accepted branch and the first fed)" if len(tokens) < len(rec.tokens) else ""
    title = f"Step {si}'s draft tree: {len(rec.tokens)} tokens, {len(r.path)} accepted{shown}"
    base_layout(fig, esc(title) + store, max(360, 160 + 34 * (max(y) + 1)))
    return fig


def summary_sentence(trace) -> str:
    """How the run drafted: steps from a suffix match (and its median length), from the fallback, none."""
    recs = [s.record for s in trace.steps if s.record is not None]
    sfx = sorted(r.match for r in recs if r.where in ("prompt", "output", "earlier"))
    fb = sum(r.where == "fallback" for r in recs)
    tokens = sum(o == "suffix" for s in trace.steps for o in s.origins)
    med = f" (median match {sfx[len(sfx) // 2]} tokens)" if sfx else ""
    store = " The cross-run store of earlier outputs was on." if trace.params.get("cross_run") else ""
    short = f"under {trace.params['min_match']} tokens" if "min_match" in trace.params else "short"
    return (f"{len(sfx)} of {len(recs)} steps drafted from a suffix match{med}, {fb} from a match {short} (or none) "
            f"and Token Recycling's matrix (the fallback) together, {len(recs) - len(sfx) - fb} had no draft; {tokens} of {len(trace.output_ids)} output "
            f"tokens came from suffix drafts.{store}")
