"""Smoke tests of `python -m cllm eval` and `pair` on tiny in-process models (nothing is
downloaded): the rows and traces they write hold what the base and the CLLM really decode."""

from __future__ import annotations

import gzip
import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest

import cllm
import decoding.model
from decoding import decode
from decoding import loop
from decoding.analysis import jacobi_counts
from decoding.budget import StepCosts
from decoding.trace import Trace
from tiny import ByteTokenizer, generate_greedy, tiny_lm

ROOT = Path(__file__).resolve().parent.parent
PROMPTS = [("0", "math", "Tom has 3 apples."), ("1", "math", "Two plus two is"), ("2", "qa", "Who wrote it?")]


@pytest.fixture(scope="module")
def models():
    """Name -> model as load_model would return it: the base (None) and a "CLLM" (another seed)."""
    out = {}
    for name, seed in ((None, 0), ("my-cllm", 1)):
        lm = tiny_lm("llama", seed)
        lm.tokenizer = ByteTokenizer()
        lm.model_id = f"tiny {name or 'base'}"
        out[name] = lm
    return out


@pytest.fixture()
def loads(monkeypatch, models):
    """Replace load_model by the tiny models; the list of the names it was asked for."""
    asked = []

    def load(name=None, *a, **k):
        asked.append(name)
        return models[name]
    monkeypatch.setattr(decoding.model, "load_model", load)
    return asked


@pytest.fixture()
def prompts(tmp_path):
    q = tmp_path / "q.jsonl"
    q.write_text("".join(json.dumps({"question_id": i, "category": c, "turns": [p]}) + "\n" for i, c, p in PROMPTS))
    return str(q)


def test_eval_writes_one_true_row_per_prompt(tmp_path, prompts, models, loads, capsys):
    out = tmp_path / "eval.jsonl"
    code = cllm.main(["eval", "--prompts", prompts, "--cllm", "my-cllm", "--categories", "math", "--n", "6",
                      "--max-new-tokens", "14", "--split", "smoke", "--out", str(out)])
    assert code == 0
    assert loads == [None, "my-cllm"]
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert [(r["id"], r["category"], r["split"]) for r in rows] == [("0", "math", "smoke"), ("1", "math", "smoke")]
    base, cl = models[None], models["my-cllm"]
    for r, (_, _, text) in zip(rows, PROMPTS):
        ids = base.encode(text)
        assert r["prompt_tokens"] == len(ids)
        answers = {}
        for name, lm in (("base", base), ("cllm", cl)):
            side = r[name]
            answers[name] = generate_greedy(lm, ids, 14)
            jc = decode(lm, ids, "jacobi", {"n": 6, "seed": 0}, 14)
            assert side["tokens"] == len(answers[name]) == 14
            assert side["exact"] is True  # Jacobi == AR on both models
            assert side["jacobi_steps"] == jc.n_steps and side["jacobi_tokens_per_step"] == pytest.approx(jc.tokens_per_step)
            assert side["ar_seconds"] > 0 and side["jacobi_seconds"] > 0
            assert side["speedup"] == pytest.approx(side["ar_seconds"] / side["jacobi_seconds"])
            counts = jacobi_counts(decode(lm, ids, "jacobi", {"n": 6, "seed": 0}, 14))
            assert side["block_iterations"] == [c["iterations"] for c in counts] and side["block_tokens"] == [c["tokens"] for c in counts]
            assert side["fast_forwarded"] == [c["fast_forwarded"] for c in counts]
            assert side["stationary"] == [c["stationary"] for c in counts]
            assert side["degenerate"] == cllm.degenerate(answers[name])
        b, c = answers["base"], answers["cllm"]
        assert b != c  # two different models: the drift fields have something to count
        assert r["identical_share"] == pytest.approx(sum(x == y for x, y in zip(b, c)) / 14)
        assert r["common_prefix"] == next(i for i, (x, y) in enumerate(zip(b, c)) if x != y)
        assert (r["n_base"], r["n_cllm"]) == (14, 14)
        assert r["base_nll_base"] == pytest.approx(cllm.answer_nll(base, ids, b)[0], rel=1e-4)
        assert r["base_nll_cllm"] == pytest.approx(cllm.answer_nll(base, ids, c)[0], rel=1e-4)
        assert r["base_nll_base"] < r["base_nll_cllm"]  # the base's greedy answer is its own likeliest path
    table = capsys.readouterr().out
    assert table.splitlines()[0].startswith("| split | prompts |")
    assert table.splitlines()[2].startswith("| smoke | 2 |") and table.splitlines()[2].endswith("yes |")
    # the second table: per-block iterations, fast-forwarded, stationary, degenerate answers, wall times
    assert table.splitlines()[4].startswith("| split | prompts | iterations per block (base / CLLM) |")
    assert table.splitlines()[6].startswith("| smoke | 2 |")
    # the third table: without the CLLM's degenerate answers (none here: every prompt is in it)
    assert table.splitlines()[8].startswith("| split | problems without a degenerate CLLM answer | Jacobi tok/step base |")
    assert table.splitlines()[10].startswith("| smoke | 2 of 2 |") and len(table.splitlines()) == 11
    # the summary of the written file, without running a model, is the same table
    assert cllm.main(["eval", "--prompts", prompts, "--cllm", "my-cllm", "--results", str(out)]) == 0
    assert capsys.readouterr().out == table
    assert loads == [None, "my-cllm"]


def test_eval_auto_measures_the_cost_aware_jacobi_and_a_cut_run_resumes(tmp_path, prompts, models, loads, capsys,
                                                                          monkeypatch):
    # budget=auto sizes the block from timed steps: a fixed cost curve that ignores the timings makes the
    # eval's choice and the reference decode's the same on a loaded machine too
    monkeypatch.setattr(loop, "step_costs_for",
                        lambda lm: StepCosts(lambda k: 1.0 + 0.05 * (k - 1), calibrate_first=False, min_obs=10**9))
    out = tmp_path / "eval.jsonl"
    args = ["eval", "--prompts", prompts, "--cllm", "my-cllm", "--categories", "math", "--n", "6",
            "--max-new-tokens", "14", "--split", "s", "--out", str(out), "--auto-n", "5", "--auto"]
    out.write_text("")
    assert cllm.main(args[:-1] + ["--per-category", "1"]) == 0  # a first run, cut after one prompt (no --auto)
    assert "auto_seconds" not in json.loads(out.read_text())["base"]
    capsys.readouterr()
    assert cllm.main(args) == 0  # the second run does only the prompt left
    assert "1 of these prompts: 1 left" in capsys.readouterr().err
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert [r["id"] for r in rows] == ["0", "1"]
    r = rows[1]
    assert r["n"] == 6 and r["auto_n"] == 5  # the budget=auto Jacobi's blocks are --auto-n's
    for name in ("base", "cllm"):
        side, lm = r[name], models[None if name == "base" else "my-cllm"]
        auto = decode(lm, lm.encode(PROMPTS[1][2]), "jacobi", {"n": 5, "seed": 0, "budget": "auto"}, 14)
        assert side["auto_exact"] is True and side["auto_steps"] == auto.n_steps
        assert side["auto_tokens_per_step"] == pytest.approx(auto.tokens_per_step)
    want = (r["cllm"]["tokens"] / r["cllm"]["auto_seconds"]) / (r["base"]["tokens"] / r["base"]["ar_seconds"])
    assert r["auto_vs_base_ar"] == pytest.approx(want)
    # the summary holds the auto table only when every row of a split has the auto figures
    assert "budget=auto Jacobi vs base AR" not in capsys.readouterr().out
    with out.open("a") as f:
        f.write(json.dumps(dict(rows[0], split="t", **{"auto_vs_base_ar": 1.0, "base": dict(r["base"]), "cllm": dict(r["cllm"])})) + "\n")
    assert cllm.main(["eval", "--prompts", prompts, "--cllm", "x", "--results", str(out)]) == 0
    table = capsys.readouterr().out.splitlines()
    i = next(k for k, line in enumerate(table) if "budget=auto Jacobi vs base AR" in line)
    assert [line.split(" | ")[0] for line in table[i + 2:]] == ["| t"]
    # run again: every prompt is in the file, nothing is loaded or decoded
    asked = len(loads)
    assert cllm.main(args) == 0 and len(loads) == asked
    assert len(out.read_text().splitlines()) == 3


def test_pair_writes_the_two_traces_of_the_page(tmp_path, prompts, models, loads):
    code = cllm.main(["pair", "--prompts", prompts, "--cllm", "my-cllm", "--categories", "qa", "--n", "5",
                      "--max-new-tokens", "12", "--seed", "2", "--out-dir", str(tmp_path)])
    assert code == 0
    assert loads == [None, "my-cllm"]
    assert sorted(os.listdir(tmp_path)) == ["base_jacobi.json", "cllm_jacobi.json", "q.jsonl"]
    text = PROMPTS[2][2]
    ids = models[None].encode(text)
    traces = {}
    for name, key in (("base", None), ("cllm", "my-cllm")):
        tr = Trace.load(str(tmp_path / f"{name}_jacobi.json"))
        traces[name] = tr
        assert tr.method == "jacobi" and tr.params["n"] == 5 and tr.params["seed"] == 2
        assert tr.model_id == f"tiny {key or 'base'}" and tr.prompt_ids == ids and tr.prompt_text == text
        assert tr.output_ids == generate_greedy(models[key], ids, 12)
        assert tr.blocks and tr.n_steps == sum(1 for s in tr.steps if s.record is not None) > 0
    assert traces["base"].output_ids != traces["cllm"].output_ids


def test_pair_and_eval_errors_exit_2(tmp_path, prompts, loads, capsys):
    assert cllm.main(["pair", "--prompts", prompts, "--cllm", "x", "--out-dir", str(tmp_path / "nope")]) == 2
    assert "no folder" in capsys.readouterr().err
    assert cllm.main(["eval", "--prompts", prompts, "--cllm", "x", "--categories", "none"]) == 2
    assert "no prompts selected" in capsys.readouterr().err
    assert cllm.main(["eval", "--prompts", prompts, "--cllm", "x", "--n", "0"]) == 2
    assert loads == []  # all refused before any model was loaded


def test_python_dash_m_cllm_summarises_results(tmp_path):
    side = {"jacobi_tokens_per_step": 1.5, "jacobi_steps": 10, "speedup": 1.2, "exact": True}
    row = {"id": "a", "category": "c", "split": "s", "base": side, "cllm": dict(side, jacobi_tokens_per_step=3.0),
           "identical_share": 1.0, "base_nll_base": 2.0, "n_base": 2, "base_nll_cllm": 2.0, "n_cllm": 2}
    res = tmp_path / "r.jsonl"
    res.write_text(json.dumps(row) + "\n")
    env = dict(os.environ, HF_HUB_OFFLINE="1")
    p = subprocess.run([sys.executable, "-m", "cllm", "eval", "--prompts", "x", "--cllm", "x", "--results", str(res)],
                       cwd=ROOT, capture_output=True, text=True, env=env, timeout=120)
    assert p.returncode == 0, p.stderr
    assert p.stdout.splitlines()[2].startswith(f"| s | 1 | 1.500 | 3.000 | 2.00x | 1.20x | 1.20x | 100.0% | {math.e:.2f} |")
    p = subprocess.run([sys.executable, "-m", "cllm", "bogus"], cwd=ROOT, capture_output=True, text=True, env=env, timeout=120)
    assert p.returncode == 2 and p.stderr.startswith("error: ") and "python -m cllm" not in p.stdout


def _res(i, cat, b, c, same, deg=False):
    side = lambda tps, d: {"jacobi_tokens_per_step": tps, "jacobi_steps": 10, "degenerate": d}
    return {"id": i, "category": cat, "split": "s", "base": side(b, False), "cllm": side(c, deg), "identical_share": same}


def test_pair_table_rule():
    rows = [_res("a", "m", 1.0, 3.0, 0.9, deg=True), _res("b", "m", 1.0, 1.2, 0.85), _res("c", "m", 1.0, 1.5, 1.0),
            _res("d", "m", 1.0, 2.0, 0.8), _res("e", "m", 1.0, 2.5, 0.5)]
    t = cllm.pair_table(rows)
    # qualified: b (1.2x), c (1.5x), d (2.0x); a is degenerate, e keeps too little: the median is c
    assert t["chosen"] == "c" and t["qualified"] == 3 and "median" in t["rule"] and "80%" in t["rule"]
    assert [p["id"] for p in t["prompts"]] == list("abcde") and t["prompts"][0]["gain"] == 3.0
    t = cllm.pair_table([_res("x", "m", 1.0, 1.1, 0.1), _res("y", "m", 1.0, 1.3, 0.2)])
    assert t["chosen"] == "x" and t["qualified"] == 0 and "no prompt qualified" in t["rule"]  # lower middle
    # none qualifies: the fallback median still skips degenerate answers (w, the lower middle of all three, is one)
    t = cllm.pair_table([_res("v", "m", 1.0, 1.1, 0.1), _res("w", "m", 1.0, 1.2, 0.1, deg=True),
                         _res("z", "m", 1.0, 1.4, 0.2)])
    assert t["chosen"] == "v" and t["qualified"] == 0 and "2 of 3 prompts" in t["rule"]


def test_pair_from_results_picks_by_the_rule(tmp_path, prompts, models, loads):
    res = tmp_path / "r.jsonl"
    res.write_text("".join(json.dumps(r) + "\n" for r in [
        _res("0", "math", 1.0, 1.1, 0.9), _res("1", "math", 1.0, 1.4, 0.95), _res("2", "qa", 1.0, 1.9, 0.9)]))
    out = tmp_path / "o"
    out.mkdir()
    assert cllm.main(["pair", "--prompts", prompts, "--cllm", "my-cllm", "--n", "5", "--max-new-tokens", "8",
                      "--results", str(res), "--out-dir", str(out)]) == 0
    t = json.loads((out / "pairs.json").read_text())
    assert t["chosen"] == "1" and t["texts"]["1"] == PROMPTS[1][2] and len(t["prompts"]) == 3
    assert Trace.load(str(out / "base_jacobi.json")).prompt_text == PROMPTS[1][2]
    res.write_text(json.dumps(_res("9", "math", 1.0, 1.1, 0.9)) + "\n")
    assert cllm.main(["pair", "--prompts", prompts, "--cllm", "x", "--results", str(res), "--out-dir", str(out)]) == 2


def test_pair_leaves_out_a_chosen_answer_that_loops_when_decoded(tmp_path, prompts, models, loads, monkeypatch):
    """Results flag no loop (an older rule's), but the median prompt's CLLM answer, decoded, loops:
    it is left out, the rule says so, and the pair is the next by the rule (the lower middle of 0 and 2)."""
    seen = []
    monkeypatch.setattr(sys.modules["cllm.evaluate"], "degenerate",
                        lambda ids, **kw: seen.append(list(ids)) or len(seen) == 1)
    res = tmp_path / "r.jsonl.gz"
    with gzip.open(res, "wt") as f:  # as committed: gzipped
        f.write("".join(json.dumps(r) + "\n" for r in [
            _res("0", "math", 1.0, 1.1, 0.9), _res("1", "math", 1.0, 1.4, 0.95), _res("2", "qa", 1.0, 1.9, 0.9)]))
    out = tmp_path / "o"
    out.mkdir()
    assert cllm.main(["pair", "--prompts", prompts, "--cllm", "my-cllm", "--n", "5", "--max-new-tokens", "8",
                      "--results", str(res), "--out-dir", str(out)]) == 0
    t = json.loads((out / "pairs.json").read_text())
    assert t["chosen"] == "0" and t["loops"] == ["1"] and "1, left out" in t["rule"] and t["qualified"] == 2
    cl = Trace.load(str(out / "cllm_jacobi.json"))
    assert cl.prompt_text == PROMPTS[0][2] and seen[-1] == cl.output_ids and len(seen) == 2
    assert [p["degenerate"] for p in t["prompts"]] == [False, True, False]


def test_pair_decides_the_loops_from_a_scores_answers(tmp_path, prompts, models, loads, monkeypatch):
    """--answers: which CLLM answers loop comes from a score's answers file (by today's rule, here one
    that calls [5] * 12 a loop), not from the results' flags; an answers file without a prompt is refused."""
    monkeypatch.setattr(sys.modules["cllm.evaluate"], "degenerate", lambda ids, **kw: list(ids) == [5] * 12)
    res = tmp_path / "r.jsonl"
    res.write_text("".join(json.dumps(r) + "\n" for r in [
        _res("0", "math", 1.0, 1.1, 0.9), _res("1", "math", 1.0, 1.4, 0.95), _res("2", "qa", 1.0, 1.9, 0.9)]))
    answers = tmp_path / "a.json.gz"
    with gzip.open(answers, "wt") as f:
        json.dump({"ids": ["0", "1", "2"], "answers": [[1, 2, 3], [5] * 12, [4, 5, 6]]}, f)
    out = tmp_path / "o"
    out.mkdir()
    args = ["pair", "--prompts", prompts, "--cllm", "my-cllm", "--n", "5", "--max-new-tokens", "8",
            "--results", str(res), "--out-dir", str(out), "--answers", str(answers)]
    assert cllm.main(args) == 0
    t = json.loads((out / "pairs.json").read_text())
    assert t["chosen"] == "0" and t["loops"] == ["1"] and loads == [None, "my-cllm"]  # decoded once: no retry
    with gzip.open(answers, "wt") as f:
        json.dump({"ids": ["0", "2"], "answers": [[1], [2]]}, f)
    assert cllm.main(args) == 2


def test_eval_says_whether_each_answer_is_right(tmp_path, models, monkeypatch):
    from cllm.evaluate import compare, report
    from decoding.io import read_prompts

    f = tmp_path / "p.jsonl"
    f.write_text(json.dumps({"question_id": 7, "category": "math_reasoning", "turns": ["Tom has 3 apples."],
                             "reference": ["3 + 4 = 7 apples"]}) + "\n"
                 + json.dumps({"question": "Two plus two is", "answer": "2 + 2 = <<2+2=4>>4\n#### 4"}) + "\n"
                 + json.dumps({"id": "x", "prompt": "no reference"}) + "\n")
    rows = read_prompts(str(f))
    assert [r.get("reference") for r in rows] == ["3 + 4 = 7 apples", "2 + 2 = <<2+2=4>>4\n#### 4", None]
    g = tmp_path / "q.jsonl"  # a reference given as a plain string, or none usable
    g.write_text(json.dumps({"id": "a", "prompt": "p", "reference": "#### 12"}) + "\n"
                 + json.dumps({"id": "b", "prompt": "p", "reference": []}) + "\n")
    assert [r.get("reference") for r in read_prompts(str(g))] == ["#### 12", None]
    base, cl = models[None], models["my-cllm"]
    answer = decode(base, base.encode(rows[0]["prompt"]), "ar", {}, 8, record=False).output_ids
    # the base's answer reads "... 7", the CLLM's (another model: another answer) "... 8"
    monkeypatch.setattr(base.tokenizer, "decode", lambda ids, **k: "so 7" if list(ids) == answer else "so 8")
    got = [compare(base, cl, r, 4, 8, False) for r in rows]
    assert (got[0]["base_correct"], got[0]["cllm_correct"]) == (True, False)
    assert (got[1]["base_correct"], got[1]["cllm_correct"]) == (False, False)  # the reference's final number is 4
    assert "base_correct" not in got[2]
    table = report([dict(g, split="s") for g in got]).splitlines()
    assert table[-1] == "| s | 2 | 1 (50.0%) | 0 (0.0%) |"
