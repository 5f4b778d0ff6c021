"""Analyses of a trace: tokens per step, accepted lengths, Jacobi fast-forward / stationary tokens
(CLLM's definitions), where each output token came from, and the lookahead pool at any step.

Pure Python over the trace's plain data: no torch, no model.
"""

from __future__ import annotations

from collections import Counter

from .methods.jacobi import JacobiRecord
from .methods.lookahead import LookaheadRecord
from .methods.lookahead_pool import replay
from .trace import ORIGINS, Trace

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
def jacobi_steps(trace: Trace, block: int) -> list:
    """The Steps of ``block``'s iterations, in order (each with its JacobiRecord in ``.record``)."""
    steps = [s for s in trace.steps if isinstance(s.record, JacobiRecord) and s.record.block == block]
    return sorted(steps, key=lambda s: s.record.iteration)


def jacobi_iterations(trace: Trace, block: int) -> list:
    """The JacobiRecords of ``block``, one per iteration, in order."""
    return [s.record for s in jacobi_steps(trace, block)]


def jacobi_fixed_point(trace: Trace, block: int) -> list[int]:
    for b in trace.blocks:
        if b.index == block:
            return list(b.fixed_point)
    raise KeyError(f"no Jacobi block {block} in this trace")


def jacobi_states(trace: Trace, block: int) -> list[list[int]]:
    """The block's states y(0) .. y(K): y(0) is the initial guess (what iteration 1 fed), y(k) the
    block after iteration k (what iteration k + 1 fed); K = the block's iterations."""
    its = jacobi_iterations(trace, block)
    return [list(it.before) for it in its] + [list(its[-1].after)] if its else []


def _right_prefix(state: list[int], fixed: list[int]) -> int:
    """Length of the longest prefix of ``state`` that equals the fixed point."""
    n = 0
    while n < min(len(state), len(fixed)) and state[n] == fixed[n]:
        n += 1
    return n


def jacobi_commits(trace: Trace, block: int) -> list[list[int]]:
    """Per state y(k) (see ``jacobi_states``): the block positions whose tokens the iteration that
    produced it committed to the output (y(0): none; the block's position 0 came before it).

    Iteration k feeds the block from its current token (position ``start``) on and commits the
    step's tokens: the guesses it confirmed, then the model's own next token after them, at
    positions start + 1 .. start + len(step.tokens). The last of them can be position n, one past
    the block: the next block's position 0 (the token the next block starts from), which the
    block's last iteration always commits unless the run ended. So the positions add up to the
    block's committed tokens (``jacobi_counts``' "tokens"), n for a full block."""
    out: list[list[int]] = [[]]
    for s in jacobi_steps(trace, block):
        out.append(list(range(s.record.start + 1, s.record.start + len(s.tokens) + 1)))
    return out


def jacobi_cell_states(trace: Trace, block: int) -> list[list[str]]:
    """One row per state y(0) .. y(K) of ``block`` (``jacobi_states``): CLLM's reading of each position.

    The forward of iteration k turns y(k-1) into y(k) and extends the right prefix (positions equal
    to the fixed point) from L(y(k-1)) to L(y(k)). In row k:
    "committed": committed to the output by an earlier iteration, or confirmed by this one (a guess
    right in y(k-1) that this iteration committed; ``jacobi_commits`` says which);
    "new": position L(y(k-1)), the token this forward got right as AR would (always right);
    "fast_forward": a further position of the extended prefix that was wrong in y(k-1): this one
    forward made several consecutive tokens right (CLLM's fast-forwarding). They are committed by
    the next iteration, which feeds and confirms them;
    "stationary": right while an earlier position is wrong and unchanged in every later state, or
    such a token joining the prefix now (it was right before this forward, so not fast-forwarded);
    "correct": right otherwise (e.g. a guess right by chance at the front of y(0)); "wrong".
    """
    its = jacobi_iterations(trace, block)
    fixed = jacobi_fixed_point(trace, block)
    states = jacobi_states(trace, block)
    rows = []
    for k, y in enumerate(states):
        start = its[k - 1].start if k else 0
        lo = _right_prefix(states[k - 1], fixed) if k else 0
        hi = _right_prefix(y, fixed)
        rows.append([_cell_state(states, fixed, k, p, start, lo, hi) for p in range(len(y))])
    return rows


def _cell_state(states: list[list[int]], fixed: list[int], k: int, p: int, start: int, lo: int, hi: int) -> str:
    y = states[k]
    right = p < len(fixed) and y[p] == fixed[p]
    if p <= start or (k and p < lo):
        return "committed"
    if k and p == lo and right:
        return "new"
    if k and p < hi:
        return "fast_forward" if states[k - 1][p] != fixed[p] else "stationary"
    if not right:
        return "wrong"
    stays = all(p < len(later) and later[p] == y[p] for later in states[k:])
    return "stationary" if p > hi and stays else "correct"


def jacobi_counts(trace: Trace) -> list[dict]:
    """Per block, by CLLM's definitions (``jacobi_cell_states``): iterations; tokens its iterations
    committed (AR needs one forward pass per token: so a block in which no guess is ever right
    early takes as many iterations as it commits tokens, n for a full block); fast-forwarded tokens
    (made right in one forward together with the token before them); stationary tokens (positions
    stationary in some state); and extra_committed: tokens committed beyond one per iteration (the
    source of the speedup: confirmed fast-forwarded, stationary and lucky guesses)."""
    out = []
    for b in trace.blocks:
        its = jacobi_iterations(trace, b.index)
        rows = jacobi_cell_states(trace, b.index) if its else []
        out.append({
            "block": b.index,
            "size": len(b.fixed_point),
            "iterations": len(its),
            "tokens": sum(len(s.tokens) for s in jacobi_steps(trace, b.index)),
            "fast_forwarded": sum(row.count("fast_forward") for row in rows),
            "stationary": len({p for row in rows for p, s in enumerate(row) if s == "stationary"}),
            "extra_committed": sum(max(it.committed - 1, 0) for it in its),
        })
    return out


# ---- lookahead ----------------------------------------------------------------------------------
def pool_at(trace: Trace, step_index: int) -> dict[int, list[list[int]]]:
    """The pool as the step ``step_index`` saw it (before its own harvest): key -> continuations,
    oldest first."""
    ops = (s.record.pool_ops for s in trace.steps[:step_index] if isinstance(s.record, LookaheadRecord))
    return replay(trace.pool_seed, ops, trace.params["G"])


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
