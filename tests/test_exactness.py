"""Agreement with the AR twin (issue 14 item 2): matched tokens, first divergence, AR's logit gap there."""

import json

import pytest
import torch

import decoding.model
from decoding import bench, cli
from decoding.exactness import agreement, compare_to_ar, describe, first_divergence, format_share_table, share_table
from decoding.loop import decode
from tiny import tiny_lm


def test_first_divergence_and_agreement():
    assert first_divergence([1, 2, 3], [1, 2, 3]) is None
    assert first_divergence([1, 2, 4], [1, 2, 3]) == 2
    assert first_divergence([1, 2], [1, 2, 3]) == 2  # ended early
    assert agreement([1, 9, 3], [1, 2, 3]) == {"ar_match": 1, "ar_compared": 3, "first_divergence": 1}
    assert agreement([5] * 96, [5] * 96)["ar_match"] == 96


def test_describe_never_claims_exact_without_a_comparison():
    assert describe(None) == "not compared with AR"
    assert describe({"ar_compared": None}) == "not compared with AR"
    assert describe({"ar_match": 96, "ar_compared": 96, "first_divergence": None}) == "matches AR: 96 of 96"
    s = describe({"ar_match": 57, "ar_compared": 96, "first_divergence": 57, "logit_gap": 0.03125, "dtype": "bfloat16"})
    assert s == "diverges at token 57 of 96 (logit gap 0.0312, bfloat16)"


def test_logit_gap_is_ar_logits_at_the_divergence():
    lm = tiny_lm("llama", 1)
    prompt = [3, 14, 15, 9, 2, 6]
    ref = decode(lm, prompt, "ar", {}, 10).output_ids
    out = list(ref)
    with torch.inference_mode():
        logits = lm.model(input_ids=torch.tensor([prompt + ref[:4]])).logits[0, -1]
    other = int(logits.argsort(descending=True)[1])  # AR's runner-up at token 4
    out[4] = other
    info = compare_to_ar(lm, prompt, out, ref, "float32")
    assert info["first_divergence"] == 4 and info["ar_match"] == 4 and info["ar_compared"] == 10
    assert info["logit_gap"] == pytest.approx(float(logits[ref[4]] - logits[other]), abs=1e-4)
    assert info["logit_gap"] > 0 and info["dtype"] == "float32"
    assert compare_to_ar(lm, prompt, ref, ref)["logit_gap"] is None


def _rows():
    base = {"record": True, "category": "x", "sampled": False, "steps": 2, "seconds": 1.0, "tokens_per_s": 3.0}
    return [
        {**base, "id": "1", "method": "ar", "output_ids": [1, 2, 3], "matches_ar": True, "dtype": "bfloat16"},
        {**base, "id": "1", "method": "pld", "output_ids": [1, 2, 3], "matches_ar": True, "dtype": "bfloat16",
         "ar_match": 3, "ar_compared": 3, "first_divergence": None, "logit_gap": None},
        {**base, "id": "2", "method": "pld", "output_ids": [1, 5, 3], "matches_ar": False, "dtype": "bfloat16",
         "ar_match": 1, "ar_compared": 3, "first_divergence": 1, "logit_gap": 0.125},
        {**base, "id": "3", "method": "pld", "output_ids": [1, 5, 3], "matches_ar": None, "dtype": "bfloat16"},
    ]


def test_share_table_per_method_and_dtype():
    (t,) = share_table(_rows())
    assert (t["method"], t["dtype"], t["runs"], t["runs_matching"]) == ("pld", "bfloat16", 2, 1)
    assert t["share"] == 0.5 and t["token_share"] == pytest.approx(4 / 6)
    assert t["first_divergence"] == [1] and t["max_gap"] == 0.125
    assert "| pld | bfloat16 | 2 | 1 | 50% |" in format_share_table(_rows())


def test_summary_is_not_exact_without_an_ar_twin():
    rows = [r for r in _rows() if r["method"] != "ar"]
    table = {(r["method"], r["category"]): r for r in bench.summarize(rows)}
    assert table[("pld", "ALL")]["exact"] is None  # nothing compared: no claim
    ar2 = dict(_rows()[0], id="2")
    table = {(r["method"], r["category"]): r for r in bench.summarize(_rows()[:3] + [ar2])}
    assert table[("pld", "ALL")]["exact"] is False and bench.exact_label(table[("pld", "ALL")]) == "NO (1 of 2 runs)"


def test_bench_rows_record_the_agreement(monkeypatch, tmp_path):
    lm = tiny_lm("llama", 3)
    lm.encode = lambda text, chat=False: [1 + ord(c) % 90 for c in text][:10]
    monkeypatch.setattr(decoding.model, "load_model", lambda *a, **k: lm)
    prompts = tmp_path / "q.jsonl"
    prompts.write_text(json.dumps({"question_id": 1, "category": "a", "turns": ["a prompt"]}) + "\n")
    out = tmp_path / "b.jsonl"
    assert cli.main(["bench", "--prompts", str(prompts), "--methods", "ar,jacobi,lookahead,pld",
                     "--max-new-tokens", "12", "--out", str(out)]) == 0
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    for r in rows:
        assert r["dtype"] == "float32"
        assert (r["ar_match"], r["ar_compared"], r["first_divergence"], r["logit_gap"]) == (12, 12, None, None)


def test_compare_rows_say_how_far_each_run_matches_ar():
    from viz import compare
    from viz_traces import ar_trace, lookahead_trace

    ar, la = ar_trace(), lookahead_trace()
    rows = compare.summary_rows({"AR": ar, "Lookahead": la})
    assert rows[0]["vs AR tokens"] == "the reference"
    same = (la.prompt_ids, la.model_id, la.dtype, la.max_new_tokens) == (ar.prompt_ids, ar.model_id, ar.dtype, ar.max_new_tokens)
    info = compare.ar_agreement(la, ar)
    assert (info is not None) == same
    assert rows[1]["vs AR tokens"] == describe(info)
    other = lookahead_trace()
    other.prompt_ids = other.prompt_ids + [1]
    assert compare.ar_agreement(other, ar) is None
    assert compare.summary_rows({"AR": ar, "x": other})[1]["vs AR tokens"] == "not compared with AR"
    other = lookahead_trace()
    other.output_ids = list(ar.output_ids)
    other.prompt_ids, other.model_id, other.dtype, other.max_new_tokens = ar.prompt_ids, ar.model_id, ar.dtype, ar.max_new_tokens
    n = len(ar.output_ids)
    assert compare.summary_rows({"AR": ar, "x": other})[1]["vs AR tokens"] == f"matches AR: {n} of {n}"
    other.output_ids = list(ar.output_ids[:2]) + [ar.output_ids[2] + 1] + list(ar.output_ids[3:])
    assert compare.summary_rows({"AR": ar, "x": other})[1]["vs AR tokens"].startswith(f"diverges at token 2 of {n}")
