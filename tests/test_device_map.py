"""Issue 14 item 1: a model split by accelerate's big-model loading (some layers on the CPU, some
offloaded to disk) decodes the same tokens as the unsplit model, with every method (the 4D
lookahead mask, the KV cache crop of keep_fed and the n-gram pool included) and budget="auto"."""

import json

import pytest

import decoding.model
from decoding import cli
from decoding.loop import decode
from decoding.methods import REGISTRY
from decoding.model import ModelError, load_model, parse_device_map, parse_max_memory
from tiny import tiny_lm

METHODS = [("ar", {}), ("jacobi", {"n": 6}), ("lookahead", {"W": 4, "N": 3, "G": 4}), ("pld", {}),
           ("lookahead", {"W": 4, "N": 3, "G": 4, "budget": "auto"}), ("pld", {"budget": "auto"})]
METHODS += [(m, p) for m, p in [("tr", {}), ("tr", {"budget": "auto"})] if m in REGISTRY]  # Token Recycling, where registered
PROMPT = [5, 7, 9, 11, 5, 7, 9, 11, 5, 7, 20, 21, 22, 5, 7]


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    from tokenizers import Tokenizer
    from tokenizers.models import WordLevel
    from transformers import PreTrainedTokenizerFast

    d = tmp_path_factory.mktemp("tiny_split")
    lm = tiny_lm("llama", 5, layers=4)
    lm.model.save_pretrained(str(d))
    tok = Tokenizer(WordLevel({f"t{i}": i for i in range(96)}, unk_token="t0"))
    PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="t0").save_pretrained(str(d))
    return d


def split_map(n_layers: int = 4) -> dict:
    m = {"model.embed_tokens": "cpu", "model.norm": "cpu", "model.rotary_emb": "cpu", "lm_head": "cpu"}
    for i in range(n_layers):
        m[f"model.layers.{i}"] = "cpu" if i < n_layers // 2 else "disk"
    return m


def test_split_model_decodes_the_same_tokens(folder, tmp_path):
    whole = load_model(str(folder), "cpu", "float32")
    split = load_model(str(folder), "cpu", "float32", device_map=split_map(), offload_folder=str(tmp_path / "off"))
    assert split.device_map and "disk" in split.device_map.values() and whole.device_map is None
    assert any(p.device.type == "meta" for p in split.model.parameters())  # really offloaded
    ref = decode(whole, PROMPT, "ar", {}, 24).output_ids
    for method, params in METHODS:
        a = decode(whole, PROMPT, method, params, 24).output_ids
        b = decode(split, PROMPT, method, params, 24).output_ids
        assert a == ref and b == ref, (method, params)


def test_device_map_options_parse_and_explain():
    assert parse_device_map("auto") == "auto" and parse_device_map(None) is None
    assert parse_device_map('{"model": "cpu"}') == {"model": "cpu"}
    with pytest.raises(ModelError, match="--device-map"):
        parse_device_map("everywhere")
    assert parse_max_memory("0=20GiB, cpu=64GiB") == {0: "20GiB", "cpu": "64GiB"}
    with pytest.raises(ModelError, match="--max-memory"):
        parse_max_memory("20GiB")
    with pytest.raises(ModelError, match="need --device-map"):
        load_model("nowhere", "cpu", "float32", max_memory="cpu=1GiB")


def test_cli_passes_the_split_to_load_model(monkeypatch, tmp_path):
    seen = {}
    lm = tiny_lm("llama", 3)
    lm.encode = lambda text, chat=False: [1 + ord(c) % 90 for c in text][:8]

    def fake(*a, **k):
        seen.update(k)
        return lm
    monkeypatch.setattr(decoding.model, "load_model", fake)
    dm = tmp_path / "map.json"
    dm.write_text(json.dumps(split_map()))
    assert cli.main(["generate", "--prompt", "hi there", "--method", "pld", "--max-new-tokens", "4", "--json",
                     "--device-map", str(dm), "--max-memory", "cpu=2GiB", "--offload-folder", str(tmp_path)]) == 0
    assert seen["device_map"] == str(dm) and seen["max_memory"] == "cpu=2GiB" and seen["offload_folder"] == str(tmp_path)


def test_sidebar_split_options_reach_load_model(monkeypatch):
    from pathlib import Path

    from streamlit.testing.v1 import AppTest

    from app_pages.common import models
    from tiny import ByteTokenizer

    seen = []
    lm = tiny_lm("llama", 3)
    lm.tokenizer = ByteTokenizer()

    def fake(name, *split):
        seen.append(split)
        return lm
    monkeypatch.setattr(models, "get_model", fake)
    at = AppTest.from_file(str(Path(__file__).resolve().parents[1] / "app.py"), default_timeout=120).run()
    at.selectbox(key="example").select("Plain text (no chat)").run()
    at.number_input(key="max_new_tokens").set_value(4).run()
    at.text_input(key="device_map").set_value("auto").run()
    at.text_input(key="max_memory").set_value("cpu=2GiB").run()
    at.button(key="run_button").click().run()
    assert not at.exception
    assert ("auto", "cpu=2GiB", "") in seen
