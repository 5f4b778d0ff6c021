"""The speedup account of a run: its tokens per step weighed against what its steps cost here.

Tokens per step alone does not explain wall-clock speed: one forward over k new tokens costs
about c(k) one-token forwards, and c depends on the device (a 2-core CPU: c(32) ~ 3; a GPU:
c(32) ~ 1). The account of a run (trace or bench row) against AR on the same prompt:

    AR decode time      = S_ar * t1 / (1 - o_ar)          S_ar = tokens committed by steps
    method decode time  = S * t1 * cost / (1 - o)         S = steps, cost = mean c(fed) / c(1)
    decode speedup      = tokens_per_step / cost * (1 - o) / (1 - o_ar)

t1 is the time of a one-token forward, o the share of step time outside the forward (propose,
verify, pool, Python), measured from the run itself. The prefill is the same for both and dilutes
the speedup: with prefill share f of the AR run, speedup = 1 / (f + (1 - f) / decode speedup).

Worked example: 2.0 tokens/step, steps fed 8 tokens each with c(8) = 1.6, overhead 10% vs AR 5%:
decode speedup = 2.0 / 1.6 * 0.90 / 0.95 = 1.18x.

Plain Python over traces and bench rows: no torch, no Streamlit or Plotly.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ..analysis import provenance_shares
from ..trace import Trace
from .costs import CostCurve

DISAGREE = 0.15  # prediction and measurement disagree when they differ by more than this


# ---- run statistics: a trace or a bench row ---------------------------------------------------
@dataclass
class RunStats:
    """What the account needs from one run (a Trace or a `python -m decoding bench` row)."""

    method: str
    fed: list[int]  # tokens fed per step
    step_tokens: int  # tokens committed by steps (all but the prefill's)
    seconds: float  # the whole run, prefill included
    prefill_seconds: float
    forward_seconds: float  # the steps' forwards
    new_tokens: int
    params: dict = field(default_factory=dict)
    step_costs: list[float] | None = None  # budget=auto: each step's cost as the run calibrated it

    @property
    def steps(self) -> int:
        return len(self.fed)

    @property
    def tokens_per_step(self) -> float:
        return self.step_tokens / self.steps if self.steps else 0.0

    @property
    def step_seconds(self) -> float:
        return max(self.seconds - self.prefill_seconds, 0.0)

    @property
    def overhead(self) -> float:
        """Share of step time outside the forward."""
        s = self.step_seconds
        return max(0.0, (s - self.forward_seconds) / s) if s > 0 else 0.0

    @property
    def tokens_per_s(self) -> float:
        return self.new_tokens / self.seconds if self.seconds > 0 else 0.0


def stats(run: Trace | dict | RunStats) -> RunStats:
    if isinstance(run, RunStats):
        return run
    if isinstance(run, Trace):
        costs = [s.budget.cost for s in run.steps] if run.steps and all(s.budget for s in run.steps) else None
        return RunStats(run.method, [s.fed for s in run.steps], run.step_tokens, run.seconds, run.prefill_seconds,
                        run.forward_seconds, len(run.output_ids), dict(run.params), costs)
    if isinstance(run, dict):
        if run.get("fed") is None:
            raise ValueError(f"a {run.get('method', '?')} bench row without per-step fed counts has no account")
        new = len(run["output_ids"]) if "output_ids" in run else int(run["new_tokens"])
        return RunStats(run["method"], list(run["fed"]), max(new - 1, 0) if run["fed"] else 0, float(run["seconds"]),
                        float(run.get("prefill_seconds") or 0.0), float(run.get("forward_seconds") or 0.0), new,
                        dict(run.get("params") or {}), run.get("step_costs"))
    raise TypeError(f"cannot account for a {type(run).__name__}")


# ---- the account ------------------------------------------------------------------------------
@dataclass
class Account:
    method: str
    tokens_per_step: float
    step_cost: float  # mean c(fed)/c(1) over the steps: each step cost this many AR forwards
    overhead: float  # this run's share of step time outside the forward
    ar_overhead: float
    ar_overhead_from: str  # "the AR run", "the cost curve" or "assumed equal"
    overhead_factor: float  # (1 - overhead) / (1 - ar_overhead)
    decode_speedup: float  # tokens_per_step / step_cost * overhead_factor
    prefill_share: float  # of the (estimated) AR run's time
    predicted: float  # whole run, prefill included
    measured: float | None = None  # tokens/s over AR's tokens/s, same prompt
    measured_step_cost: float | None = None  # forward seconds per step over AR's
    regime: str = ""
    # budget=auto: predicted from the costs the run calibrated online (step time, overhead included)
    calibrated: float | None = None
    calibrated_step_cost: float | None = None

    @property
    def best_prediction(self) -> float:
        """The calibrated prediction where the run has one, else the curve's."""
        return self.calibrated if self.calibrated is not None else self.predicted

    @property
    def error(self) -> float | None:
        """predicted / measured - 1 (the calibrated prediction where there is one)."""
        return None if not self.measured else self.best_prediction / self.measured - 1

    @property
    def disagrees(self) -> bool:
        e = self.error
        return e is not None and abs(e) > DISAGREE

    def sentence(self) -> str:
        s = (f"{self.tokens_per_step:.2f} tokens/step, each step cost {self.step_cost:.2f} AR steps, "
             f"{self.overhead:.0%} overhead (AR {self.ar_overhead:.0%}): predicted {self.predicted:.2f}x")
        if self.calibrated is not None:
            s += (f"; from the step costs the run calibrated itself ({self.calibrated_step_cost:.2f} AR steps per "
                  f"step, overhead included): {self.calibrated:.2f}x")
        if self.measured is not None:
            s += f", measured {self.measured:.2f}x"
        return s + "."

    def warning(self, load: str = "") -> str:
        """Empty, or one sentence on why prediction and measurement may disagree; ``load``: what
        the runs' step times say about a busy machine (``decoding.perf.load.why_they_part``), first."""
        if not self.disagrees:
            return ""
        why = [load] if load else []
        if self.measured_step_cost is not None and abs(self.measured_step_cost / self.step_cost - 1) > 0.1:
            why.append(f"its steps actually cost {self.measured_step_cost:.2f} AR forwards, not the curve's "
                       f"{self.step_cost:.2f} (another cache length, mask or load on the machine)")
        if not load:
            why.append("timing noise on a short run or a busy machine")
        return (f"Prediction and measurement disagree by {abs(self.error):.0%} (more than {DISAGREE:.0%}): "
                + "; ".join(why) + ".")

    def rows(self) -> list[dict]:
        """The account as (quantity, value, meaning) rows for a table."""
        out = [
            {"quantity": "tokens per step", "value": round(self.tokens_per_step, 3), "meaning": "tokens committed per forward (AR: 1)"},
            {"quantity": "step cost (curve)", "value": round(self.step_cost, 3), "meaning": "mean forward cost of a step in one-token forwards"},
        ]
        if self.measured_step_cost is not None:
            out.append({"quantity": "step cost (measured)", "value": round(self.measured_step_cost, 3),
                        "meaning": "forward seconds per step over AR's"})
        out += [
            {"quantity": "overhead", "value": round(self.overhead, 3), "meaning": "share of step time outside the forward"},
            {"quantity": "AR overhead", "value": round(self.ar_overhead, 3), "meaning": f"from {self.ar_overhead_from}"},
            {"quantity": "decode speedup", "value": round(self.decode_speedup, 3), "meaning": "tokens/step ÷ step cost × overhead factor"},
            {"quantity": "prefill share", "value": round(self.prefill_share, 3), "meaning": "of the AR run's time (same for both)"},
            {"quantity": "predicted speedup", "value": round(self.predicted, 3), "meaning": "whole run, prefill included"},
        ]
        if self.calibrated is not None:
            out.append({"quantity": "predicted (calibrated)", "value": round(self.calibrated, 3),
                        "meaning": f"tokens/step ÷ the run's own calibrated step cost ({self.calibrated_step_cost:.2f})"})
        if self.measured is not None:
            out.append({"quantity": "measured speedup", "value": round(self.measured, 3), "meaning": "tokens/s over AR's tokens/s"})
        return out


def mean_step_cost(fed: list[int], curve: CostCurve) -> float:
    """Mean relative cost of the steps: sum of c(fed)/c(1) over steps / steps."""
    return sum(curve.relative_cost(k) for k in fed) / len(fed) if fed else 1.0


def account(run, curve: CostCurve, ar=None) -> Account:
    """The speedup account of ``run`` (Trace, bench row or RunStats) on ``curve``'s hardware,
    measured against ``ar`` (an AR run of the same prompt) when given."""
    m = stats(run)
    a = stats(ar) if ar is not None else None
    tps = m.tokens_per_step
    cost = mean_step_cost(m.fed, curve)
    if a is not None and a.steps:
        o_ar, src = a.overhead, "the AR run"
    elif curve.ar_overhead is not None:
        o_ar, src = curve.ar_overhead, "the cost curve"
    else:
        o_ar, src = m.overhead, "assumed equal"
    factor = (1 - m.overhead) / (1 - o_ar) if o_ar < 1 else 1.0
    decode = tps / cost * factor if cost > 0 else 0.0
    # prefill share of the AR run: AR's decode time estimated from this run (decode time x speedup)
    ar_decode = m.step_seconds * decode
    f = m.prefill_seconds / (m.prefill_seconds + ar_decode) if m.prefill_seconds + ar_decode > 0 else 0.0
    predicted = whole_run(decode, f)
    measured = measured_cost = None
    if a is not None and a.tokens_per_s > 0 and m.tokens_per_s > 0:
        measured = m.tokens_per_s / a.tokens_per_s
        if a.steps and m.steps and a.forward_seconds > 0:
            measured_cost = (m.forward_seconds / m.steps) / (a.forward_seconds / a.steps)
    calibrated = cal_cost = None
    if m.step_costs and len(m.step_costs) == m.steps:
        cal_cost = sum(m.step_costs) / m.steps
        calibrated = whole_run(tps / cal_cost, f) if cal_cost > 0 else None
    return Account(m.method, tps, cost, m.overhead, o_ar, src, factor, decode, f, predicted, measured, measured_cost,
                   curve.regime, calibrated, cal_cost)


def break_even(step_cost: float, overhead: float = 0.0, ar_overhead: float = 0.0) -> float:
    """Tokens per step a method needs to match AR when each of its steps costs ``step_cost``
    one-token forwards and ``overhead`` of its step time is spent outside the forward (AR:
    ``ar_overhead``): the decode speedup tokens/step / step_cost * (1 - o) / (1 - o_ar) equals 1.

    >>> round(break_even(2.0, overhead=0.2, ar_overhead=0.04), 3)
    2.4
    """
    return step_cost * (1 - ar_overhead) / (1 - overhead)


def whole_run(decode_speedup: float, prefill_share: float) -> float:
    """The speedup of the whole run: the prefill (``prefill_share`` of AR's time) is the same for
    both and dilutes the decode speedup."""
    f = prefill_share
    return 1 / (f + (1 - f) / decode_speedup) if decode_speedup > 0 else 0.0


# ---- why this prompt sped up ------------------------------------------------------------------
_REASONS = [
    ("prompt_pool", "came from n-grams of the prompt (text the answer repeats)"),
    ("pool", "came from n-grams the lookahead window guessed earlier and the pool kept"),
    ("output_pool", "came from n-grams of the output so far (repetition in the answer)"),
    ("jacobi", "were Jacobi guesses that had converged before their turn (CLLM's fast-forwarded and stationary "
               "tokens, each counted when a step confirmed it)"),
    ("pld", "were copied by prompt lookup from earlier text"),
    ("recycled", "came from Token Recycling's matrix (successors the model predicted after those tokens in earlier forwards)"),
    ("suffix", "were drafted by suffix matching (what followed earlier occurrences of the text's end, "
               "the most frequent continuations first)"),
]


def reasons(trace: Trace) -> list[str]:
    """Sentences on where the extra tokens came from, largest share first."""
    shares = provenance_shares(trace)
    out = []
    for key, text in sorted(_REASONS, key=lambda kv: -shares.get(kv[0], 0.0)):
        if shares.get(key, 0.0) > 0:
            out.append(f"{shares[key]:.0%} of the output tokens {text}.")
    own = shares.get("step", 0.0) + shares.get("prefill", 0.0)
    if trace.method != "ar":
        out.append(f"{own:.0%} were the model's own next token of a step (what AR would do anyway)." if out else
                   f"No guess was ever accepted: every token was the model's own next token ({own:.0%}).")
    return out
