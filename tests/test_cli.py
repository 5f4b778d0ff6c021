"""`python -m decoding generate` and `python -m decoding tune` on a tiny in-process model."""

import json

import pytest
import torch

import decoding.model
from decoding import cli
from decoding.methods import REGISTRY
from decoding.perf import tune
from decoding.perf.costs import CostCurve, curve_path
from decoding.trace import Trace
from tiny import IdTokenizer, generate_greedy, tiny_lm


@pytest.fixture()
def lm(monkeypatch, tmp_path):
    monkeypatch.setenv("PDL_CACHE", str(tmp_path / "cache"))
    lm = tiny_lm("llama", 3)
    lm.encode = lambda text, chat=False: [1 + ord(c) % 90 for c in text][:12]
    monkeypatch.setattr(decoding.model, "load_model", lambda *a, **k: lm)
    return lm


PROMPT = "abcabcabd abc"


@pytest.mark.parametrize("method", tuple(REGISTRY))
def test_generate_writes_a_trace_equal_to_greedy_ar(lm, method, tmp_path, capsys):
    path = tmp_path / "t.json"
    code = cli.main(["generate", "--method", method, "--prompt", PROMPT, "--max-new-tokens", "14",
                     "--trace", str(path), "--json"])
    assert code == 0
    summary = json.loads(capsys.readouterr().out)
    tr = Trace.load(str(path))  # the validator accepts it
    ref = generate_greedy(lm, lm.encode(PROMPT), 14)
    assert tr.method == method and tr.prompt_ids == lm.encode(PROMPT) and tr.output_ids == ref
    assert tr.prompt_text == PROMPT and tr.model_id == lm.model_id
    assert summary["method"] == method and summary["params"] == tr.params == REGISTRY[method].defaults
    assert summary["new_tokens"] == 14 and summary["steps"] == tr.n_steps >= 1
    assert summary["tokens_per_step"] == pytest.approx(13 / tr.n_steps, abs=1e-4)
    assert summary["stop_reason"] == "max_new_tokens"
    assert (summary["model"], summary["device"], summary["text"]) == (lm.model_id, "cpu", tr.text)


def test_generate_streams_the_text_and_sets_method_flags(lm, tmp_path, capsys):
    path = tmp_path / "t.json"
    code = cli.main(["generate", "--method", "lookahead", "--W", "3", "--N", "3", "--G", "2", "--prompt", PROMPT,
                     "--max-new-tokens", "10", "--trace", str(path)])
    assert code == 0
    out, err = capsys.readouterr()
    tr = Trace.load(str(path))
    assert (tr.params["W"], tr.params["N"], tr.params["G"]) == (3, 3, 2)
    assert out == IdTokenizer().decode(tr.output_ids) and tr.output_ids == generate_greedy(lm, lm.encode(PROMPT), 10)
    assert f"[lookahead] 10 tokens in {tr.n_steps} steps" in err


def test_generate_rejects_bad_input(lm, capsys):
    assert cli.main(["generate", "--prompt", "  ", "--max-new-tokens", "4"]) == 2
    assert cli.main(["generate", "--prompt", "x", "--method", "jacobi", "--n", "0"]) == 2
    assert capsys.readouterr().err.count("error:") == 2


def _curve(lm) -> CostCurve:
    """A hand-made curve in the cache folder, so that tune does not measure one."""
    c = CostCurve(lm.model_id, "cpu", "float32", torch.get_num_threads(), 256, [1, 4, 16, 64], [0.01, 0.012, 0.02, 0.05],
                  repeats=1, ar_overhead=0.05)
    c.save(curve_path(c.model_id, c.device, c.dtype, c.threads))
    return c


def test_tune_ranks_every_setting_per_category(lm, tmp_path, capsys):
    curve = _curve(lm)
    prompts = tmp_path / "q.jsonl"
    rows = [{"question_id": i, "category": cat, "turns": [f"{cat} {cat} prompt {i}"]} for i, cat in enumerate("aab")]
    prompts.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    out = tmp_path / "tune.json"
    code = cli.main(["tune", "--prompts", str(prompts), "--methods", "jacobi,lookahead,pld", "--max-new-tokens", "8",
                     "--per-category", "1", "--out", str(out)])
    assert code == 0
    text = capsys.readouterr().out
    res = json.loads(out.read_text())
    methods = ("jacobi", "lookahead", "pld")
    settings = tune.settings_grid(methods)
    labels = {tune.label(m, p) for m, p in settings}
    assert len(labels) == len(settings) == sum(len(REGISTRY[m].grid) for m in methods)
    assert res["curve"] == curve.to_dict() and res["prompts"] == 2  # the cached curve, one prompt per category
    for cat in ("a", "b", "ALL"):
        ranked = [r for r in res["ranking"] if r["category"] == cat]
        assert {r["setting"] for r in ranked} == labels, cat
        assert all(r["prompts"] == (2 if cat == "ALL" else 1) and r["exact"] and r["predicted"] > 0 for r in ranked)
        for m in methods:  # best predicted first within each method
            preds = [r["predicted"] for r in ranked if r["method"] == m]
            assert preds == sorted(preds, reverse=True)
    assert set(res["recommended"]) == set(methods)
    assert len(res["runs"]) == 2 * (1 + len(settings)) and all(r["matches_ar"] for r in res["runs"])
    for label in labels:
        assert label in text
    assert text.count("RECOMMENDED") == 3 * len(methods)  # per category and method
    found = tune.find_tune_result(lm.model_id, "cpu")
    assert found is not None and found[0]["ranking"] == res["ranking"]


def test_tune_rejects_a_method_without_a_grid(lm, tmp_path, capsys):
    assert cli.main(["tune", "--prompts", str(tmp_path / "none.jsonl"), "--methods", "ar"]) == 2
    err = capsys.readouterr().err
    assert "tune knows" in err and "jacobi" in err and "not 'ar'" in err
