"""How far a run agrees with its AR twin (the same prompt, model, dtype and length, decoded by AR).

Greedy parallel methods are exact in exact arithmetic; in fp32 on a CPU the tests find them token
for token equal to AR. In bf16/fp16 a forward over k tokens does not give bit-identical logits to k
one-token forwards, so where AR's top two tokens are nearly tied a method can pick the other one
and the texts part from there. Nothing here claims exactness: a run is "exact" only where it was
compared, and then we say how many tokens match and, at the first divergence, how close AR's
logits were to a tie (the logit gap between AR's token and the method's token, from one forward of
the AR prefix in the run's own dtype).

    info = compare_to_ar(lm, prompt_ids, out_ids, ar_ids)   # {"ar_match": 57, "ar_compared": 96, ...}
    describe(info)                                          # "diverges at token 57 (logit gap 0.031, bfloat16)"
"""

from __future__ import annotations

from typing import Any


def first_divergence(out: list[int], ref: list[int]) -> int | None:
    """The first index where ``out`` and ``ref`` differ (a length difference counts); None if equal."""
    for i, (a, b) in enumerate(zip(out, ref)):
        if a != b:
            return i
    return None if len(out) == len(ref) else min(len(out), len(ref))


def agreement(out: list[int], ref: list[int]) -> dict[str, Any]:
    """Tokens only: how many of AR's tokens the run reproduced before the first divergence."""
    d = first_divergence(out, ref)
    return {"ar_match": len(ref) if d is None else d, "ar_compared": len(ref), "first_divergence": d}


def logit_gap(lm, prompt_ids: list[int], ref: list[int], d: int, other: int | None) -> float | None:
    """AR's logit of its own token at position ``d`` minus the logit of ``other`` (the token the run
    chose there), from one forward of prompt + ref[:d] in the model's dtype. None where a run only
    ended early or late (no second token to compare)."""
    import torch

    if other is None or d >= len(ref):
        return None
    model = lm.model
    dev = getattr(model, "device", None) or next(model.parameters()).device
    ids = torch.tensor([list(prompt_ids) + list(ref[:d])], device=dev)
    with torch.inference_mode():
        logits = model(input_ids=ids, use_cache=False, logits_to_keep=1).logits[0, -1].float()
    return float(logits[ref[d]] - logits[other])


def compare_to_ar(lm, prompt_ids: list[int], out: list[int], ref: list[int], dtype: str | None = None) -> dict[str, Any]:
    """agreement() plus the logit gap at the first divergence and the dtype it was measured in."""
    info = agreement(out, ref)
    d = info["first_divergence"]
    other = out[d] if d is not None and d < len(out) else None
    info["logit_gap"] = None if d is None else logit_gap(lm, prompt_ids, ref, d, other)
    info["dtype"] = dtype or getattr(lm, "dtype", None)
    return info


def describe(info: dict[str, Any] | None) -> str:
    """One line for a caption: "matches AR: 96 of 96", "diverges at token 57 (logit gap 0.031, bfloat16)",
    or "not compared with AR" (never "exact" without a comparison)."""
    if not info or info.get("ar_compared") is None:
        return "not compared with AR"
    d, n = info.get("first_divergence"), info["ar_compared"]
    if d is None:
        return f"matches AR: {n} of {n}"
    extra = [f"logit gap {info['logit_gap']:.3g}"] if info.get("logit_gap") is not None else []
    if info.get("dtype"):
        extra.append(str(info["dtype"]))
    tail = f" ({', '.join(extra)})" if extra else ""
    return f"diverges at token {d} of {n}{tail}"


def share_table(rows: list[dict]) -> list[dict]:
    """Per (method, dtype), over bench rows compared with their AR twin (AR's own rows and sampled
    rows left out): runs that match AR token for token, tokens matched before the first divergence,
    and the divergences' positions and logit gaps."""
    import statistics
    from collections import defaultdict

    by: dict[tuple[str, str], list[dict]] = defaultdict(list)
    for r in rows:
        if r.get("method") == "ar" or r.get("matches_ar") is None or not r.get("record", True):
            continue
        by[(r["method"], str(r.get("dtype") or "?"))].append(r)
    out = []
    for (m, dt), rs in sorted(by.items()):
        div = [r for r in rs if not r["matches_ar"]]
        firsts = [r["first_divergence"] for r in div if r.get("first_divergence") is not None]
        gaps = [abs(r["logit_gap"]) for r in div if r.get("logit_gap") is not None]
        matched = sum(r.get("ar_match", len(r["output_ids"]) if r["matches_ar"] else 0) for r in rs)
        compared = sum(r.get("ar_compared", len(r["output_ids"])) for r in rs)
        out.append({"method": m, "dtype": dt, "runs": len(rs), "runs_matching": len(rs) - len(div),
                    "share": (len(rs) - len(div)) / len(rs), "token_share": matched / compared if compared else None,
                    "first_divergence": firsts, "median_gap": statistics.median(gaps) if gaps else None,
                    "max_gap": max(gaps) if gaps else None})
    return out


def format_share_table(rows: list[dict]) -> str:
    """share_table() as a markdown table (bench_report)."""
    f = lambda v, spec: "–" if v is None else format(v, spec)
    lines = ["| method | dtype | runs | match AR token for token | share | AR tokens reproduced before the first divergence | first divergence at | |logit gap| there (median, max) |",
             "|---|---|---:|---:|---:|---:|---|---|"]
    for r in share_table(rows):
        firsts = ", ".join(str(x) for x in sorted(r["first_divergence"])) or "–"
        lines.append(f"| {r['method']} | {r['dtype']} | {r['runs']} | {r['runs_matching']} | {r['share']:.0%} | "
                     f"{f(r['token_share'], '.0%')} | {firsts} | {f(r['median_gap'], '.3g')}, {f(r['max_gap'], '.3g')} |")
    return "\n".join(lines)
