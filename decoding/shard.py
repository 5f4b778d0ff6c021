"""Benchmarks spread over processes, GPUs and machines with an existing launcher (torchrun,
accelerate launch, srun with the same variables): each rank reads RANK / WORLD_SIZE (LOCAL_RANK
picks its GPU), takes every WORLD_SIZE-th prompt of the (interleaved) list, runs all the methods on
it — so each run's AR twin is on the same rank and the AR comparison stays local — and writes its
own JSONL (out.rank0.jsonl, out.rank1.jsonl, ...). ``merge`` joins the rank files and checks that
every expected (prompt, method, record) run is there exactly once.

    torchrun --standalone --nproc_per_node 8 -m decoding bench --prompts q.jsonl --out out/b.jsonl
    python -m decoding merge --prompts q.jsonl --out out/b.jsonl        # reads out/b.rank*.jsonl
"""

from __future__ import annotations

import glob
import json
import os
import re
from pathlib import Path

from .io import UsageError


def rank_world(env=None) -> tuple[int, int]:
    """(RANK, WORLD_SIZE) from the launcher's environment; (0, 1) when not launched."""
    env = os.environ if env is None else env
    try:
        rank, world = int(env.get("RANK", 0)), int(env.get("WORLD_SIZE", 1))
    except ValueError:
        raise UsageError("RANK and WORLD_SIZE must be integers") from None
    if world < 1 or not 0 <= rank < world:
        raise UsageError(f"RANK {rank} is not in 0..WORLD_SIZE-1 (WORLD_SIZE {world})")
    return rank, world


def local_device(env=None) -> str | None:
    """cuda:LOCAL_RANK under a launcher on a CUDA machine (one GPU per process), else None."""
    env = os.environ if env is None else env
    if "LOCAL_RANK" not in env:
        return None
    import torch

    return f"cuda:{int(env['LOCAL_RANK'])}" if torch.cuda.is_available() else None


def take(rows: list, rank: int, world: int) -> list:
    """This rank's share: every world-th row, from the rank-th."""
    return rows[rank::world]


def rank_path(out: str | None, rank: int, world: int) -> str | None:
    """out.jsonl -> out.rank3.jsonl when launched with several ranks (unchanged for one)."""
    if not out or world == 1:
        return out
    p = Path(out)
    return str(p.with_name(f"{p.stem}.rank{rank}{p.suffix or '.jsonl'}"))


def rank_files(out: str) -> list[str]:
    p = Path(out)
    pat = re.compile(re.escape(p.stem) + r"\.rank(\d+)" + re.escape(p.suffix or ".jsonl") + "$")
    files = [f for f in glob.glob(str(p.with_name(f"{p.stem}.rank*{p.suffix or '.jsonl'}"))) if pat.search(f)]
    return sorted(files, key=lambda f: int(pat.search(f).group(1)))


def merge(files: list[str], expected: set[tuple[str, str, bool]], out: str) -> list[dict]:
    """Join the rank files into ``out``; UsageError naming what is missing, duplicated or unexpected."""
    if not files:
        raise UsageError(f"no rank files next to {out} (expected {Path(out).stem}.rank0{Path(out).suffix or '.jsonl'}, ...)")
    rows, seen, dup = [], {}, []
    for f in files:
        for ln, line in enumerate(open(f, encoding="utf-8"), 1):
            if not line.strip():
                continue
            r = json.loads(line)
            key = (str(r["id"]), r["method"], bool(r["record"]))
            if key in seen:
                dup.append(f"{key} in {seen[key]} and {f}:{ln}")
            seen[key] = f"{f}:{ln}"
            rows.append(r)
    missing = sorted(expected - set(seen))
    extra = sorted(set(seen) - expected)
    problems = []
    if dup:
        problems.append(f"{len(dup)} run(s) twice: " + "; ".join(dup[:5]))
    if missing:
        problems.append(f"{len(missing)} run(s) missing: " + ", ".join(map(str, missing[:5])))
    if extra:
        problems.append(f"{len(extra)} run(s) not in this prompt set / method list: " + ", ".join(map(str, extra[:5])))
    if problems:
        raise UsageError("cannot merge: " + "; ".join(problems))
    with open(out, "w", encoding="utf-8") as f:
        f.writelines(json.dumps(r) + "\n" for r in rows)
    return rows
