"""Issue 10's machinery for long CLLM runs, on tiny in-process models: GSM8K prompts, collection
killed mid-way and resumed to the same file as an uncut run, training cut (by a step or time limit,
or by a crash) and resumed to the same weights and metrics rows as an uncut run, the learning
curve's evaluation rows, the degenerate-answer measure and the eval's per-block counts."""

from __future__ import annotations

import copy
import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import cllm
import decoding.model
from decoding.io import read_prompts
from tiny import IdTokenizer, cllm_items, cllm_lm, tiny_lm

ROOT = Path(__file__).resolve().parent.parent
GSM = [{"question": f"Tom has {i} apples and buys {i + 2} more. How many?", "answer": f"... #### {2 * i + 2}"}
       for i in range(6)]


@pytest.fixture()
def gsm(tmp_path):
    p = tmp_path / "train.jsonl"
    p.write_text("".join(json.dumps(d) + "\n" for d in GSM))
    return str(p)


def test_read_prompts_reads_gsm8k_questions(gsm):
    rows = read_prompts(gsm)
    assert [r["id"] for r in rows] == [str(i) for i in range(1, 7)]  # the line number
    assert [r["prompt"] for r in rows] == [d["question"] for d in GSM] and {r["category"] for r in rows} == {"all"}


# ---- collection: killed and resumed ---------------------------------------------------------------
SCRIPT = r"""
import os, signal, sys
sys.path[:0] = [{root!r}, {tests!r}]
import cllm, cllm.data, decoding.model
from tiny import ByteTokenizer, tiny_lm
lm = tiny_lm("llama", 0)
lm.tokenizer = ByteTokenizer()
decoding.model.load_model = lambda *a, **k: lm
kill_at = int(os.environ.get("KILL_AT", "0"))
real, calls = cllm.data.decode, []
def decode(*a, **k):
    calls.append(1)
    if kill_at and len(calls) == kill_at + 1:  # the prompt in flight
        os.kill(os.getpid(), signal.SIGKILL)
    return real(*a, **k)
cllm.data.decode = decode
sys.exit(cllm.main(sys.argv[1:]))
"""


def _collect(tmp_path, gsm, out, kill_at=0):
    script = tmp_path / "run.py"
    script.write_text(SCRIPT.format(root=str(ROOT), tests=str(ROOT / "tests")))
    env = dict(os.environ, HF_HUB_OFFLINE="1", KILL_AT=str(kill_at))
    return subprocess.run([sys.executable, str(script), "collect", "--prompts", gsm, "--n", "6", "--max-new-tokens", "20",
                           "--out", str(out)], capture_output=True, text=True, env=env, timeout=300)


@pytest.mark.slow  # subprocess runs of collect, one killed midway: long for the fast tier
def test_collect_killed_midway_resumes_to_the_uncut_file(tmp_path, gsm):
    whole = tmp_path / "whole.jsonl"
    p = _collect(tmp_path, gsm, whole)
    assert p.returncode == 0, p.stderr
    assert "collect" in p.stderr and "s/item" in p.stderr  # the progress bar and the per-item cost
    rows = [json.loads(l) for l in whole.read_text().splitlines()]
    assert [r["prompt_id"] for r in rows if r["block"] == 0] == [str(i) for i in range(1, 7)]
    assert all(cllm.check_item(r) is None and r["n"] == 6 for r in rows)
    assert all(r["states"][-1] == r["fixed_point"] and isinstance(r["block"], int) for r in rows)

    cut = tmp_path / "cut.jsonl"
    p = _collect(tmp_path, gsm, cut, kill_at=3)
    assert p.returncode == -signal.SIGKILL
    got = [json.loads(l) for l in cut.read_text().splitlines()]
    assert {r["prompt_id"] for r in got} == {"1", "2", "3"}  # all that was done before the kill is kept
    with open(cut, "a") as f:  # and a kill in the middle of a write leaves a cut line
        f.write(whole.read_text().splitlines()[len(got)][:40])
    p = _collect(tmp_path, gsm, cut)
    assert p.returncode == 0, p.stderr
    assert "3 prompts were already in" in p.stderr
    assert cut.read_bytes() == whole.read_bytes()


def test_collect_stops_at_the_time_limit_and_resumes(monkeypatch, tmp_path, gsm):
    lm = tiny_lm("llama", 0)
    lm.encode = lambda text, chat=False: [1 + ord(c) % 90 for c in text][:10]
    monkeypatch.setattr(decoding.model, "load_model", lambda *a, **k: lm)
    out = tmp_path / "d.jsonl"
    rows = read_prompts(gsm)
    s = cllm.collect(lm, rows, str(out), n=6, max_new_tokens=12, progress=False, max_seconds=1e-9)
    assert s["stopped"] and s["prompts"] == 1 and s["left"] == 5 and s["seconds"] > 0
    s = cllm.collect(lm, rows, str(out), n=6, max_new_tokens=12, progress=False)
    assert not s["stopped"] and s["prompts"] == 5 and s["skipped"] == 1
    assert [json.loads(l)["prompt_id"] for l in out.read_text().splitlines() if json.loads(l)["block"] == 0] == \
        [r["id"] for r in rows]


# ---- training: cut and resumed --------------------------------------------------------------------
@pytest.fixture(scope="module")
def lm():
    return cllm_lm()


@pytest.fixture(scope="module")
def items(lm):
    return cllm_items(lm)


def _fresh(lm):
    torch.manual_seed(5)
    return cllm.add_lora(copy.deepcopy(lm.model), r=4)


def _curve():
    return cllm.CurveEval(IdTokenizer(), [[3, 4, 5, 6], [9, 8, 7]], n=6, max_new_tokens=12)


def _weights(model):
    return {k: p.detach().clone() for k, p in model.named_parameters() if p.requires_grad}


def _rows(out):
    strip = lambda d: {k: v for k, v in d.items() if k != "seconds"}
    return ([strip(d) for d in cllm.read_metrics(str(Path(out) / cllm.METRICS_FILE))],
            cllm.read_evals(str(Path(out) / cllm.METRICS_FILE)))


KW = dict(epochs=2, lr=3e-3, w_ar=10.0, w_local=0.5, progress=False)


@pytest.fixture(scope="module")
def uncut(lm, items, tmp_path_factory):
    out = str(tmp_path_factory.mktemp("uncut"))
    model = _fresh(lm)
    rows = cllm.train(model, items, out, evaluate=_curve(), **KW)
    return out, _weights(model), rows


def test_uncut_run_writes_the_learning_curve(uncut, items):
    out, _, rows = uncut
    total = 2 * len(items)
    assert [r["step"] for r in rows] == list(range(1, total + 1))
    m, ev = _rows(out)
    assert [r["step"] for r in m] == list(range(1, total + 1))
    assert [e["at_step"] for e in ev] == [0] + cllm.eval_steps(total) and cllm.eval_steps(total)[-1] == total
    assert cllm.eval_steps(40) == [4, 10, 20, 40]
    for e in ev:
        assert {"jacobi_tokens_per_step", "identical_share", "degenerate_share", "base_ppl_base", "base_ppl_cllm"} <= set(e)
    assert ev[0]["identical_share"] == 1.0 and ev[0]["base_ppl_cllm"] == ev[0]["base_ppl_base"]
    st = cllm.load_state(out)
    assert st["done"] and st["step"] == total


@pytest.mark.parametrize("how", ["steps", "time", "crash"])
def test_training_cut_and_resumed_equals_the_uncut_run(lm, items, uncut, tmp_path, how):
    out_u, w_u, _ = uncut
    total = 2 * len(items)
    half = total // 2
    out = str(tmp_path / "run")
    model = _fresh(lm)
    if how == "steps":
        first = cllm.train(model, items, out, evaluate=_curve(), max_steps=half, **KW)
        assert [r["step"] for r in first] == list(range(1, half + 1))
    elif how == "time":  # a time limit smaller than one step: one step per run
        first = cllm.train(model, items, out, evaluate=_curve(), max_seconds=1e-9, **KW)
        assert len(first) == 1
    else:  # killed after step half + 1: the steps after the last checkpoint are lost and redone
        def boom(row):
            if row.get("step") == half + 1:
                raise KeyboardInterrupt
        with pytest.raises(KeyboardInterrupt):
            cllm.train(model, items, out, evaluate=_curve(), save_every=4, log=boom, **KW)
        assert cllm.load_state(out)["step"] == 4 * ((half + 1) // 4) or cllm.load_state(out)["step"] in cllm.eval_steps(total)
    runs = 1
    while not (cllm.load_state(out) or {}).get("done"):
        model = _fresh(lm)  # a new process: fresh weights, everything comes from the checkpoint
        cllm.train(model, items, out, evaluate=_curve(), resume=True, max_seconds=1e-9 if how == "time" else 0, **KW)
        runs += 1
    assert runs == (total if how == "time" else 2)
    w = _weights(model)
    assert w.keys() == w_u.keys() and all(torch.allclose(w[k], w_u[k], atol=1e-6) for k in w)
    assert _rows(out) == _rows(out_u)
    # the training time of all runs adds up in the rows
    m = cllm.read_metrics(str(Path(out) / cllm.METRICS_FILE))
    assert all(b["seconds"] >= a["seconds"] for a, b in zip(m, m[1:]))
    # a finished run resumed does nothing; other settings are refused
    assert cllm.train(_fresh(lm), items, out, evaluate=_curve(), resume=True, **KW) == []
    with pytest.raises(decoding.ConfigError, match="other settings: lr"):
        cllm.train(_fresh(lm), items, out, resume=True, **dict(KW, lr=1e-3))


def test_degenerate_answers():
    assert cllm.repeated_share([0] * 10) == 1.0 and cllm.degenerate([5, 6] + [0] * 10)
    assert cllm.repeated_share([1, 2, 3] * 4 + [7, 8, 9]) == pytest.approx(12 / 15) and cllm.degenerate([1, 2, 3] * 4 + [7, 8])
    assert not cllm.degenerate(list(range(20)))  # no repetition
    assert not cllm.degenerate([1, 2, 1, 2] + list(range(10, 30)))  # two repeats of a bigram are not a loop
    assert not cllm.degenerate(list(range(10)) + [0] * 9)  # 9 of 19 tokens: not more than half
    assert cllm.repeated_share([]) == 0.0 and not cllm.degenerate([])
    # a sentence said over and over (the base model's loop): any period that repeats 3 times counts
    para = list(range(100, 140))
    loop = list(range(20)) + para * 4 + para[:10]
    assert cllm.repeated_share(loop) == pytest.approx(170 / 190) and cllm.degenerate(loop)
    assert not cllm.degenerate(loop, max_period=16)  # the rule before 2026-12-06 missed it
    assert not cllm.degenerate(list(range(20)) + para * 2 + list(range(50, 90)))  # said twice: not a loop


def test_cli_train_cut_by_max_minutes_and_resumed(monkeypatch, tmp_path, gsm, capsys):
    """`python -m cllm train --max-minutes ... --resume` run again until it finishes == one uncut run,
    with the learning curve on held-out prompts in its metrics file."""
    from tiny import ByteTokenizer

    base = tiny_lm("llama", 0)
    base.tokenizer = ByteTokenizer()
    data = tmp_path / "d.jsonl"
    cllm.collect(base, read_prompts(gsm)[:2], str(data), n=6, max_new_tokens=12, progress=False)
    n_items = len(data.read_text().splitlines())

    def load(*a, **k):  # a fresh copy per process, as load_model gives
        lm = copy.copy(base)
        lm.model = copy.deepcopy(base.model)
        return lm
    monkeypatch.setattr(decoding.model, "load_model", load)
    args = ["train", "--data", str(data), "--lora-r", "4", "--lr", "3e-3", "--eval-prompts", gsm,
            "--eval-per-category", "2", "--eval-n", "6", "--eval-max-new-tokens", "8", "--save-every", "0"]
    torch.manual_seed(0)
    assert cllm.main(args + ["--out", str(tmp_path / "uncut")]) == 0
    runs = 0
    while runs < 2 * n_items:
        torch.manual_seed(0)  # the LoRA initialisation of a new process (overwritten by the checkpoint)
        assert cllm.main(args + ["--out", str(tmp_path / "cut"), "--max-minutes", "1e-9", "--resume"]) == 0
        runs += 1
        if "cut by --max-minutes" not in capsys.readouterr().err:
            break
    assert runs == n_items  # one step per run
    meta = json.loads((tmp_path / "cut" / cllm.META_FILE).read_text())
    assert meta["finished"] and meta["steps"] == meta["total_steps"] == n_items and meta["eval_prompts"]["ids"] == ["1", "2"]
    assert _rows(tmp_path / "cut") == _rows(tmp_path / "uncut")
    assert [e["at_step"] for e in _rows(tmp_path / "cut")[1]] == [0] + cllm.eval_steps(n_items)
    a, b = cllm.load_state(str(tmp_path / "cut"))["params"], cllm.load_state(str(tmp_path / "uncut"))["params"]
    assert all(torch.allclose(a[k], b[k], atol=1e-6) for k in a)
