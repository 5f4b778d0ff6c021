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
from pathlib import Path

from decoding.bench import summarize

KEYS = ("method", "category", "prompts", "tokens_per_step", "tokens_per_s", "vs_ar", "exact")


def asset(rows: list[dict], extra: list[list[dict]] = (), **source) -> dict:
    """The table of ``rows``; each of ``extra`` (another bench run, with its own AR twins) adds the
    methods the first run does not have."""
    table = [r for r in summarize(rows) if not r["method"].endswith("/norec")]
    for more in extra:
        have = {r["method"] for r in table}
        table += [r for r in summarize(more) if r["method"] not in have and not r["method"].endswith("/norec")]
    return {"source": source, "rows": [{k: r.get(k) for k in KEYS} for r in table]}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("bench", help="rows of python -m decoding bench --out")
    ap.add_argument("--out", required=True)
    ap.add_argument("--date", required=True)
    ap.add_argument("--machine", required=True)
    ap.add_argument("--command", required=True)
    ap.add_argument("--model", default="SmolLM2-135M-Instruct (Q4_1 GGUF, bundled), fp32")
    ap.add_argument("--extra", action="append", default=[], help="another bench run whose other methods join the table")
    for k in ("prompts", "settings", "speedup"):
        ap.add_argument(f"--{k}", default=None, help=f"the source's {k} (shown on the Benchmarks page)")
    a = ap.parse_args(argv)
    read = lambda f: [json.loads(line) for line in open(f, encoding="utf-8") if line.strip()]
    described = {k: getattr(a, k) for k in ("prompts", "settings", "speedup") if getattr(a, k)}
    out = asset(read(a.bench), [read(f) for f in a.extra], model=a.model, date=a.date, machine=a.machine,
                command=a.command, file=", ".join([a.bench, *a.extra]), **described)
    Path(a.out).write_text(json.dumps(out, indent=1) + "\n", encoding="utf-8")
    print(f"{len(out['rows'])} rows -> {a.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
