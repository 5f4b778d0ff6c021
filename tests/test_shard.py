"""Issue 14 item 3: bench under torchrun (2 CPU processes), one JSONL per rank, and the merge
that checks nothing is missing or duplicated."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from decoding import cli, shard
from decoding.io import UsageError
from tiny import tiny_lm

ROOT = Path(__file__).resolve().parents[1]
TORCHRUN = Path(sys.executable).with_name("torchrun")


def tiny_folder(d: Path) -> Path:
    """A tiny random Llama saved as a model folder with a word-level tokenizer (t0 .. t95)."""
    from tokenizers import Tokenizer
    from tokenizers.models import WordLevel
    from tokenizers.pre_tokenizers import Whitespace
    from transformers import PreTrainedTokenizerFast

    tiny_lm("llama", 4).model.save_pretrained(str(d))
    tok = Tokenizer(WordLevel({f"t{i}": i for i in range(96)}, unk_token="t0"))
    tok.pre_tokenizer = Whitespace()
    PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="t0").save_pretrained(str(d))
    return d


def prompts_file(d: Path, n: int = 5) -> Path:
    p = d / "q.jsonl"
    p.write_text("".join(json.dumps({"question_id": i, "category": "abc"[i % 3],
                                     "turns": [" ".join(f"t{(7 * i + j * j) % 90 + 1}" for j in range(12))]}) + "\n"
                         for i in range(n)))
    return p


def test_rank_helpers():
    assert shard.rank_world({}) == (0, 1) and shard.rank_world({"RANK": "1", "WORLD_SIZE": "2"}) == (1, 2)
    with pytest.raises(UsageError):
        shard.rank_world({"RANK": "2", "WORLD_SIZE": "2"})
    assert shard.take(list(range(5)), 1, 2) == [1, 3]
    assert shard.rank_path("out/b.jsonl", 0, 1) == "out/b.jsonl"
    assert shard.rank_path("out/b.jsonl", 3, 4) == "out/b.rank3.jsonl"


@pytest.mark.slow  # two torchrun processes load and decode: long for the fast tier
@pytest.mark.skipif(not TORCHRUN.exists(), reason="torchrun is not installed")
def test_bench_under_torchrun_merges_to_the_single_process_run(tmp_path):
    model, prompts = tiny_folder(tmp_path / "m"), prompts_file(tmp_path)
    args = ["--prompts", str(prompts), "--model", str(model), "--methods", "ar,lookahead,pld", "--max-new-tokens", "8"]
    out = tmp_path / "b.jsonl"
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT)}
    for k in ("RANK", "WORLD_SIZE", "LOCAL_RANK"):
        env.pop(k, None)
    r = subprocess.run([str(TORCHRUN), "--standalone", "--nproc_per_node", "2", "-m", "decoding", "bench", *args,
                        "--out", str(out)], cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    files = shard.rank_files(str(out))
    assert [Path(f).name for f in files] == ["b.rank0.jsonl", "b.rank1.jsonl"]
    per_rank = [{json.loads(line)["id"] for line in open(f)} for f in files]
    assert per_rank[0] and per_rank[1] and not per_rank[0] & per_rank[1]
    assert cli.main(["merge", "--prompts", str(prompts), "--methods", "ar,lookahead,pld", "--out", str(out)]) == 0
    merged = {(r["id"], r["method"]): r for r in map(json.loads, out.read_text().splitlines())}
    assert len(merged) == 15 and all(r["matches_ar"] for r in merged.values())
    single = tmp_path / "single.jsonl"
    assert cli.main(["bench", *args, "--out", str(single)]) == 0
    ref = {(r["id"], r["method"]): r["output_ids"] for r in map(json.loads, single.read_text().splitlines())}
    assert {k: r["output_ids"] for k, r in merged.items()} == ref

    # a rank file that repeats a run, or lacks one, is refused
    lines = Path(files[1]).read_text().splitlines()
    Path(files[1]).write_text("\n".join(lines + lines[:1]) + "\n")
    assert cli.main(["merge", "--prompts", str(prompts), "--methods", "ar,lookahead,pld", "--out", str(out)]) == 2
    Path(files[1]).write_text("\n".join(lines[1:]) + "\n")
    with pytest.raises(UsageError, match="missing"):
        shard.merge(files, {(str(i), m, True) for i in range(5) for m in ("ar", "lookahead", "pld")}, str(out))
