"""CLLM: trajectory items, the consistency loss, training on a tiny model, exactness after
training, adapter loading through load_model, the command line's errors."""

from __future__ import annotations

import copy
import json
import random

import pytest
import torch

import cllm
import decoding.model
from decoding.io import UsageError
from decoding.model import LoadedModel, load_model
from decoding.loop import decode
from tiny import CLLM_PROMPTS, cllm_items, cllm_lm, generate_greedy, tiny_lm

PROMPTS = CLLM_PROMPTS


@pytest.fixture(scope="module")
def lm():
    return cllm_lm()


@pytest.fixture(scope="module")
def items(lm):
    return cllm_items(lm)


def test_items_hold_each_block_trajectory(lm):
    tr = decode(lm, PROMPTS[0], "jacobi", {"n": 8}, 24)
    its = cllm.items_from_trace(tr, "p0", "cat", seed=0)
    assert len(its) == len(tr.blocks) and len(its) >= 3
    answer = tr.output_ids
    for it, b in zip(its, tr.blocks):
        assert set(cllm.ITEM_KEYS) <= set(it) and cllm.check_item(it) is None
        assert it["id"] == f"p0:{b.index}" and it["n_blocks"] == len(its) and it["n"] == 8
        assert it["answer_ids"] == answer
        assert it["prompt_ids"] == PROMPTS[0] + answer[:it["offset"]]
        fp = it["fixed_point"]
        assert fp == answer[it["offset"]:it["offset"] + len(fp)] == b.fixed_point
        recs = [s.record for s in tr.steps if s.record and s.record.block == b.index]
        # every state an iteration fed, then the fixed point
        assert it["states"] == [r.before[:len(fp)] for r in recs] + [fp]
        assert it["states"][0][1:] != fp[1:]  # the initial guess is not already the answer
    # blocks tile the answer: each block starts at the token after the previous one
    offs = [it["offset"] for it in its]
    assert offs[0] == 0 and all(b - a == len(x["fixed_point"]) for a, b, x in zip(offs, offs[1:], its))
    # the fixed point is greedy AR's output
    assert answer == generate_greedy(lm, PROMPTS[0], 24)


@pytest.mark.parametrize("change,msg", [
    (lambda d: d.pop("states"), "lacks states"),
    (lambda d: d.update(prompt_ids=[]), "prompt_ids is empty"),
    (lambda d: d.update(fixed_point=[1]), "at least 2"),
    (lambda d: d["states"].append(d["states"][0]), "last state must be the fixed point"),
    (lambda d: d["states"][0].append(3), "as long as fixed_point"),
    (lambda d: d.update(answer_ids="x"), "answer_ids must be"),
])
def test_malformed_items_are_named(items, change, msg):
    d = copy.deepcopy(items[0])
    change(d)
    assert msg in cllm.check_item(d)


def test_read_items_errors(tmp_path, items):
    with pytest.raises(UsageError, match="no data file"):
        cllm.read_items(str(tmp_path / "nope.jsonl"))
    p = tmp_path / "d.jsonl"
    p.write_text(json.dumps(items[0]) + "\n{oops\n")
    with pytest.raises(UsageError, match=r"d.jsonl:2 is not JSON"):
        cllm.read_items(str(p))
    bad = dict(items[0], states=[])
    p.write_text(json.dumps(items[0]) + "\n" + json.dumps(bad) + "\n")
    with pytest.raises(UsageError, match=r"d.jsonl:2 is not a CLLM item: states"):
        cllm.read_items(str(p))
    p.write_text("\n".join(json.dumps(d) for d in items) + "\n")
    assert [d["id"] for d in cllm.read_items(str(p))] == [d["id"] for d in items]


def test_cli_errors_exit_2(tmp_path, capsys):
    assert cllm.main(["train", "--data", str(tmp_path / "none.jsonl"), "--out", str(tmp_path / "o")]) == 2
    assert "no data file" in capsys.readouterr().err
    p = tmp_path / "bad.jsonl"
    p.write_text('{"id": 1}\n')
    assert cllm.main(["train", "--data", str(p), "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and "not a CLLM item" in err and err.count("\n") == 1
    assert cllm.main(["collect", "--prompts", str(tmp_path / "q.jsonl"), "--out", str(tmp_path / "x.jsonl")]) == 2
    assert cllm.main(["bogus"]) == 2


def test_collect_writes_items_and_resumes(monkeypatch, tmp_path, lm):
    lm2 = LoadedModel(lm.model, lm.tokenizer, lm.model_id, "cpu", "float32")
    lm2.encode = lambda text, chat=False: [1 + ord(c) % 60 for c in text][:8]
    monkeypatch.setattr(decoding.model, "load_model", lambda *a, **k: lm2)
    q = tmp_path / "q.jsonl"
    q.write_text("\n".join(json.dumps({"question_id": i, "category": c, "turns": [f"{c} prompt {i}"]})
                           for i, c in enumerate("aabb")) + "\n")
    out = tmp_path / "data.jsonl"
    args = ["collect", "--prompts", str(q), "--per-category", "1", "--n", "6", "--max-new-tokens", "14", "--out", str(out)]
    assert cllm.main(args) == 0
    rows = [json.loads(l) for l in out.read_text().splitlines()]
    assert {r["prompt_id"] for r in rows} == {"0", "2"} and all(cllm.check_item(r) is None for r in rows)
    assert all(r["n"] == 6 and r["category"] in "ab" for r in rows)
    # a crash in the middle of a prompt's lines: the partial prompt is dropped and redone, others kept
    lines = out.read_text().splitlines()
    first = [l for l in lines if json.loads(l)["prompt_id"] == "0"]
    out.write_text("\n".join(first + [l for l in lines if json.loads(l)["prompt_id"] == "2"][:1]) + "\n" + '{"trunc')
    assert cllm.main(args[:4] + ["2"] + args[5:]) == 0  # now two per category: adds 1 and 3, redoes 2
    again = [json.loads(l) for l in out.read_text().splitlines()]
    assert [r["id"] for r in again[:len(first)]] == [r["id"] for r in rows if r["prompt_id"] == "0"]
    ids = [r["id"] for r in again]
    assert len(ids) == len(set(ids)) and {r["prompt_id"] for r in again} == {"0", "1", "2", "3"}
    assert cllm.main(args) == 0  # nothing left to do: the file is unchanged
    assert [json.loads(l)["id"] for l in out.read_text().splitlines()] == ids


def test_select_skips_and_takes_per_category():
    rows = [{"id": str(i), "category": c} for i, c in enumerate("aaabbc")]
    assert [r["id"] for r in cllm.select(rows, 1, 1)] == ["1", "4"]
    assert [r["id"] for r in cllm.select(rows, 0, 0)] == [str(i) for i in range(6)]


# ---- the loss -----------------------------------------------------------------------------------
def test_kl_from_hand_made_logits():
    t = torch.tensor([[2.0, 0.0, -1.0], [0.0, 1.0, 0.0], [1.0, 1.0, 1.0]])
    assert float(cllm.kl_from(t, t.clone(), 0)) == 0.0
    s = t.clone()
    s[2] = torch.tensor([5.0, -5.0, 0.0])
    one = float(cllm.kl_from(t, s, 0))
    assert one > 0 and float(cllm.kl_from(t, s, 2)) == pytest.approx(one)  # only position 2 differs
    p = torch.softmax(t[2], -1)
    assert one == pytest.approx(float((p * (p.log() - torch.log_softmax(s[2], -1))).sum()) / 3, rel=1e-5)
    assert float(cllm.kl_from(t, s, 3)) == 0.0  # nothing from the first wrong position on
    assert cllm.first_wrong([1, 2, 3], [1, 2, 3]) == 3 and cllm.first_wrong([1, 5, 3], [1, 2, 3]) == 1


def test_consistency_loss_zero_at_the_fixed_point_and_larger_for_worse_states(lm, items):
    it = max(items, key=lambda d: len(d["fixed_point"]))
    fp, prefix = it["fixed_point"], it["prompt_ids"]
    assert float(cllm.consistency_loss(lm.model, prefix, fp, fp).detach()) == 0.0
    last_wrong = fp[:-1] + [(fp[-1] + 1) % 64]
    all_wrong = [fp[0]] + [(t + 7) % 64 for t in fp[1:]]
    a = float(cllm.consistency_loss(lm.model, prefix, last_wrong, fp).detach())
    b = float(cllm.consistency_loss(lm.model, prefix, all_wrong, fp).detach())
    assert 0 < a < b
    # the loss of an item's sampled state is the consistency loss of that state
    rng = random.Random(3)
    k = random.Random(3).choice([j for j, s in enumerate(it["states"]) if s != fp])
    got = cllm.item_losses(lm.model, it, rng, w_ar=10.0)
    want = cllm.consistency_loss(lm.model, prefix, it["states"][k], fp)
    assert got["consistency"].detach().item() == pytest.approx(want.detach().item(), rel=1e-4, abs=1e-6)
    assert got["total"].detach().item() == pytest.approx(got["consistency"].detach().item() + 10 * got["ar"].detach().item(), rel=1e-5)
    assert got["total"].requires_grad


def test_local_loss_is_optional(lm, items):
    got = cllm.item_losses(lm.model, items[0], random.Random(0), w_ar=1.0, w_local=0.5)
    assert "local" in got and got["local"].detach().item() >= 0
    assert got["total"].detach().item() == pytest.approx((got["consistency"] + got["ar"] + 0.5 * got["local"]).detach().item(), rel=1e-5)
    assert "local" not in cllm.item_losses(lm.model, items[0], random.Random(0))


# ---- training -----------------------------------------------------------------------------------
def _trained(lm, items, w_ar, epochs=20, tmp=None):
    model = cllm.add_lora(copy.deepcopy(lm.model), r=4)
    before = cllm.mean_losses(model, items)
    rows = cllm.train(model, items, tmp, epochs=epochs, lr=3e-3, w_ar=w_ar, progress=False)
    return model, before, cllm.mean_losses(model, items), rows


@pytest.mark.slow  # trains for minutes on 2 CPU cores
def test_training_reduces_the_loss_and_keeps_jacobi_exact(lm, items, tmp_path):
    model, before, after, rows = _trained(lm, items, 10.0, tmp=str(tmp_path))
    assert after["consistency"] + 10 * after["ar"] < 0.5 * (before["consistency"] + 10 * before["ar"])
    # metrics file: one row per step
    m = cllm.read_metrics(str(tmp_path / cllm.METRICS_FILE))
    assert [r["step"] for r in m] == list(range(1, len(items) * 20 + 1))
    assert all({"consistency", "ar", "total", "lr", "seconds", "tokens"} <= set(r) for r in m)
    assert m[-1]["tokens"] > m[0]["tokens"] > 0
    trained = LoadedModel(model.merge_and_unload(), lm.tokenizer, "tiny-cllm", "cpu", "float32")
    for ids in PROMPTS:  # Jacobi on the CLLM == greedy AR of the CLLM (transformers' generate)
        assert decode(trained, ids, "jacobi", {"n": 8}, 24).output_ids == generate_greedy(trained, ids, 24)
        # the AR loss keeps the trained answers: the CLLM's greedy output is the base's
        assert generate_greedy(trained, ids, 24) == generate_greedy(lm, ids, 24)


@pytest.mark.slow  # trains for minutes on 2 CPU cores
def test_consistency_alone_speeds_up_jacobi(lm, items):
    model, before, after, _ = _trained(lm, items, 0.0)
    assert after["consistency"] < 0.2 * before["consistency"]
    trained = LoadedModel(model.merge_and_unload(), lm.tokenizer, "tiny-cllm", "cpu", "float32")
    tps = lambda m: sum(decode(m, ids, "jacobi", {"n": 8}, 24).tokens_per_step for ids in PROMPTS) / len(PROMPTS)
    assert tps(trained) > 1.5 * tps(lm)
    for ids in PROMPTS:
        assert decode(trained, ids, "jacobi", {"n": 8}, 24).output_ids == generate_greedy(trained, ids, 24)


# ---- loading a CLLM through load_model ----------------------------------------------------------
def _word_tokenizer(vocab: int):
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.WordLevel({f"t{i}": i for i in range(vocab)}, unk_token="t0"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    return PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="t0")


def _trained_adapter(tmp_path, items):
    """(base LoadedModel, tokenizer, base folder, the LoRA model trained a little)."""
    base_lm = tiny_lm("llama", 0, vocab=64)
    tok = _word_tokenizer(64)
    base_dir = tmp_path / "base"
    base_lm.model.save_pretrained(base_dir)
    tok.save_pretrained(base_dir)
    model = cllm.add_lora(copy.deepcopy(base_lm.model), r=4)
    cllm.train(model, items[:4], None, epochs=3, lr=3e-3, progress=False)
    return base_lm, tok, base_dir, model


def test_adapter_and_full_folders_load_through_load_model(tmp_path, items):
    base_lm, tok, base_dir, model = _trained_adapter(tmp_path, items)
    ad = tmp_path / "adapter"
    cllm.save_model(model, tok, str(ad), str(base_dir), lora=True, meta={"base": str(base_dir)})
    assert json.loads((ad / "adapter_config.json").read_text())["base_model_name_or_path"] == str(base_dir)
    assert (ad / "adapter_model.safetensors").stat().st_size < 200_000 and (ad / "cllm.json").is_file()

    loaded = load_model(str(ad), device="cpu")
    assert "LoRA on" in loaded.model_id and not hasattr(loaded.model, "peft_config")
    x = torch.tensor([PROMPTS[0]])
    with torch.no_grad():
        want = model(input_ids=x).logits
        got = loaded.model(input_ids=x).logits
        base = base_lm.model(input_ids=x).logits
    assert (want - base).abs().max() > 1e-2  # the adapter changed something
    assert torch.allclose(got, want, atol=2e-3)  # fp16 adapter weights, merged
    ids = loaded.encode("t3 t4 t5 t6")
    assert decode(loaded, ids, "jacobi", {"n": 6}, 12).output_ids == decode(loaded, ids, "ar", {}, 12).output_ids

    full = tmp_path / "full"
    cllm.save_model(model.merge_and_unload(), tok, str(full), str(base_dir), lora=False)
    f = load_model(str(full), device="cpu")
    with torch.no_grad():
        assert torch.allclose(f.model(input_ids=x).logits, want, atol=1e-4)


def test_an_int8_adapter_is_half_the_bytes_and_loads_as_its_dequantized_weights(tmp_path, items):
    """save_model(int8=True) writes the LoRA weights as int8 with per-row scales (no peft safetensors);
    load_model merges exactly those weights (dequantized), so what ships is what was evaluated; an
    fp16 save into the same folder replaces them; a damaged file is a clear error."""
    from peft import set_peft_model_state_dict
    from safetensors.torch import load_file

    from decoding.lora_int8 import WEIGHTS, dequantized, read_int8_weights

    base_lm, tok, base_dir, model = _trained_adapter(tmp_path, items)
    ad, fp = tmp_path / "int8", tmp_path / "fp16"
    cllm.save_model(model, tok, str(ad), str(base_dir), lora=True, int8=True)
    cllm.save_model(model, tok, str(fp), str(base_dir), lora=True)
    assert not (ad / "adapter_model.safetensors").exists()
    assert (ad / WEIGHTS).stat().st_size < 0.6 * (fp / "adapter_model.safetensors").stat().st_size
    weights = dequantized(read_int8_weights(ad))
    half = load_file(str(fp / "adapter_model.safetensors"))
    assert weights.keys() == half.keys()
    for k, w in weights.items():  # within half an int8 step of the trained weights
        assert (w - half[k].float()).abs().max() <= w.abs().max() / 254 + 1e-3, k
    same = copy.deepcopy(model)
    set_peft_model_state_dict(same, weights)
    x = torch.tensor([PROMPTS[0]])
    with torch.no_grad():
        want = same.merge_and_unload()(input_ids=x).logits
        got = load_model(str(ad), device="cpu").model(input_ids=x).logits
    assert torch.allclose(got, want, atol=1e-4)
    cllm.save_model(model, tok, str(ad), str(base_dir), lora=True)  # fp16 over int8: the int8 file goes
    assert sorted(p.name for p in ad.iterdir()) == sorted(p.name for p in fp.iterdir())
    cllm.save_model(model, tok, str(ad), str(base_dir), lora=True, int8=True)
    (ad / WEIGHTS).write_bytes(b"not gzip")
    with pytest.raises(decoding.model.ModelError, match="unreadable int8 weights"):
        load_model(str(ad), device="cpu")


def test_adapter_with_a_missing_base_is_a_clear_error(tmp_path):
    ad = tmp_path / "adapter"
    ad.mkdir()
    (ad / "adapter_config.json").write_text(json.dumps({"peft_type": "LORA", "base_model_name_or_path": str(tmp_path / "gone")}))
    with pytest.raises(decoding.model.ModelError, match="offline"):
        load_model(str(ad), device="cpu")
    (ad / "adapter_config.json").write_text(json.dumps({"peft_type": "LORA"}))
    with pytest.raises(decoding.model.ModelError, match="names no base model"):
        load_model(str(ad), device="cpu")


def test_report_table_from_hand_made_rows():
    def row(split, bt, bs, ct, cs, same):
        side = lambda tps, steps, sp: {"jacobi_tokens_per_step": tps, "jacobi_steps": steps, "speedup": sp, "exact": True}
        return {"id": "x", "category": "c", "split": split, "base": side(bt, bs, 0.5), "cllm": side(ct, cs, 0.8),
                "identical_share": same, "base_nll_base": 10.0, "n_base": 10, "base_nll_cllm": 20.0, "n_cllm": 10}
    rows = [row("in", 1.0, 60, 2.0, 30, 0.5), row("in", 1.0, 60, 1.0, 60, 1.0), row("out", 1.2, 50, 1.2, 50, 0.2)]
    lines = cllm.report(rows).splitlines()
    cells = [c.strip() for c in lines[2].split("|")[1:-1]]
    # steps-weighted tokens/step: (2*30 + 1*60) / 90 = 1.333; base 1.0
    assert cells[:5] == ["in", "2", "1.000", "1.333", "1.33x"]
    assert cells[5:8] == ["0.80x", "0.50x", "75.0%"]
    assert cells[8:] == [f"{2.718281828 ** 1.0:.2f}", f"{2.718281828 ** 2.0:.2f}", "yes"]
    assert lines[4].startswith("| ALL | 3 |")
    # without the degenerate CLLM answers (the first row's): the base's on the same problems beside
    rows[0]["cllm"]["degenerate"] = True
    lines = cllm.report(rows).splitlines()
    at = lines.index("| split | problems without a degenerate CLLM answer | Jacobi tok/step base | Jacobi tok/step CLLM | ratio |")
    assert lines[at + 2:at + 5] == ["| in | 1 of 2 | 1.000 | 1.000 | 1.00x |", "| out | 1 of 1 | 1.200 | 1.200 | 1.00x |",
                                    "| ALL | 2 of 3 | 1.091 | 1.091 | 1.00x |"]


@pytest.mark.slow
def test_shipped_cllm_adapter_loads_and_jacobi_stays_exact():
    from pathlib import Path

    folder = Path(__file__).resolve().parent.parent / "assets" / "cllm" / "adapter"
    lm = load_model(str(folder), device="cpu")
    base = load_model(device="cpu")
    assert "LoRA on SmolLM2" in lm.model_id
    ids = lm.encode("Tom has 3 apples and buys 5 more. How many apples does he have?", chat=True)
    ar = decode(lm, ids, "ar", {}, 32)
    assert decode(lm, ids, "jacobi", {"n": 16}, 32).output_ids == ar.output_ids == generate_greedy(lm, ids, 32)
    x = torch.tensor([ids])
    with torch.no_grad():
        assert (lm.model(input_ids=x).logits - base.model(input_ids=x).logits).abs().max() > 1e-3  # the adapter is applied
