"""CLLM figures: the same prompt decoded with Jacobi by the base model and by the CLLM, side by
side (the paper's "target LLM vs consistency LLM" trajectory figure, animated in step), per-block
iterations of both, and the CLLM's training curves from its metrics rows.

Inputs are two Jacobi traces (and the metrics rows of ``cllm.read_metrics``); nothing here
runs a model.
"""

from __future__ import annotations

import plotly.graph_objects as go

from decoding import analysis
from viz.jacobi import _cells, block_view, full_block_tokens, legend
from viz.style import (BLACK, BLUE, GREY, ORANGE, SKY, VERMILLION, animation_controls, base_layout, cell_label,
                       empty_figure, esc, hover_label, legend_entries, page_items, piece, text_colour)

ROWS = {"base": 3, "base_fp": 2, "cllm": 1, "cllm_fp": 0}  # y of each row (top to bottom)
NAMES = ("base", "CLLM")


def summary_rows(base, cllm) -> list[dict]:
    """One row per model: tokens/step, forward steps, blocks, mean iterations per block, and the
    fast-forwarded and stationary totals (``decoding.analysis.jacobi_counts``)."""
    out = []
    for name, t in zip(NAMES, (base, cllm)):
        counts = analysis.jacobi_counts(t)
        out.append({
            "model": name, "tokens": len(t.output_ids), "steps": t.n_steps,
            "tokens/step": round(t.tokens_per_step, 3), "blocks": len(counts),
            "iterations/block": round(sum(c["iterations"] for c in counts) / len(counts), 2) if counts else 0.0,
            "fast-forwarded": sum(c["fast_forwarded"] for c in counts),
            "stationary": sum(c["stationary"] for c in counts),
        })
    return out


def common_blocks(base, cllm) -> list[int]:
    """Block indices present in both traces."""
    a = {b.index for b in base.blocks}
    return sorted(a & {b.index for b in cllm.blocks})


def _label(v, k: int) -> str:
    if k == 0:
        return "guess"
    ff = v.states[k].count("fast_forward")
    return f"it {k}: +{len(v.commits[k])}" + (f", {ff} ff" if ff else "")


def side_by_side(base, cllm, block: int = 0, page: int = 0, duration_ms: int = 800) -> go.Figure:
    """Both trajectories of one block, animated in step: frame k shows each model's block after
    its iteration k (frame 0: the initial guesses; a model that has finished shows its final
    state), coloured and outlined as in ``viz.jacobi``. Traces 0 and 1 are the base and CLLM rows
    (frames update only them); 2 and 3 their fixed points; the rest legend entries."""
    views = []
    for t in (base, cllm):
        v = block_view(t, block)
        if v is None:
            return empty_figure(f"No Jacobi iterations recorded for block {block} in the {NAMES[len(views)]} trace.")
        views.append(v)
    n = max(v.n for v in views)
    ks = page_items(list(range(max(len(v.rows) for v in views))), page)

    def row(i, k):
        v = views[i]
        return _cells(v, min(k, len(v.rows) - 1), ROWS["base" if i == 0 else "cllm"])

    def title(k):
        bits = [f"{name} {_label(v, k)}" if k < len(v.rows) - 1 else f"{name} done in {len(v.recs)} iterations"
                for name, v in zip(NAMES, views)]
        return f"Block {block} · " + ("initial guess" if k == 0 else f"iteration {k}") + " · " + esc(" · ".join(bits))

    fig = go.Figure()
    for i in (0, 1):
        fig.add_trace(go.Scatter(mode="markers+text", name=NAMES[i], showlegend=False, hoverinfo="text",
                                 textposition="middle center", **row(i, ks[0])))
    for i, key in ((0, "base_fp"), (1, "cllm_fp")):
        fig.add_trace(go.Scatter(mode="markers+text", name=f"{NAMES[i]} fixed point", showlegend=False,
                                 hoverinfo="text", textposition="middle center", **_cells(views[i], 0, ROWS[key], fp_row=True)))
    legend(fig)
    fig.frames = [go.Frame(name=str(k), traces=[0, 1], data=[go.Scatter(**row(0, k)), go.Scatter(**row(1, k))],
                           layout=dict(title=dict(text=title(k)))) for k in ks]
    animation_controls(fig, [str(k) for k in ks], ["guess" if k == 0 else str(k) for k in ks], duration_ms,
                       prefix="iteration ")
    base_layout(fig, title(ks[0]), 490, animated=True)
    fig.update_xaxes(range=[-0.6, n - 0.4], fixedrange=True, showgrid=False, zeroline=False,
                     tickmode="array", tickvals=list(range(n)))
    fig.update_yaxes(range=[-0.6, 3.6], fixedrange=True, showgrid=False, zeroline=False, tickmode="array",
                     tickvals=[ROWS[k] for k in ROWS], ticktext=["base", "base: fixed point", "CLLM", "CLLM: fixed point"])
    return fig


def iterations_figure(base, cllm) -> go.Figure:
    """Jacobi iterations per block of both models (fewer is faster; n means no speed-up)."""
    cb, cc = analysis.jacobi_counts(base), analysis.jacobi_counts(cllm)
    if not cb and not cc:
        return empty_figure("No Jacobi blocks in these traces.")
    fig = go.Figure()
    for name, counts, colour in (("base", cb, GREY), ("CLLM", cc, ORANGE)):
        fig.add_trace(go.Bar(x=[c["block"] for c in counts], y=[c["iterations"] for c in counts], name=f"{name}: iterations",
                             marker_color=colour, hovertemplate=f"{name}, block %{{x}}: %{{y}} iterations<extra></extra>"))
        fig.add_trace(go.Scatter(x=[c["block"] for c in counts], y=[c["fast_forwarded"] for c in counts], mode="markers",
                                 name=f"{name}: fast-forwarded tokens", marker=dict(color=colour if name == "CLLM" else BLUE,
                                                                                   size=11, symbol="diamond",
                                                                                   line=dict(color="#333333", width=1)),
                                 hovertemplate=f"{name}, block %{{x}}: %{{y}} fast-forwarded<extra></extra>"))
    full = full_block_tokens(cb + cc)
    base_layout(fig, f"Iterations per block (a full block commits {full} tokens: {full} iterations if no guess is "
                     f"ever right early, as AR's forward passes)", 340)
    fig.update_layout(barmode="group")
    fig.update_xaxes(title_text="block", dtick=1)
    fig.update_yaxes(title_text="count")
    return fig


def _smooth(v: list[float], k: int) -> list[float]:
    out, acc = [], 0.0
    for i, x in enumerate(v):
        acc += x
        if i >= k:
            acc -= v[i - k]
        out.append(acc / min(i + 1, k))
    return out


def training_curves(rows: list[dict], window: int = 20) -> go.Figure:
    """Consistency, AR (and local) loss per step, raw (faint) and as a running mean of ``window``
    steps; the AR loss on a second axis (its scale is smaller)."""
    rows = [r for r in rows if isinstance(r.get("step"), int)]
    if not rows:
        return empty_figure("No training metrics for this CLLM.")
    steps = [r["step"] for r in rows]
    fig = go.Figure()
    for key, colour, axis, name in (("consistency", ORANGE, "y", "global consistency (KL)"),
                                    ("local", SKY, "y", "local consistency (KL)"),
                                    ("ar", BLUE, "y2", "AR (cross-entropy, right axis)")):
        if not any(key in r for r in rows):
            continue
        v = [float(r.get(key, 0.0)) for r in rows]
        fig.add_trace(go.Scatter(x=steps, y=v, mode="lines", line=dict(color=colour, width=1), opacity=0.25,
                                 yaxis=axis, showlegend=False, hoverinfo="skip"))
        fig.add_trace(go.Scatter(x=steps, y=_smooth(v, window), mode="lines", line=dict(color=colour, width=3),
                                 name=f"{name}, mean of {window} steps", yaxis=axis,
                                 hovertemplate=f"step %{{x}}<br>{name}: %{{y:.4f}}<extra></extra>"))
    secs = rows[-1].get("seconds")
    toks = rows[-1].get("tokens")
    extra = f" · {secs / 60:.1f} min" if isinstance(secs, (int, float)) else ""
    extra += f" · {toks:,} tokens fed" if isinstance(toks, int) else ""
    base_layout(fig, f"Training: {len(rows)} steps{extra}", 360)
    fig.update_layout(yaxis=dict(title_text="consistency loss", rangemode="tozero"),
                      yaxis2=dict(title_text="AR loss", overlaying="y", side="right", rangemode="tozero", showgrid=False),
                      margin=dict(r=60))
    fig.update_xaxes(title_text="step")
    return fig


def drift(base, cllm) -> dict:
    """How far the CLLM's greedy output is from the base's on this prompt: identical tokens (same
    position), the common prefix, and both lengths (plain numbers; no text)."""
    a, b = base.output_ids, cllm.output_ids
    same = sum(x == y for x, y in zip(a, b))
    prefix = next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))
    return {"identical_share": same / max(len(a), len(b), 1), "common_prefix": prefix,
            "base_tokens": len(a), "cllm_tokens": len(b)}



# ---- the training objective, drawn ------------------------------------------------------------------
OBJ_CELL = 26
OBJ_STATES = {"prefix": (GREY, "right prefix (same inputs as the fixed point: no loss)"),
              "right": (SKY, "right, after the first wrong position"),
              "wrong": (VERMILLION, "wrong")}
GLOBAL_COLOUR, LOCAL_COLOUR = ORANGE, BLUE


def objective_rows(obj: dict) -> list[dict]:
    """One row per state of the item: its first wrong position and each model's losses (the local
    loss goes from this state to the next)."""
    fp, out = obj["fixed_point"], []
    for k, s in enumerate(obj["states"]):
        fw = next((i for i, (a, b) in enumerate(zip(s, fp)) if a != b), len(fp))
        row = {"state": k, "first wrong position": fw}
        for name, key in (("base", "base"), ("CLLM", "cllm")):
            L = obj["losses"][key]
            row[f"global ({name})"] = L["global"][k]
            row[f"local to next ({name})"] = L["local"][k] if k < len(L["local"]) else None
        out.append(row)
    return out


def _objective_cells(obj: dict) -> dict:
    fp, states = obj["fixed_point"], obj["states"]
    texts = {int(k): v for k, v in obj["pieces"].items()}
    xs, ys, colours, labels, hover = [], [], [], [], []
    for k, s in enumerate(states + [fp]):
        fw = next((i for i, (a, b) in enumerate(zip(s, fp)) if a != b), len(fp))
        for i, tok in enumerate(s):
            kind = None if k == len(states) else "prefix" if i < fw else "right" if tok == fp[i] else "wrong"
            xs.append(i); ys.append(k + (1 if k == len(states) else 0))
            colours.append("#FFFFFF" if kind is None else OBJ_STATES[kind][0])
            labels.append(cell_label(piece(texts, tok), 5))
            hover.append(f"{'fixed point y*' if kind is None else f'state {k}'}, position {i}<br>"
                         f"{hover_label(piece(texts, tok))} (id {tok})" + ("" if kind is None else f"<br>{OBJ_STATES[kind][1]}"))
    return dict(x=xs, y=ys, mode="markers+text", text=labels, hovertext=hover, hoverinfo="text", showlegend=False,
                textposition="middle center", textfont=dict(size=9, color=[text_colour(c) for c in colours]),
                marker=dict(symbol="square", size=OBJ_CELL, color=colours,
                            line=dict(color=[SKY if c == "#FFFFFF" else "#333333" for c in colours], width=1)))


def _arrow(fig, tail: tuple[float, float], head: tuple[float, float], colour: str, text: str, label_x: float,
           xanchor: str) -> None:
    """An arrow from ``tail`` to ``head`` (data coordinates) and its value as a label beside the tail."""
    fig.add_annotation(x=head[0], y=head[1], ax=tail[0], ay=tail[1], xref="x", yref="y", axref="x", ayref="y",
                       showarrow=True, arrowhead=3, arrowsize=1, arrowwidth=1.5, arrowcolor=colour, text="", standoff=4)
    fig.add_annotation(x=label_x, y=tail[1], xref="x", yref="y", text=text, showarrow=False, xanchor=xanchor,
                       font=dict(size=11, color=colour))


def local_legend(local_weight: float | None) -> str:
    """The local consistency loss's legend entry: drawn or not, and why."""
    what = "local consistency: KL(q(·|next) ‖ q(·|state))"
    if local_weight == 0:
        return f"{what}: not drawn, not used in training (local weight 0)"
    if local_weight is None:
        return f"{what}, arrow to the next state (training weight not known)"
    return f"{what}, arrow to the next state (training weight {local_weight:g})"


def objective_figure(obj: dict | None, model: str = "cllm", local_weight: float | None = None) -> go.Figure:
    """CLLM's training objective on one trajectory: the states from the initial guess (top) to the
    fixed point y* (bottom); the global consistency loss as an arrow from every state to y*, the
    local one as an arrow between neighbouring states, the AR loss on y*, with ``model``'s values
    ("cllm" or "base"). Trace 0 holds the cells.

    ``local_weight``: the local loss's weight in the CLLM's training (its cllm.json "local"). The
    local arrows are drawn only when it is above 0; at 0 the legend says the CLLM trained without
    that loss; None (not known) draws them, marked so."""
    if not obj or not obj.get("states"):
        return empty_figure("No CLLM objective item shipped.")
    L, states, n = obj["losses"][model], obj["states"], len(obj["fixed_point"])
    fy = len(states) + 1  # the fixed point's row
    fig = go.Figure(go.Scatter(**_objective_cells(obj)))
    for k, s in enumerate(states):
        if s != obj["fixed_point"]:
            _arrow(fig, (n + 0.9, k), (n + 3.4, fy), GLOBAL_COLOUR, f"{L['global'][k]:.2f}", n - 0.4, "left")
        if local_weight != 0 and k < len(L["local"]) and s != states[k + 1]:
            _arrow(fig, (-0.9, k), (-0.9, k + 1), LOCAL_COLOUR, f"{L['local'][k]:.2f}", -1.0, "right")
    fig.add_annotation(x=n + 3.5, y=fy, xref="x", yref="y", text=f"y*  AR loss {L['ar']:.3f}", showarrow=False,
                       xanchor="left", font=dict(size=12, color=BLACK))
    legend_entries(fig, OBJ_STATES.values())
    legend_entries(fig, [(GLOBAL_COLOUR, "global consistency: KL(q(·|y*) ‖ q(·|state)), arrow to y*"),
                         (LOCAL_COLOUR, local_legend(local_weight))], symbol="arrow-right")
    who = "the CLLM" if model == "cllm" else "the base model"
    base_layout(fig, f"The CLLM objective on block {obj['block']} of a real trajectory · losses of {who}",
                180 + 30 * (fy + 1))
    fig.update_xaxes(range=[-3.2, n + 7.5], showgrid=False, zeroline=False, fixedrange=True, tickmode="array",
                     tickvals=list(range(n)), title_text="position in block")
    fig.update_yaxes(range=[fy + 0.7, -0.7], showgrid=False, zeroline=False, fixedrange=True, tickmode="array",
                     tickvals=list(range(len(states))) + [fy], ticktext=[f"state {k}" for k in range(len(states))] + ["y*"])
    return fig


CURVE_PANELS = (  # (row key, base key, panel title, target line or None)
    ("jacobi_tokens_per_step", "base_jacobi_tokens_per_step", "Jacobi tokens per step (n = 16)", None),
    ("accuracy", "base_accuracy", "answer accuracy (final number)", None),
    ("identical_share", None, "shares: base's tokens kept; degenerate answers", None),
    ("ppl_ratio", None, "base perplexity of the answers: CLLM's / base's own", 1.3),
)


def _clean_trace(fig: go.Figure, rows: list[dict]) -> None:
    """The CLLM's tokens/step without its degenerate answers (points that measured it: a loop is the
    easiest text to fast-forward, so the full figure can rise with no gain), the base's on the same
    problems in the hover."""
    pts = [r for r in rows if isinstance(r.get("clean_jacobi_tokens_per_step"), (int, float)) and r.get("clean_prompts")]
    if not pts:
        return
    fig.add_trace(go.Scatter(
        x=[r["items_seen"] for r in pts], y=[r["clean_jacobi_tokens_per_step"] for r in pts], mode="lines+markers",
        name="CLLM without its degenerate answers", line=dict(color=VERMILLION, width=2, dash="dash"),
        marker=dict(symbol="diamond-open", size=9),
        customdata=[[r["clean_prompts"], r.get("prompts", 0), r.get("clean_base_jacobi_tokens_per_step", 0)] for r in pts],
        hovertemplate="%{x} items<br>%{y:.3f} tokens/step on %{customdata[0]} of %{customdata[1]} problems"
                      "<br>(base on those: %{customdata[2]:.3f})<extra>CLLM, no loops</extra>"), 1, 1)


def _degenerate_traces(fig: go.Figure, rows: list[dict], x: list[int]) -> None:
    """The share of degenerate answers (a repetition loop filling half the answer), the CLLM's and
    the base's, in the third panel: on-policy training can collapse into loops. Points written before
    2026-12-06 counted loops of periods <= 16 tokens only (a row says ``degenerate_periods: "any"``
    where it counted every period); the hover says which rule each point used."""
    rule = ["any period" if r.get("degenerate_periods") == "any" else "periods <= 16 only" for r in rows]
    for key, name, colour in (("degenerate_share", "CLLM: degenerate answers", VERMILLION),
                              ("base_degenerate_share", "base: degenerate answers", BLUE)):
        if all(r.get(key) is None for r in rows):
            continue
        fig.add_trace(go.Scatter(x=x, y=[r.get(key) for r in rows], mode="lines+markers", name=name,
                                 line=dict(color=colour, width=2, dash="dot"), marker=dict(symbol="x", size=8),
                                 customdata=[[q] for q in rule],
                                 hovertemplate=f"%{{x}} items<br>%{{y:.0%}} degenerate (loops of %{{customdata[0]}})"
                                               f"<extra>{esc(name)}</extra>"), 2, 1)


def campaign_curve(rows: list[dict], target_ratio: float = 1.5) -> go.Figure:
    """The campaign's learning curve (``cllm.campaign.read_curve``): per point on the held-out
    problems, the CLLM's Jacobi tokens/step against the base's (and the target: ``target_ratio``
    times the base; where measured, also without the CLLM's degenerate answers), accuracy against
    the base's, the share of the base's tokens kept and the share of degenerate answers (the CLLM's
    and the base's), and the base's perplexity of the CLLM's answers over that of its own (target
    <= 1.3); x = items trained."""
    from plotly.subplots import make_subplots

    rows = [dict(r) for r in rows if isinstance(r, dict) and isinstance(r.get("items_seen"), int)
            and isinstance(r.get("jacobi_tokens_per_step"), (int, float))]
    if not rows:
        return empty_figure("No learning curve yet: run `python -m cllm campaign run`.")
    for r in rows:
        b, c = r.get("base_ppl_base"), r.get("base_ppl_cllm")
        ok = isinstance(b, (int, float)) and isinstance(c, (int, float)) and b > 0
        r["ppl_ratio"] = c / b if ok else None
    fig = make_subplots(rows=2, cols=2, subplot_titles=[p[2] for p in CURVE_PANELS], horizontal_spacing=0.1,
                        vertical_spacing=0.2)
    x = [r["items_seen"] for r in rows]
    for i, (key, base_key, title, line) in enumerate(CURVE_PANELS):
        rr, cc = i // 2 + 1, i % 2 + 1
        fig.add_trace(go.Scatter(x=x, y=[r.get(key) for r in rows], mode="lines+markers", name="CLLM",
                                 line=dict(color=VERMILLION, width=3), showlegend=i == 0, legendgroup="cllm",
                                 hovertemplate=f"%{{x}} items<br>{esc(title)}: %{{y:.3f}}<extra>CLLM</extra>"), rr, cc)
        if base_key:
            fig.add_trace(go.Scatter(x=x, y=[r.get(base_key) for r in rows], mode="lines", name="base model",
                                     line=dict(color=BLUE, width=2, dash="dash"), showlegend=i == 0, legendgroup="base",
                                     hovertemplate="%{y:.3f}<extra>base</extra>"), rr, cc)
        if i == 2:
            _degenerate_traces(fig, rows, x)
        if i == 0:
            _clean_trace(fig, rows)
            fig.add_trace(go.Scatter(x=x, y=[target_ratio * (r.get(base_key) or 0) for r in rows], mode="lines",
                                     name=f"target: {target_ratio}x the base", line=dict(color=GREY, width=2, dash="dot"),
                                     hovertemplate="%{y:.3f}<extra>target</extra>"), rr, cc)
        if line is not None:
            fig.add_trace(go.Scatter(x=[x[0], x[-1]], y=[line, line], mode="lines", name=f"limit {line}",
                                     line=dict(color=GREY, width=2, dash="dot"), showlegend=False,
                                     hovertemplate=f"limit {line}<extra></extra>"), rr, cc)
    last = rows[-1]
    base_layout(fig, f"Learning curve on {last.get('prompts', '?')} held-out problems: {last['items_seen']:,} items "
                     f"trained ({last.get('train_seconds', 0) / 60:.0f} min)", 620)
    fig.update_xaxes(rangemode="tozero")
    fig.update_yaxes(rangemode="tozero", row=1, col=2)
    fig.update_yaxes(rangemode="tozero", row=2, col=1)
    fig.update_xaxes(title_text="items trained", row=2)
    fig.update_layout(legend=dict(orientation="h", yanchor="top", y=-0.12, xanchor="left", x=0), margin=dict(t=90, b=90))
    return fig
