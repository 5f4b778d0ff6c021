"""The per-category table of a Spec-Bench run as an asset for the app's Benchmarks page.

    python scripts/bench_asset.py out/bench_greedy.jsonl --date 2026-11-30 \
        --machine "2-core CPU, one torch thread" --command "python -m decoding bench ..." \
        --out assets/bench_spec_bench_cpu.json

Writes ``decoding.cli.summarize``'s rows (method, category, prompts, tokens_per_step,
tokens_per_s, vs_ar, ...) with where they come from: the model, the date, the machine, the command.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from decoding.cli import summarize  # noqa: E402

KEYS = ("method", "category", "prompts", "tokens_per_step", "tokens_per_s", "vs_ar", "exact")


def asset(rows: list[dict], **source) -> dict:
    table = [r for r in summarize(rows) if not r["method"].endswith("/norec")]
    return {"source": source, "rows": [{k: r.get(k) for k in KEYS} for r in table]}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("bench", help="rows of python -m decoding bench --out")
    ap.add_argument("--out", required=True)
    ap.add_argument("--date", required=True)
    ap.add_argument("--machine", required=True)
    ap.add_argument("--command", required=True)
    ap.add_argument("--model", default="SmolLM2-135M-Instruct (Q4_1 GGUF, bundled), fp32")
    a = ap.parse_args(argv)
    rows = [json.loads(line) for line in open(a.bench, encoding="utf-8") if line.strip()]
    out = asset(rows, model=a.model, date=a.date, machine=a.machine, command=a.command, file=a.bench)
    Path(a.out).write_text(json.dumps(out, indent=1) + "\n", encoding="utf-8")
    print(f"{len(out['rows'])} rows -> {a.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
