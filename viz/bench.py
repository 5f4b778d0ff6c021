"""The papers' tables on the lab's own numbers: tokens per step and speedup over AR per Spec-Bench
category for every method (an asset written by ``scripts/bench_asset.py`` from a real bench run),
beside the figures the papers publish, marked as the papers' (other models, other hardware).

Input: the asset's dict ``{"source": {...}, "rows": [{method, category, prompts,
tokens_per_step, vs_ar, ...}]}``. Nothing here runs a model.
"""

from __future__ import annotations

import plotly.graph_objects as go

from decoding.methods import REGISTRY
from viz.style import BLACK, GREY, METHOD_COLOURS, METHOD_NAMES, base_layout, empty_figure, esc, method_colour, method_name

# AR is 1 by definition; generate is AR by another loop; ":auto": the cost-aware step budget
# every method of the registry but AR, each with its budgeted variant (shown where an asset has it)
SHOWN = tuple(v for m in REGISTRY if m != "ar" for v in (m, f"{m}:auto"))

# What the papers report (their models and hardware, not measured here).
PUBLISHED: list[dict] = [
    {"method": "lookahead", "low": 1.8, "high": 1.8, "label": "lookahead paper: 1.8× (MT-Bench)", "at": "top right",
     "where": "MT-Bench, 7B chat model, one A100",
     "paper": "Fu et al., Break the Sequential Dependency of LLM Inference Using Lookahead Decoding (ICML 2024)"},
    {"method": "lookahead", "low": 2.3, "high": 2.3, "label": "lookahead paper: 2.3× (HumanEval)", "at": "bottom right",
     "where": "HumanEval (code), 7B model, one A100", "paper": "Fu et al. (ICML 2024)"},
    {"method": "jacobi", "low": 2.4, "high": 3.4, "label": "CLLM paper: 2.4–3.4× (Jacobi on a CLLM)", "at": "top left",
     "where": "Jacobi decoding on consistency-trained 7B models (CLLMs), specialised domains and MT-Bench, A100",
     "paper": "Kou et al., CLLMs: Consistency Large Language Models (ICML 2024)"},
]


def published_rows() -> list[dict]:
    """The papers' figures as table rows, each saying it is the paper's."""
    return [{"method": METHOD_NAMES[p["method"]], "published speedup": p["label"].split(": ", 1)[1],
             "setting": p["where"], "source (not measured here)": p["paper"]} for p in PUBLISHED]


def categories(asset: dict) -> list[str]:
    cats = sorted({r["category"] for r in asset["rows"] if r["category"] != "ALL"})
    return cats + (["ALL"] if any(r["category"] == "ALL" for r in asset["rows"]) else [])


def _by(asset: dict) -> dict[tuple[str, str], dict]:
    return {(r["method"], r["category"]): r for r in asset["rows"]}


def table_rows(asset: dict) -> list[dict]:
    """One row per category: prompts, then tokens/step and speedup over AR of each shown method."""
    by, out = _by(asset), []
    for c in categories(asset):
        row = {"category": c, "prompts": by.get(("ar", c), {}).get("prompts")}
        for m in SHOWN:
            r = by.get((m, c), {})
            few = r.get("prompts") is not None and r.get("prompts") != row["prompts"]
            if not r:
                continue
            row[f"{method_name(m)} tokens/step"] = r.get("tokens_per_step")
            row[f"{method_name(m)} × AR"] = r.get("vs_ar")
            if few:
                row[f"{method_name(m)} prompts"] = r.get("prompts")
        out.append(row)
    return out


def category_sentence(asset: dict, category: str) -> str:
    """Where each method helps in ``category``, and why, from the asset's numbers."""
    by = _by(asset)
    tps = {m: by[(m, category)]["tokens_per_step"] for m in SHOWN if (m, category) in by}
    fast = {m: by[(m, category)]["vs_ar"] for m in SHOWN if by.get((m, category), {}).get("vs_ar") is not None}
    if not tps:
        return f"{category}: no runs."
    top = max(tps, key=tps.get)
    words = f"{category}: {method_name(top)} commits the most per step ({tps[top]:.2f} tokens)"
    if top == "tr":
        words += ", because its draft tree tries the model's earlier top-k successors of several tokens at once"
    elif top == "pld":
        words += ", because the answer copies long spans of the prompt and prompt lookup drafts up to k tokens of a span in one step (a lookahead candidate has at most N-1)"
    elif top == "suffix":
        words += (", because the answer repeats long stretches of the text and suffix drafting drafts what followed "
                  "earlier matches of the text's end, more tokens for a longer match")
    elif top == "lookahead" and "pld" in tps:
        words += f" (prompt lookup {tps['pld']:.2f}): its window and pool find n-grams the prompt does not hold"
    if fast:
        best = max(fast, key=fast.get)
        words += (f"; the fastest is {method_name(best)} at {fast[best]:.2f}× AR" if fast[best] >= 1 else
                  f"; none beats AR in wall time here (best: {method_name(best)}, {fast[best]:.2f}× AR): a step that feeds "
                  f"more tokens costs more on this hardware than the extra tokens per step save")
    return words + "."


def _bars(asset: dict, key: str, title: str, y_title: str) -> go.Figure:
    by, cats = _by(asset), categories(asset)
    fig = go.Figure()
    shown = [m for m in SHOWN if any(by.get((m, c), {}).get(key) is not None for c in cats)]
    for m in shown:
        ys = [by.get((m, c), {}).get(key) for c in cats]
        labels = [f"{v:.2f}" if v is not None else "" for v in ys] if len(shown) <= 4 else None  # more: unreadable
        fig.add_trace(go.Bar(x=cats, y=ys, name=method_name(m), marker_color=method_colour(m),
                             marker_pattern_shape="/" if ":" in m else "",  # a budget variant: hatched
                             text=labels, textposition="outside",
                             hovertemplate=f"{esc(method_name(m))}<br>%{{x}}: %{{y:.2f}}<extra></extra>"))
    fig.add_hline(y=1.0, line=dict(color=BLACK, dash="dash", width=1), annotation_text="AR",
                  annotation_position="top left")
    base_layout(fig, esc(title), 440)
    fig.update_layout(barmode="group")
    fig.update_yaxes(title_text=y_title, rangemode="tozero")
    return fig


def tokens_per_step_figure(asset: dict | None) -> go.Figure:
    """Tokens per step per category and method (AR = 1): what a step commits, on any hardware."""
    if not asset or not asset.get("rows"):
        return empty_figure("No benchmark asset.")
    return _bars(asset, "tokens_per_step", "Tokens per step per category (the same on any hardware)",
                 "tokens per step (AR = 1)")


def speedup_figure(asset: dict | None) -> go.Figure:
    """Speedup over AR per category and method on the asset's machine, with the papers' published
    speedups as dotted lines, marked as theirs (7B models on an A100, not measured here)."""
    if not asset or not asset.get("rows"):
        return empty_figure("No benchmark asset.")
    machine = asset["source"].get("machine", "this machine").split(",")[0].split(" (")[0]
    fig = _bars(asset, "vs_ar", f"Speedup over AR on {machine} (the papers' figures dotted: not measured here)",
                "speedup over AR (tokens/s ratio)")
    for p in PUBLISHED:
        colour = METHOD_COLOURS.get(p["method"], GREY)
        if p["high"] > p["low"]:
            fig.add_hrect(y0=p["low"], y1=p["high"], fillcolor=colour, opacity=0.12, line_width=0)
        fig.add_hline(y=p["low"], line=dict(color=colour, dash="dot", width=2), annotation_text=esc(p["label"]),
                      annotation_position=p["at"], annotation_font_size=11)
    fig.add_trace(go.Scatter(x=[None], y=[None], mode="lines", name="published by the papers (7B, A100): not measured here",
                             line=dict(color=GREY, dash="dot", width=2), hoverinfo="skip"))
    return fig
