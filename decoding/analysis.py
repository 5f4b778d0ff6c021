"""Analyses of a trace: tokens per step, accepted lengths, Jacobi fast-forward / stationary tokens
(CLLM's definitions), where each output token came from, and the lookahead pool at any step.

Pure Python over the trace's plain data: no torch, no model.
"""

from __future__ import annotations

from collections import Counter

from .methods.lookahead_pool import replay
from .trace import Trace
from .verify import ORIGINS

# Provenance labels (where each output token came from), in the order views list them. The
# verifier decides them (decoding/verify.py) and each step stores them (Step.origins).
PROVENANCE = ORIGINS


def accepted_histogram(trace: Trace) -> dict[int, int]:
    """Tokens committed per step -> number of steps."""
    return dict(sorted(Counter(len(s.tokens) for s in trace.steps).items()))


def committed_curve(trace: Trace) -> list[int]:
    """Output tokens after the prefill and after each step."""
    out = [len(trace.output_ids) - trace.step_tokens]
    for s in trace.steps:
        out.append(out[-1] + len(s.tokens))
    return out


def provenance(trace: Trace) -> list[str]:
    """One label per output token (keys of PROVENANCE): "prefill" for the prefill's tokens, then
    each step's origins as its verifier decided them (accepted guesses first, the model's token last)."""
    labels = ["prefill"] * (len(trace.output_ids) - trace.step_tokens)
    for s in trace.steps:
        labels += s.origins
    return labels


def provenance_shares(trace: Trace) -> dict[str, float]:
    """Share of output tokens per provenance label."""
    labels = provenance(trace)
    c = Counter(labels)
    return {k: c[k] / len(labels) for k in PROVENANCE if c[k]} if labels else {}


# ---- Jacobi -------------------------------------------------------------------------------------
def jacobi_iterations(trace: Trace, block: int) -> list:
    """The JacobiRecords of ``block``, one per iteration, in order."""
    recs = [s.jacobi for s in trace.steps if s.jacobi is not None and s.jacobi.block == block]
    return sorted(recs, key=lambda r: r.iteration)


def jacobi_fixed_point(trace: Trace, block: int) -> list[int]:
    for b in trace.blocks:
        if b.index == block:
            return list(b.fixed_point)
    raise KeyError(f"no Jacobi block {block} in this trace")


def jacobi_cell_states(trace: Trace, block: int) -> list[list[str]]:
    """One row per iteration of ``block``: the state of each position as the iteration fed it.

    "committed": committed by an earlier iteration; "new": committed by this iteration as its
    first token (the one AR would also get); "fast_forward": committed by this iteration beyond
    its first token; "stationary": already equal to the fixed point while an earlier position is
    wrong, and unchanged until committed; "correct": equal to the fixed point otherwise; "wrong".
    """
    its = jacobi_iterations(trace, block)
    fixed = jacobi_fixed_point(trace, block)
    rows = []
    for i, it in enumerate(its):
        state = it.before
        right = [p < len(fixed) and state[p] == fixed[p] for p in range(len(state))]
        row = []
        for p in range(len(state)):
            if p < it.start:
                row.append("committed")
            elif p < it.start + it.committed:
                row.append("new" if p == it.start else "fast_forward")
            elif not right[p]:
                row.append("wrong")
            elif any(not right[q] for q in range(it.start, p)) and _unchanged_until_commit(its, i, p):
                row.append("stationary")
            else:
                row.append("correct")
        rows.append(row)
    return rows


def _unchanged_until_commit(its: list, i: int, p: int) -> bool:
    tok = its[i].before[p]
    for it in its[i:]:
        if it.before[p] != tok:
            return False
        if p < it.start + it.committed:
            return True
    return its[-1].after[p] == tok if p < len(its[-1].after) else False


def jacobi_counts(trace: Trace) -> list[dict]:
    """Per block: iterations, fast-forwarded tokens (committed beyond the first token of an
    iteration) and stationary tokens (positions stationary at some iteration)."""
    out = []
    for b in trace.blocks:
        its = jacobi_iterations(trace, b.index)
        rows = jacobi_cell_states(trace, b.index) if its else []
        stationary = {p for row in rows for p, s in enumerate(row) if s == "stationary"}
        out.append({
            "block": b.index,
            "size": len(b.fixed_point),
            "iterations": len(its),
            "fast_forwarded": sum(max(it.committed - 1, 0) for it in its),
            "stationary": len(stationary),
        })
    return out


# ---- lookahead ----------------------------------------------------------------------------------
def pool_at(trace: Trace, step_index: int) -> dict[int, list[list[int]]]:
    """The pool as the step ``step_index`` saw it (before its own harvest): key -> continuations,
    oldest first."""
    ops = (s.lookahead.pool_ops for s in trace.steps[:step_index] if s.lookahead is not None)
    return replay(trace.pool_seed, ops, trace.params.get("G", 0))


# ---- sampling ---------------------------------------------------------------------------------------
def sampling_decisions(trace: Trace) -> list[dict]:
    """One row per decision of a sampled run (Step.sampling), in order: each candidate token tried
    ("accepted" / "rejected") and each token drawn from what was left ("drawn").

    Keys: step, position (0 = the step's first new token), output (index in output_ids, None
    beyond a cut at EOS / max_new_tokens), candidate (-1 for a draw), token, p, outcome.
    """
    rows = []
    before = len(trace.output_ids) - trace.step_tokens
    for si, s in enumerate(trace.steps):
        r = s.sampling
        if r is None:
            before += len(s.tokens)
            continue
        for pos, tried in enumerate(r.tried):
            out = before + pos if pos < len(s.tokens) else None
            for c, t, p, ok in tried:
                rows.append(dict(step=si, position=pos, output=out, candidate=c, token=t, p=p,
                                 outcome="accepted" if ok else "rejected"))
            if not (tried and tried[-1][3]):
                rows.append(dict(step=si, position=pos, output=out, candidate=-1, token=r.final[pos], p=r.final_p[pos],
                                 outcome="drawn"))
        before += len(s.tokens)
    return rows


def sampling_stats(trace: Trace) -> dict[str, float]:
    """Candidate tries of a sampled run: how many, the share accepted, the mean p of each outcome."""
    rows = sampling_decisions(trace)
    tries = [r for r in rows if r["outcome"] != "drawn"]
    acc = [r["p"] for r in tries if r["outcome"] == "accepted"]
    rej = [r["p"] for r in tries if r["outcome"] == "rejected"]
    mean = lambda v: sum(v) / len(v) if v else 0.0
    return {"tries": len(tries), "accepted": len(acc), "accept_rate": len(acc) / len(tries) if tries else 0.0,
            "mean_p_accepted": mean(acc), "mean_p_rejected": mean(rej), "draws": len(rows) - len(tries)}
