"""Token Recycling views (decoding/methods/recycling.py, decoding.methods.recycling.RecyclingRecord): the draft
tree each step fed, its accepted branch, and the adjacency-matrix rows that produced it.

The matrix before any step is replayed from the trace: the prompt's bigrams (when the run seeded
them), then each earlier step's changed rows. Plain data in, Plotly figures out; no torch.
"""

from __future__ import annotations

import plotly.graph_objects as go

from decoding.methods.recycling import prompt_rows
from viz.style import (BLACK, BLUE, GREY, LIGHT, PROVENANCE, animation_controls, base_layout, cell_label,
                       empty_figure, esc, hover_label, legend_entries, page_items, piece, text_colour, token_texts)

ACCEPTED = PROVENANCE["recycled"][0]
FED, UNUSED = "#D9ECF7", LIGHT


def recycling_steps(trace) -> list[int]:
    """Indices of the steps that carry a Token Recycling record."""
    return [s.index for s in trace.steps if s.record is not None]


def matrix_before(trace, step_index: int) -> dict[int, list[int]]:
    """The adjacency matrix as it stood before step ``step_index`` (rows of tokens seen so far)."""
    k = trace.params["successors"]
    m = prompt_rows(trace.prompt_ids, k) if trace.params["seed_prompt"] else {}
    for s in trace.steps:
        if s.index >= step_index:
            break
        if s.record is not None:
            for row in s.record.written:
                m[row[0]] = list(row[1:])
    return m


def current_token(trace, step_index: int) -> int:
    """The token a step walked its tree from: the last token committed before it."""
    done = sum(len(s.tokens) for s in trace.steps if s.index < step_index)
    before = len(trace.output_ids) - sum(len(s.tokens) for s in trace.steps)  # the prefill's token(s)
    return trace.output_ids[before + done - 1]


def tree_layout(parents: list[int]) -> tuple[list[int], list[float]]:
    """(depth, y) per node, the root (the current token, index -1) excluded: leaves one unit apart
    in depth-first order, a parent at the middle of its children."""
    kids: dict[int, list[int]] = {}
    for i, p in enumerate(parents):
        kids.setdefault(p, []).append(i)
    depth, y = [0] * len(parents), [0.0] * len(parents)
    nxt = [0.0]

    def place(i: int, d: int) -> float:
        ch = kids.get(i, [])
        ys = [place(c, d + 1) for c in ch]
        v = sum(ys) / len(ys) if ys else nxt[0]
        if not ys:
            nxt[0] += 1
        if i >= 0:
            depth[i], y[i] = d, v
        return v

    place(-1, 0)
    return depth, y


def tree_data(trace, step_index: int) -> dict:
    """Everything the tree figure draws for one step: the root and each node (x = depth, y, token,
    text, matrix column, on the accepted branch or not) and the edges."""
    rec = _rec(trace, step_index)
    texts = token_texts(trace)
    depth, y = tree_layout(rec.parents)
    root_y = (min(y) + max(y)) / 2 if y else 0.0
    on = set(rec.path)
    nodes = [{"x": depth[i], "y": y[i], "token": t, "text": piece(texts, t), "col": rec.cols[i], "accepted": i in on}
             for i, t in enumerate(rec.tokens)]
    edges = [((0, root_y) if p < 0 else (depth[p], y[p]), (depth[i], y[i]), i in on) for i, p in enumerate(rec.parents)]
    cur = current_token(trace, step_index)
    return {"root": {"x": 0, "y": root_y, "token": cur, "text": piece(texts, cur)}, "nodes": nodes, "edges": edges,
            "accepted": len(rec.path), "fed": len(rec.tokens)}


def _edge_xy(edges, accepted: bool) -> tuple[list, list]:
    xs, ys = [], []
    for (x0, y0), (x1, y1), on in edges:
        if on == accepted:
            xs += [x0, x1, None]
            ys += [y0, y1, None]
    return xs, ys


def _frame(trace, si: int) -> tuple[list[go.Scatter], str]:
    d = tree_data(trace, si)
    nodes, root = d["nodes"], d["root"]
    ex, ey = _edge_xy(d["edges"], False)
    ax, ay = _edge_xy(d["edges"], True)
    fill = [ACCEPTED if n["accepted"] else FED for n in nodes] + [BLUE]
    pts = nodes + [root]
    data = [
        go.Scatter(x=ex, y=ey, mode="lines", line=dict(color=GREY, width=1), hoverinfo="skip", showlegend=False),
        go.Scatter(x=ax, y=ay, mode="lines", line=dict(color=BLACK, width=3), hoverinfo="skip", showlegend=False),
        go.Scatter(x=[n["x"] for n in pts], y=[n["y"] for n in pts], mode="markers+text", showlegend=False,
                   marker=dict(symbol="square", size=24, color=fill, line=dict(color="#333333", width=1)),
                   text=[cell_label(n["text"], 5) for n in pts], textfont=dict(size=10, color=[text_colour(f) for f in fill]),
                   hovertext=[f"{hover_label(n['text'])} (id {n['token']})" + (f", column {n['col'] + 1} of its parent's row"
                              if "col" in n else ", the current token") for n in pts], hoverinfo="text"),
    ]
    title = (f"Step {si}: a tree of {d['fed']} draft tokens from {esc(repr(root['text']))}; "
             f"{d['accepted']} accepted on the black branch")
    return data, title


def tree_animation(trace, page: int = 0, duration_ms: int = 900) -> go.Figure:
    """The draft tree of each step (nodes = tokens, x = depth after the current token), the accepted
    branch in black and coloured, animated step by step."""
    steps = page_items([i for i in recycling_steps(trace) if _has_tree(trace, i)], page)
    if not steps:
        return empty_figure("No step of this run fed a draft tree (the matrix had no row for its current tokens yet, "
                            "or recording was off).")
    data, title = _frame(trace, steps[0])
    fig = go.Figure(data=data, frames=[go.Frame(data=_frame(trace, si)[0], name=str(si),
                                                layout=dict(title_text=_frame(trace, si)[1])) for si in steps])
    depth = max(max(_depths(trace, si)) for si in steps)
    leaves = max(_leaves(trace, si) for si in steps)
    fig.update_xaxes(range=[-0.6, depth + 0.6], dtick=1, title="depth after the current token", zeroline=False)
    fig.update_yaxes(range=[-1, leaves], visible=False)
    legend_entries(fig, [(BLUE, "current token"), (FED, "draft token (fed, rejected or not reached)"),
                         (ACCEPTED, "accepted (the matched branch)")])
    base_layout(fig, title, max(420, 200 + 20 * leaves), animated=True)
    animation_controls(fig, [str(s) for s in steps], [str(s) for s in steps], duration_ms, prefix="step ")
    return fig


def _rec(trace, si: int):
    return next(s.record for s in trace.steps if s.index == si)


def _has_tree(trace, si: int) -> bool:
    return bool(_rec(trace, si).tokens)


def _depths(trace, si: int) -> set[int]:
    return set(tree_layout(_rec(trace, si).parents)[0])


def _leaves(trace, si: int) -> int:
    rec = _rec(trace, si)
    return len(set(range(len(rec.parents))) - set(rec.parents))


def matrix_rows_data(trace, step_index: int) -> dict:
    """The matrix rows a step read: one row per token the walk expanded (the current token first,
    then tree nodes in fed order, each token once) with its successors, and per cell whether the
    tree fed it and whether it was accepted."""
    rec = _rec(trace, step_index)
    m = matrix_before(trace, step_index)
    texts = token_texts(trace)
    cur = current_token(trace, step_index)
    toks = [cur] + rec.tokens
    used: dict[int, set[int]] = {}
    accepted: dict[int, set[int]] = {}
    on = set(rec.path)
    for i, p in enumerate(rec.parents):
        parent_tok = cur if p < 0 else rec.tokens[p]
        used.setdefault(parent_tok, set()).add(rec.cols[i])
        if i in on:
            accepted.setdefault(parent_tok, set()).add(rec.cols[i])
    rows = []
    for t in dict.fromkeys(toks):
        if t in used:
            rows.append({"token": t, "text": piece(texts, t), "row": list(m.get(t, [])),
                         "row_text": [piece(texts, x) for x in m.get(t, [])], "used": sorted(used[t]),
                         "accepted": sorted(accepted.get(t, ()))})
    return {"rows": rows, "k": trace.params["successors"]}


def matrix_figure(trace, step_index: int, max_rows: int = 24) -> go.Figure:
    """The matrix rows that produced a step's tree: a row per expanded token, its k successors
    (best first), coloured by whether the tree fed them and whether they were accepted."""
    d = matrix_rows_data(trace, step_index)
    rows = d["rows"][:max_rows]
    if not rows:
        return empty_figure(f"Step {step_index} read no matrix row with successors: it was a plain AR step.")
    k = max(d["k"], max(len(r["row"]) for r in rows))
    fig = go.Figure()
    for y, r in enumerate(rows):
        for c in range(k):
            has = c < len(r["row"])
            fill = ACCEPTED if c in r["accepted"] else FED if c in r["used"] else UNUSED
            fig.add_shape(type="rect", x0=c - 0.48, x1=c + 0.48, y0=y - 0.45, y1=y + 0.45, fillcolor=fill,
                          line=dict(color="#999999", width=1))
            if has:
                fig.add_annotation(x=c, y=y, text=cell_label(r["row_text"][c], 7), showarrow=False,
                                   font=dict(size=12, color=text_colour(fill)))
    fig.add_trace(go.Scatter(x=[0] * len(rows), y=list(range(len(rows))), mode="markers", marker=dict(opacity=0),
                             hovertext=[f"row of {hover_label(r['text'])}: " + ", ".join(hover_label(t) for t in r["row_text"])
                                        for r in rows], hoverinfo="text", showlegend=False))
    fig.update_yaxes(tickvals=list(range(len(rows))), ticktext=[cell_label(r["text"], 10) for r in rows],
                     autorange="reversed", title="row of token")
    fig.update_xaxes(tickvals=list(range(k)), ticktext=[f"top-{c + 1}" for c in range(k)], range=[-0.6, k - 0.4])
    legend_entries(fig, [(FED, "successor fed in the tree"), (ACCEPTED, "accepted"), (UNUSED, "not fed this step")])
    more = f" (first {max_rows} of {len(d['rows'])})" if len(d["rows"]) > max_rows else ""
    base_layout(fig, f"Step {step_index}: the matrix rows the walk read{more}", 120 + 30 * len(rows))
    return fig


def summary_sentence(trace) -> str:
    """One paragraph on the run: trees fed, tokens accepted from the matrix, rows written."""
    recs = [s.record for s in trace.steps if s.record is not None]
    if not recs:
        return ""
    trees = [r for r in recs if r.tokens]
    acc = sum(len(r.path) for r in recs)
    fed = sum(len(r.tokens) for r in trees) / len(trees) if trees else 0
    rows = len(matrix_before(trace, len(trace.steps) + 1))
    return (f"{len(trees)} of {len(recs)} steps fed a draft tree ({fed:.0f} tokens on average); {acc} output tokens "
            f"came from the matrix ({acc / max(len(recs), 1):.2f} per step). At the end the matrix held rows for "
            f"{rows} tokens, each rewritten from the top-{trace.params['successors']} of the forward that last fed it.")


__all__ = ["recycling_steps", "matrix_before", "tree_data", "tree_animation", "matrix_rows_data", "matrix_figure",
           "summary_sentence"]
