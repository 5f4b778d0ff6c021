"""scripts/bench_report.py's table of the cost-aware budgets, on hand-made rows."""

import importlib.util
from pathlib import Path

spec = importlib.util.spec_from_file_location("bench_report", Path(__file__).resolve().parents[1] / "scripts" / "bench_report.py")
bench_report = importlib.util.module_from_spec(spec)
spec.loader.exec_module(bench_report)


def test_budget_table_counts_the_guessing_steps():
    rows = [{"method": "pld:auto", "fed": [1, 1, 2, 4], "step_costs": [1.0, 1.0, 1.1, 1.4], "output_ids": list(range(8))},
            {"method": "pld", "fed": [11, 11], "output_ids": list(range(9))}]  # a fixed budget: not in the table
    table = bench_report.budget_table(rows).splitlines()
    assert len(table) == 3 and table[2].startswith("| pld:auto |")
    # 2 plain steps, 2 guessing steps committing 7 - 2 = 5 tokens at 2.5 AR steps: 2.5 per step at cost 1.25;
    # for 1.25x: (1.25 * (2 + 2.5) - 2) / 2 = 1.81 tokens per guessing step
    assert table[2] == "| pld:auto | 1 | 50% | 2.50 | 1.25 | 1.81 |"
    assert bench_report.budget_table(rows[1:]) == ""
