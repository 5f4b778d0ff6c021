"""The F32 GGUF the llama.cpp benchmark runs on (decoding/perf/gguf_f32.py): every tensor
dequantized to float32 with its values kept, every metadata field kept, the file type F32."""

from __future__ import annotations

import numpy as np
import pytest

gguf = pytest.importorskip("gguf")
from gguf import quants  # noqa: E402

from decoding.perf.gguf_f32 import to_f32  # noqa: E402


def _quantized_file(path):
    rng = np.random.default_rng(0)
    w = rng.standard_normal((8, 64)).astype(np.float32)
    writer = gguf.GGUFWriter(str(path), "llama")
    writer.add_block_count(2)
    writer.add_file_type(2)  # a quantized file
    writer.add_token_list(["<s>", "a", "b c"])
    writer.add_token_types([3, 1, 1])
    writer.add_float32("llama.rope.freq_base", 10000.0)
    writer.add_chat_template("{{ messages }}")
    writer.add_tensor("blk.0.attn_q.weight", quants.quantize(w, gguf.GGMLQuantizationType.Q8_0),
                      raw_dtype=gguf.GGMLQuantizationType.Q8_0)
    writer.add_tensor("output_norm.weight", np.arange(64, dtype=np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return w


def test_every_tensor_becomes_f32_with_its_values_and_metadata_kept(tmp_path):
    src, dst = tmp_path / "q.gguf", tmp_path / "out" / "f32.gguf"
    w = _quantized_file(src)
    to_f32(src, dst)
    a, b = gguf.GGUFReader(str(src)), gguf.GGUFReader(str(dst))
    assert {t.tensor_type for t in b.tensors} == {gguf.GGMLQuantizationType.F32}
    assert a.tensors[0].tensor_type == gguf.GGMLQuantizationType.Q8_0
    for ta, tb in zip(a.tensors, b.tensors):
        assert ta.name == tb.name and list(ta.shape) == list(tb.shape)
        expect = quants.dequantize(ta.data, ta.tensor_type).reshape(tb.data.shape)
        assert np.array_equal(tb.data, expect)
    assert np.abs(b.tensors[0].data - w).max() < 0.05  # Q8_0's rounding, not another matrix
    keys = [k for k in a.fields if not k.startswith("GGUF.")]
    assert keys == [k for k in b.fields if not k.startswith("GGUF.")]
    for k in keys:
        want = 0 if k == "general.file_type" else a.fields[k].contents()
        assert b.fields[k].contents() == want, k
    assert not list(dst.parent.glob("*.tmp*"))  # written atomically


def _bench_script():
    import importlib.util
    from pathlib import Path

    path = Path(__file__).resolve().parents[1] / "scripts" / "llama_cpp_bench.py"
    spec = importlib.util.spec_from_file_location("llama_cpp_bench", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_the_llama_cpp_bench_says_it_skips_without_llama_cpp(monkeypatch, capsys):
    import sys

    monkeypatch.setitem(sys.modules, "llama_cpp", None)  # import llama_cpp raises ImportError
    assert _bench_script().main(["--prompts", "does-not-matter.jsonl"]) == 0
    said = capsys.readouterr().out
    assert "llama-cpp-python is not installed" in said and "Skipped" in said


def test_llama_cpp_on_the_f32_gguf_decodes_as_our_ar():
    """Where llama-cpp-python is installed: llama.cpp's greedy tokens on the F32 GGUF equal our AR's
    on the bundled model (the same weights; float32 both), so the benchmark compares like with like."""
    llama_cpp = pytest.importorskip("llama_cpp")
    from decoding.loop import decode
    from decoding.model import load_model
    from decoding.perf.gguf_f32 import bundled_f32

    bench = _bench_script()
    lm = load_model(None)
    llm = bench.open_llama(llama_cpp, bundled_f32(), 2, 512)
    same = 0
    prompts = ["Write a haiku about the sea.", "List three uses of a paperclip.", "What is 17 times 23?"]
    for text in prompts:
        ids = lm.encode(text, chat=True)
        theirs, seconds, per_token = bench.llama_greedy(llama_cpp, llm, ids, 24, set(lm.eos_token_ids))
        assert len(theirs) == 24 and seconds > 0 and per_token > 0
        same += theirs == decode(lm, ids, "ar", {}, 24, record=False).output_ids
    assert same >= 2, "llama.cpp's greedy output should equal ours (at most one near-tie apart)"
