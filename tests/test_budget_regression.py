"""The cost-aware budget (``budget="auto"``) of prompt lookup, lookahead and Token Recycling, step by
step, against values recorded from the code BEFORE the budget was written once (issue 19, item 3).

The recorded values (``RECORDED``) are not derived here: they were printed by this file's ``cases()``
run on the unmodified code (commit d3f0f63, each method with its own copy of the budget). This is a
regression check, legitimate as such: the refactor must not change a single decision. To make the
budget deterministic, the step times the loop reports are replaced by a fixed clock (``FixedClock``:
a step feeding k tokens "takes" a fixed time of k), so the calibration (plain steps first), the
idle-step counts, the acceptance estimates and every choice depend on nothing but the model.
Greedy and sampled runs both, since the learn step reads the verdict of either verifier.
"""

from __future__ import annotations

import json
from pathlib import Path

from decoding.budget import StepCosts, interpolate
from decoding.loop import decode
from tiny import generate_greedy, tiny_lm

# relative step costs: a CPU-like curve (guesses rarely pay) and a flat one (they nearly always do)
CURVES = {"cpu": ([1, 2, 4, 8, 16, 32, 64], [1.0, 1.08, 1.38, 2.05, 2.71, 3.85, 6.75]),
          "flat": ([1, 64, 256], [1.0, 1.05, 1.3])}


class FixedClock(StepCosts):
    """StepCosts whose observed step times come from a fixed clock instead of the wall: a step feeding
    k tokens takes 10 ms x ``excess`` x c(k) (1.2: the run's multi-token steps 20% dearer than the curve)."""

    def __init__(self, curve: str, excess: float = 1.2):
        self.clock = interpolate(*CURVES[curve])
        super().__init__(interpolate(*CURVES[curve]), f"fixed clock ({curve})")
        self.excess_factor = excess

    def observe(self, fed: int, seconds: float) -> None:
        super().observe(fed, 0.010 * self.clock(fed) * (self.excess_factor if fed > 1 else 1.0))


SETTINGS = {"pld": {"budget": "auto"}, "lookahead": {"W": 5, "N": 4, "G": 5, "budget": "auto"},
            "tr": {"budget": "auto"}}
SAMPLED = {"temperature": 0.8, "top_k": 0, "top_p": 1.0, "sample_seed": 3}
PROMPT = [7, 8, 9, 10, 11, 7, 8, 9, 12, 13, 7, 8, 9, 10, 14] * 2


def cases() -> dict[str, dict[str, list]]:
    """case id -> per step: tokens fed, tokens committed, and the budget's choice (expected tokens,
    cost, whether lookahead's window was fed)."""
    out = {}
    for kind in ("llama", "qwen2"):
        lm = tiny_lm(kind, 0)
        for method, params in SETTINGS.items():
            for curve in CURVES:
                for mode, extra in (("greedy", {}), ("sampled", SAMPLED)):
                    tr = decode(lm, PROMPT, method, params | extra, 48, step_costs=FixedClock(curve))
                    out[f"{kind}-{method}-{curve}-{mode}"] = {
                        "fed": [s.fed for s in tr.steps], "tokens": [s.tokens for s in tr.steps],
                        "choice": [[s.budget.expected, s.budget.cost, int(s.budget.window)] for s in tr.steps]}
    return out


# printed by cases() on the unmodified code (see the docstring): json.dumps(cases())
RECORDED: dict[str, dict[str, list]] = json.loads((Path(__file__).parent / "budget_recorded.json").read_text())


def test_budgeted_steps_equal_the_recorded_ones():
    got = cases()
    assert set(got) == set(RECORDED)
    for case, want in RECORDED.items():
        assert got[case]["fed"] == want["fed"], case
        assert got[case]["tokens"] == want["tokens"], case
        assert got[case]["choice"] == want["choice"], case


def test_the_recorded_runs_are_greedy_exact_and_make_real_choices():
    """The recorded greedy runs equal generate (so the recording is of a correct run), and the budget
    did choose: plain steps, single guesses and trees all occur (else the regression test checks little)."""
    for kind in ("llama", "qwen2"):
        ref = generate_greedy(tiny_lm(kind, 0), PROMPT, 48)
        for case, rec in RECORDED.items():
            if case.startswith(kind) and case.endswith("greedy"):
                assert [t for s in rec["tokens"] for t in s] == ref[1:], case  # ref[0]: the prefill's token
    fed = [f for rec in RECORDED.values() for f in rec["fed"]]
    assert 1 in fed and 2 in fed and max(fed) > 4
