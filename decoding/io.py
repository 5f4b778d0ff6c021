"""Reading the lab's inputs and the command lines' shared plumbing (no torch here).

One JSONL reader (``jsonl``) serves prompts files, `bench --out` rows, CLLM items and training
metrics; ``UsageError`` is a mistake on the command line or in an input file, reported as one line
with exit code 2; ``Parser`` is the argparse parser that raises it instead of exiting.
"""

from __future__ import annotations

import argparse
import json
import os
from collections import defaultdict
from typing import Any, Iterator


class UsageError(Exception):
    pass


class Parser(argparse.ArgumentParser):
    def error(self, message):  # one line, exit code 2
        raise UsageError(message)


def jsonl(path: str, strict: bool = True) -> Iterator[tuple[int, Any]]:
    """(line number, value) of each non-blank line of a JSONL file; a line that is not JSON is a
    UsageError naming it (``strict``) or skipped (a file a crash may have cut mid-line)."""
    with open(path, encoding="utf-8") as f:
        for ln, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                yield ln, json.loads(line)
            except json.JSONDecodeError:
                if strict:
                    raise UsageError(f"{path}:{ln} is not JSON") from None


def read_prompts(path: str, per_category: int = 0, categories: str = "",
                 skip_per_category: int = 0) -> list[dict[str, str]]:
    """Rows {id, category, prompt} from Spec-Bench JSONL, plain {id, prompt} JSONL or GSM8K's
    {question, answer} JSONL (the prompt is the question), with ``reference`` where the row has one
    (Spec-Bench's reference[0], GSM8K's answer: what an accuracy is measured against; decoding
    ignores it). Per category: the first ``skip_per_category`` prompts dropped (e.g. to measure on
    prompts a method was not tuned on), then the next ``per_category`` kept (0: all)."""
    if per_category < 0 or skip_per_category < 0:
        raise UsageError("--per-category and --skip-per-category take a count of prompts (0 or more)")
    if not os.path.isfile(path):
        raise UsageError(f"no prompts file at {path}")
    keep = {c for c in categories.split(",") if c}
    rows, seen = [], defaultdict(int)
    for ln, d in jsonl(path):
        if not isinstance(d, dict):
            raise UsageError(f"{path}:{ln} is not a JSON object")
        if isinstance(d.get("turns"), list) and d["turns"] and isinstance(d["turns"][0], str):
            prompt, rid = d["turns"][0], d.get("question_id", d.get("id", ln))
        elif isinstance(d.get("prompt"), str):
            prompt, rid = d["prompt"], d.get("id", ln)
        elif isinstance(d.get("question"), str):  # GSM8K rows {question, answer}: id = line number
            prompt, rid = d["question"], d.get("id", ln)
        else:
            raise UsageError(f"{path}:{ln} has neither turns[0], prompt nor question")
        cat = str(d.get("category", "all"))
        if keep and cat not in keep:
            continue
        i = seen[cat]
        seen[cat] += 1
        if i < skip_per_category or (per_category and i >= skip_per_category + per_category):
            continue
        row = {"id": str(rid), "category": cat, "prompt": prompt}
        ref = d.get("answer") if isinstance(d.get("question"), str) else d.get("reference")
        ref = ref[0] if isinstance(ref, list) and ref else ref
        if isinstance(ref, str) and ref:
            row["reference"] = ref
        rows.append(row)
    if not rows:
        raise UsageError(f"no prompts selected from {path}")
    return rows


def interleave(rows: list[dict[str, str]]) -> list[dict[str, str]]:
    """Round robin over categories (first prompt of each, then the second, ...): a bench cut short
    still covers every category evenly."""
    by: dict[str, list] = defaultdict(list)
    for r in rows:
        by[r["category"]].append(r)
    out = []
    for i in range(max(len(v) for v in by.values())):
        out += [v[i] for v in by.values() if i < len(v)]
    return out


def read_rows(path: str) -> list[dict]:
    """The rows of a `bench --out` JSONL file; a last line cut short (a run killed while writing)
    is dropped from the file, so appending to it stays valid JSONL."""
    with open(path, "rb") as f:
        data = f.read()
    if data and not data.endswith(b"\n"):
        with open(path, "wb") as f:
            f.write(data[: data.rfind(b"\n") + 1])
    return [d for _, d in jsonl(path)]
