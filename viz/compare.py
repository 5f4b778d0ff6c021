"""Compare figures: several traces of one prompt side by side.

``traces`` is an ordered mapping label -> Trace (usually one per method).
"""

from __future__ import annotations

from typing import Mapping

import plotly.graph_objects as go

from decoding import analysis
from decoding.exactness import agreement, describe
from viz.style import (BLACK, BLUE, METHOD_COLOURS, METHOD_NAMES, PROVENANCE, PURPLE, SKY, YELLOW, base_layout,
                       empty_figure, esc, esc_attr, text_colour)


def _colour(trace, i: int) -> str:
    return METHOD_COLOURS.get(trace.method, [BLUE, PURPLE, SKY, YELLOW][i % 4])


def ar_agreement(t, ar) -> dict | None:
    """How far trace ``t`` agrees with its AR twin ``ar`` (tokens only; decoding.exactness.agreement),
    or None where the two are not comparable: no AR run, another prompt, model, dtype or length, or a
    sampled run (never a claim of exactness without a comparison)."""
    if ar is None or t.sampled or ar.sampled:
        return None
    if (t.prompt_ids, t.model_id, t.dtype, t.max_new_tokens) != (ar.prompt_ids, ar.model_id, ar.dtype, ar.max_new_tokens):
        return None
    return agreement(t.output_ids, ar.output_ids) | {"dtype": t.dtype}


def summary_rows(traces: Mapping[str, object]) -> list[dict]:
    """One row per trace: steps, tokens/step, wall time, tokens/s, speedup against the AR trace, and
    how many of the AR trace's tokens it reproduced ("matches AR: 96 of 96" / "diverges at token 57 ...")."""
    ar = next((t for t in traces.values() if t.method == "ar"), None)
    rows = []
    for label, t in traces.items():
        if t is ar:
            vs_ar = "the reference"
        elif t.sampled:
            vs_ar = "sampled: not comparable"
        else:
            vs_ar = describe(ar_agreement(t, ar))
        speed = t.tokens_per_s / ar.tokens_per_s if ar is not None and ar.tokens_per_s > 0 else None
        rows.append({
            "run": label, "method": METHOD_NAMES.get(t.method, t.method),
            "params": ", ".join(f"{k}={v}" for k, v in t.params.items() if k != "seed"),
            "new tokens": len(t.output_ids), "steps": t.n_steps, "tokens/step": round(t.tokens_per_step, 3),
            "seconds": round(t.seconds, 3), "tokens/s": round(t.tokens_per_s, 2),
            "speedup vs AR": None if speed is None else round(speed, 2),
            "stop": t.stop_reason, "device": t.device, "kernel": t.kernel, "step": t.step, "vs AR tokens": vs_ar,
        })
    return rows


def accepted_histogram_figure(traces: Mapping[str, object]) -> go.Figure:
    """Tokens committed per step -> number of steps, one bar group per trace."""
    if not traces:
        return empty_figure("No runs to compare yet.")
    fig = go.Figure()
    top = 1
    for i, (label, t) in enumerate(traces.items()):
        h = analysis.accepted_histogram(t)
        xs = sorted(h)
        top = max([top] + xs)
        fig.add_trace(go.Bar(x=xs, y=[h[x] for x in xs], name=f"{esc(label)} ({t.tokens_per_step:.2f} tokens/step)",
                             marker_color=_colour(t, i),
                             hovertemplate=f"{esc(label)}<br>%{{y}} steps committed %{{x}} token(s)<extra></extra>"))
    base_layout(fig, "Tokens committed per step", 360)
    fig.update_layout(barmode="group")
    fig.update_xaxes(title_text="tokens committed in one step", dtick=1, range=[0.4, top + 0.6])
    fig.update_yaxes(title_text="steps")
    return fig


def committed_curve_figure(traces: Mapping[str, object]) -> go.Figure:
    """Cumulative tokens committed after each step, one line per trace (AR is the diagonal)."""
    if not traces:
        return empty_figure("No runs to compare yet.")
    fig = go.Figure()
    for i, (label, t) in enumerate(traces.items()):
        ys = analysis.committed_curve(t)
        fig.add_trace(go.Scatter(x=list(range(len(ys))), y=ys, mode="lines+markers", name=esc(label),
                                 line=dict(color=_colour(t, i), width=3, shape="hv"), marker=dict(size=5),
                                 hovertemplate=f"{esc(label)}<br>after step %{{x}}: %{{y}} tokens<extra></extra>"))
    base_layout(fig, "Tokens committed vs steps (forward passes after the prefill)", 380)
    fig.update_xaxes(title_text="step")
    fig.update_yaxes(title_text="tokens committed", rangemode="tozero")
    return fig


def provenance_figure(traces: Mapping[str, object]) -> go.Figure:
    """Share of output tokens by the mechanism that produced them: one stacked bar per trace."""
    if not traces:
        return empty_figure("No runs to compare yet.")
    labels = list(traces)
    counts = {lab: _count(analysis.provenance(traces[lab])) for lab in labels}
    fig = go.Figure()
    for src, (colour, name) in PROVENANCE.items():
        ys = [counts[lab].get(src, 0) for lab in labels]
        if any(ys):
            fig.add_trace(go.Bar(y=[esc(lab) for lab in labels], x=ys, name=name, orientation="h", marker_color=colour,
                                 hovertemplate=f"%{{y}}: %{{x}} tokens from {name}<extra></extra>"))
    base_layout(fig, "Where each output token came from", 140 + 50 * len(labels))
    fig.update_layout(barmode="stack")
    fig.update_xaxes(title_text="output tokens")
    fig.update_yaxes(autorange="reversed")
    return fig


def _count(labels: list[str]) -> dict[str, int]:
    out: dict[str, int] = {}
    for x in labels:
        out[x] = out.get(x, 0) + 1
    return out


def provenance_html(trace, max_tokens: int | None = None) -> str:
    """The output text as HTML spans, each token coloured by its provenance (all text escaped).

    Tokens of one multi-token step share an underline so a chunk that landed at once is visible.
    """
    prov = analysis.provenance(trace)
    pieces = trace.output_pieces or [f"⟨{t}⟩" for t in trace.output_ids]
    step_of = []
    first = len(trace.output_ids) - trace.step_tokens
    step_of += [-1] * first
    for s in trace.steps:
        step_of += [s.index] * len(s.tokens)
    spans = []
    n = len(pieces) if max_tokens is None else min(len(pieces), max_tokens)
    for i in range(n):
        src = prov[i] if i < len(prov) else "step"
        colour, name = PROVENANCE.get(src, (BLACK, src))
        txt = esc(pieces[i]).replace("\n", "↵<br>")
        st = step_of[i] if i < len(step_of) else -1
        spans.append(f'<span title="{esc_attr(name)} · step {st}" style="background:{colour};color:{text_colour(colour)};'
                     f'padding:1px 1px;margin:0 1px 2px 0;border-radius:3px;white-space:pre-wrap;'
                     f'border-bottom:3px solid {"#000" if st % 2 else "#777"}">{txt}</span>')
    more = f" … ({len(pieces) - n} more tokens)" if n < len(pieces) else ""
    return ('<div style="font-family:monospace;font-size:15px;line-height:1.9;">' + "".join(spans) + esc(more) + "</div>")


def provenance_legend_html(sources: list[str] | None = None) -> str:
    keys = sources or list(PROVENANCE)
    items = [f'<span style="background:{PROVENANCE[k][0]};color:{text_colour(PROVENANCE[k][0])};padding:1px 6px;'
             f'margin-right:6px;border-radius:3px;font-size:13px">{esc(PROVENANCE[k][1])}</span>' for k in keys if k in PROVENANCE]
    return "<div>" + "".join(items) + "</div>"
