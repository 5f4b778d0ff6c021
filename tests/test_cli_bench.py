"""`python -m decoding bench` on a tiny in-process model: rows, interleaving, resuming."""

import json

import pytest

import decoding.model
from decoding import cli
from decoding.bench import summarize
from decoding.io import interleave
from tiny import tiny_lm


@pytest.fixture()
def bench(monkeypatch, tmp_path):
    lm = tiny_lm("llama", 3)
    lm.encode = lambda text, chat=False: [1 + ord(c) % 90 for c in text][:10]
    monkeypatch.setattr(decoding.model, "load_model", lambda *a, **k: lm)
    prompts = tmp_path / "q.jsonl"
    rows = [{"question_id": i, "category": cat, "turns": [f"{cat} prompt number {i}"]}
            for i, cat in enumerate(["a", "a", "a", "b", "b", "c"])]
    prompts.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    out = tmp_path / "bench.jsonl"

    def run(*extra):
        code = cli.main(["bench", "--prompts", str(prompts), "--methods", "ar,lookahead,pld",
                         "--max-new-tokens", "12", "--out", str(out), *extra])
        return code, [json.loads(line) for line in out.read_text().splitlines()]
    return run


def test_interleave_round_robins_categories():
    rows = [{"id": str(i), "category": c} for i, c in enumerate("aaabbc")]
    assert [r["id"] for r in interleave(rows)] == ["0", "3", "5", "1", "4", "2"]


def test_bench_rows_are_exact_and_interleaved(bench):
    code, rows = bench("--per-category", "2")
    assert code == 0
    assert [r["id"] for r in rows[::3]] == ["0", "3", "5", "1", "4"]
    assert all(r["matches_ar"] is True for r in rows)
    assert all(len(r["output_ids"]) == 12 and r["tokens_per_step"] >= 1 for r in rows)
    table = {(t["method"], t["category"]): t for t in summarize(rows)}
    assert table[("lookahead", "ALL")]["exact"] is True


def test_skip_per_category_takes_the_prompts_after_the_first_k_of_each_category(bench, tmp_path):
    from decoding.io import UsageError, read_prompts

    code, rows = bench("--skip-per-category", "1", "--per-category", "1")
    assert code == 0 and [r["id"] for r in rows[::3]] == ["1", "4"]  # c has one prompt: none left after it
    path = str(tmp_path / "q.jsonl")
    assert [r["id"] for r in read_prompts(path, skip_per_category=1)] == ["1", "2", "4"]
    assert [r["id"] for r in read_prompts(path, 2, skip_per_category=0)] == ["0", "1", "3", "4", "5"]
    with pytest.raises(UsageError, match="no prompts selected"):
        read_prompts(path, skip_per_category=3)
    with pytest.raises(UsageError, match="count of prompts"):
        read_prompts(path, skip_per_category=-1)


def test_resume_runs_only_what_is_missing(bench, capsys):
    code, first = bench("--per-category", "1")
    assert code == 0 and len(first) == 9
    code, rows = bench("--per-category", "2", "--resume")
    assert code == 0 and len(rows) == 15
    assert rows[:9] == first  # kept, not rerun
    assert len({(r["id"], r["method"]) for r in rows}) == 15
    assert all(r["matches_ar"] is True for r in rows[9:])


def test_resume_drops_a_row_cut_short(bench, tmp_path):
    code, first = bench("--per-category", "1")
    out = tmp_path / "bench.jsonl"
    text = out.read_text()
    out.write_text(text + text.splitlines()[0][:40])  # killed while writing a row
    code, rows = bench("--per-category", "1", "--resume")
    assert code == 0 and rows == first


def test_resume_needs_out(capsys):
    assert cli.main(["bench", "--prompts", "x.jsonl", "--resume"]) == 2
    assert "error:" in capsys.readouterr().err


def test_bench_variants_run_each_budget(bench, tmp_path, capsys):
    code, rows = bench("--per-category", "1", "--methods", "ar,lookahead,lookahead:auto,pld:auto:k=4")
    assert code == 0
    by = {r["method"]: r for r in rows if r["id"] == "0"}
    assert set(by) == {"ar", "lookahead", "lookahead:auto", "pld:auto:k=4"}
    assert by["lookahead"]["params"]["budget"] == "fixed" and by["lookahead:auto"]["params"]["budget"] == "auto"
    assert by["pld:auto:k=4"]["params"] == {"k": 4, "max_ngram": 3, "budget": "auto"}
    assert all(r["matches_ar"] is True for r in rows)
    table = {(t["method"], t["category"]) for t in summarize(rows)}
    assert ("lookahead:auto", "ALL") in table
    capsys.readouterr()
    for bad, why in (("lookahead:fast", "not key=value"), ("medusa:auto", "unknown method"), ("ar,ar", "twice"),
                     ("lookahead:W=999", "W must be between")):
        assert cli.main(["bench", "--prompts", str(tmp_path / "q.jsonl"), "--methods", bad, "--max-new-tokens", "4"]) == 2
        assert why in capsys.readouterr().err
