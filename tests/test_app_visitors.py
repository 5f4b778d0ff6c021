"""What visitors type (issue 12, item 8), in AppTest and unit tests: user text shown as typed,
Plotly labels with quotes, numbers out of range refused with a sentence, the public-demo switch."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

pytest.importorskip("streamlit")
from streamlit.testing.v1 import AppTest  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
APP = str(ROOT / "app.py")


def fresh() -> AppTest:
    at = AppTest.from_file(APP, default_timeout=60).run()
    at.checkbox(key="chat").uncheck().run()  # the tiny models have no chat template
    return at


# ---- text ----------------------------------------------------------------------------------------
def test_md_escapes_what_markdown_latex_and_html_would_read():
    from app_pages.common.text import md

    s = "Costs $5 and $6: *a* _b_ `c` <b>d</b> [e](f) :red[g] # h ~i~ \\ | {j} &amp;"
    out = md(s)
    assert out.replace("\\\\", "\\").replace("\\", "") == s.replace("\\", "")
    for ch in "$*_`<>[]:#~|{}&":
        assert all(out[i - 1] == "\\" for i, c in enumerate(out) if c == ch), ch
    assert md("1. one\n- two\n+ three\n=\nmine-2.json") == "1\\. one  \n\\- two  \n\\+ three  \n\\=  \nmine-2.json"


def test_a_prompt_with_markdown_shows_as_typed_in_the_caption(monkeypatch):
    from app_pages.common import models
    from app_pages.common.text import md
    from tiny import ByteTokenizer, tiny_lm

    lm = tiny_lm("llama", 0)
    lm.tokenizer = ByteTokenizer()
    monkeypatch.setattr(models, "get_model", lambda name: lm)
    prompt = "Costs $5 and $6: *not bold* <b>x</b> [no](link)"
    at = fresh()
    at.text_area(key="prompt").input(prompt).run()
    at.checkbox(key="chat").uncheck().run()
    at.number_input(key="max_new_tokens").set_value(3).run()
    at.button(key="run_button").click().run()
    assert not at.exception and not at.error, [e.value for e in at.error]
    at.switch_page("app_pages/lookahead.py").run()
    assert f"Prompt: {md(prompt)}" in [c.value for c in at.caption]


def test_plotly_labels_keep_quotes_and_escape_tags():
    from decoding.trace import Trace
    from viz import jacobi, lookahead
    from viz.style import esc, esc_attr, hover_label

    assert esc('say "hi" & <b>') == 'say "hi" &amp; &lt;b&gt;'
    assert esc_attr('"') == "&quot;"
    assert "&quot;" not in hover_label('"') and "&#x27;" not in hover_label("'")
    for m, build in (("lookahead", lambda t: lookahead.step_animation(t, 0)),
                     ("jacobi", lambda t: jacobi.block_animation(t, t.blocks[0].index, 0))):
        t = Trace.load(str(ROOT / "assets" / f"example_{m}.json"))
        t.output_pieces = ['"'] * len(t.output_ids)
        t.prompt_pieces = ["<b>"] * len(t.prompt_ids)
        spec = build(t).to_json()
        assert "&quot;" not in spec and "&#x27;" not in spec, m
        assert "<b>" not in spec.replace("<br>", ""), m


# ---- numbers out of range ------------------------------------------------------------------------
def test_numbers_out_of_range_are_refused_with_a_sentence(monkeypatch):
    from app_pages.common import models

    monkeypatch.setattr(models, "get_model", lambda name: pytest.fail("nothing should load"))
    at = fresh()
    at.number_input(key="max_new_tokens").set_value(9999).run()
    assert at.number_input(key="max_new_tokens").value == 9999  # what was typed stays and is what Run checks
    at.button(key="run_button").click().run()
    assert not at.exception
    assert any("Max new tokens must be between 1 and 512" in e.value for e in at.error)
    at.number_input(key="max_new_tokens").set_value(16).run()
    at.number_input(key="p_W").set_value(99).run()
    at.button(key="run_button").click().run()
    errs = [e.value for e in at.error]
    assert len(errs) == 1 and "W must be between 1 and 64" in errs[0], errs


@pytest.mark.parametrize("key, value, sentence", [
    ("max_new_tokens", 1e20, "Max new tokens must be between 1 and 512, not 100000000000000000000."),
    ("max_new_tokens", 12.5, "Max new tokens must be a whole number from 1 to 512, not 12.5."),
    ("p_W", 1e20, "Lookahead: W must be between 1 and 64, got 100000000000000000000."),
    ("p_W", 2.5, "Lookahead: W must be an integer, got 2.5."),
    ("s_temperature", -1.0, "Lookahead: temperature must be a number between 0 (greedy) and 100, got -1."),
    ("s_temperature", 1000.0, "Lookahead: temperature must be a number between 0 (greedy) and 100, got 1000."),
    ("s_top_k", -3.0, "Lookahead: top_k must be an integer >= 0 (0: off), got -3."),
])
def test_run_refuses_what_a_number_field_shows(monkeypatch, key, value, sentence):
    """Issue 24.2: the number a field shows is what Run checks, with the registry's bounds: refused
    with a sentence naming the field and its bounds (a temperature of -1 was read as greedy)."""
    from app_pages.common import models

    monkeypatch.setattr(models, "get_model", lambda name: pytest.fail("nothing should load"))
    at = fresh()
    if key.startswith("s_") and key != "s_temperature":
        at.number_input(key="s_temperature").set_value(0.7).run()
    at.number_input(key=key).set_value(value).run()
    assert at.number_input(key=key).value == value
    at.button(key="run_button").click().run()
    assert not at.exception
    assert [e.value.replace("\\", "") for e in at.error] == [sentence]


def test_no_number_field_has_bounds_in_the_browser():
    """An integer field keeps the browser's bounds +-2^53 (99999999999999999999 stayed in the field
    with a red mark, never reaching Run); the sampling fields had their own (temperature 0 to 5)."""
    at = fresh()
    at.number_input(key="s_temperature").set_value(0.7).run()
    fields = {w.key: w.proto for w in at.number_input}
    assert {"max_new_tokens", "p_W", "p_n", "s_temperature", "s_top_k", "s_seed"} <= set(fields)
    for key, proto in fields.items():
        assert not proto.has_min and not proto.has_max and proto.min < -1e300 and proto.max > 1e300, key


# ---- the public-demo switch ----------------------------------------------------------------------
@pytest.fixture
def public(monkeypatch, tmp_path):
    from app_pages.common import demo, models
    from tiny import ByteTokenizer, tiny_lm

    monkeypatch.setenv("PDL_PUBLIC_DEMO", "1")
    (tmp_path / "models--some-org--small-lm").mkdir()
    monkeypatch.setattr(demo, "hf_cache", lambda: tmp_path)
    loaded = []
    lm = tiny_lm("llama", 0)
    lm.tokenizer = ByteTokenizer()
    monkeypatch.setattr(models, "get_model", lambda name: loaded.append(name) or lm)
    return loaded


@pytest.mark.parametrize("name", ["/etc", "../work", "assets/cllm", "~/.ssh", "some-org/not-cached", "./x"])
def test_a_public_demo_refuses_server_paths_and_uncached_models(public, name):
    at = fresh()
    at.text_input(key="model_name").input(name).run()
    at.number_input(key="max_new_tokens").set_value(3).run()
    at.button(key="run_button").click().run()
    assert not at.exception
    errs = [e.value for e in at.error]
    assert len(errs) == 1 and "public demo runs only the bundled model" in errs[0], errs
    assert public == [], "nothing may be loaded"


@pytest.mark.parametrize("name", ["", "some-org/small-lm"])
def test_a_public_demo_runs_the_bundled_and_cached_models(public, name):
    at = fresh()
    at.text_input(key="model_name").input(name).run()
    at.number_input(key="max_new_tokens").set_value(3).run()
    at.button(key="run_button").click().run()
    assert not at.exception and not at.error, [e.value for e in at.error]
    assert public == [name]


def test_a_public_demo_limits_the_cllm_folder_to_the_shipped_adapter(public):
    at = fresh()
    at.switch_page("app_pages/cllm.py").run()
    at.number_input(key="max_new_tokens").set_value(3).run()
    at.text_input(key="cllm_folder").input("/tmp").run()
    at.button(key="cllm_run").click().run()
    errs = [e.value for e in at.error]
    assert len(errs) == 1 and "public demo" in errs[0] and public == []
    from app_pages.common.assets import SHIPPED_ADAPTER
    at.text_input(key="cllm_folder").input(str(SHIPPED_ADAPTER)).run()
    at.button(key="cllm_run").click().run()
    assert not at.exception and not at.error, [e.value for e in at.error]
    assert public == ["", str(SHIPPED_ADAPTER)]
    assert json.dumps(at.session_state["results"].cllm.source).startswith('"live run')


PAGES = re.findall(r'st\.Page\("([^"]+)"', (ROOT / "app.py").read_text())  # every page of app.py's navigation


def page_text(at) -> str:
    """Every string the page sends to the browser (each element's protobuf, as text)."""
    out = []

    def walk(node) -> None:
        if getattr(node, "proto", None) is not None:
            out.append(str(node.proto))
        for child in getattr(node, "children", {}).values():
            walk(child)

    walk(at._tree)
    return "\n".join(out)


@pytest.mark.parametrize("written", ["assets/cllm/adapter", "assets/cllm/adapter/", "./assets/cllm/adapter",
                                     "{root}/assets/cllm/adapter/"])
def test_a_public_demo_shows_no_server_path_and_takes_the_adapter_however_written(monkeypatch, tmp_path, written):
    """Issue 24.5: the CLLM folder field was pre-filled with the server's absolute path to the
    adapter (and a live decode's caption repeated it in the CLLM's model id); the same folder with a
    trailing / was refused."""
    import decoding.model
    from app_pages.common import demo, models
    from app_pages.common.assets import SHIPPED_ADAPTER
    from tiny import ByteTokenizer, tiny_lm

    monkeypatch.setenv("PDL_PUBLIC_DEMO", "1")
    monkeypatch.setattr(demo, "hf_cache", lambda: tmp_path)
    loaded = []

    def load_model(name=None, **split):  # names an adapter as decoding.model does: its folder as given
        lm = tiny_lm("llama", 0)
        lm.tokenizer = ByteTokenizer()
        lm.model_id = f"{name} (LoRA on tiny)" if name else "tiny"
        loaded.append(name)
        return lm

    monkeypatch.setattr(decoding.model, "load_model", load_model)
    models.get_model.clear()
    try:
        at = fresh()
        for page in PAGES:
            at.switch_page(page).run()
            assert str(ROOT) not in page_text(at), page
        at.switch_page("app_pages/cllm.py").run()
        assert at.text_input(key="cllm_folder").value == "assets/cllm/adapter"
        at.number_input(key="max_new_tokens").set_value(3).run()
        at.text_input(key="cllm_folder").input(written.format(root=ROOT)).run()
        at.button(key="cllm_run").click().run()
        assert not at.exception and not at.error, [e.value for e in at.error]
        assert loaded == [None, str(SHIPPED_ADAPTER)]  # one name, one cache entry, however it was written
        assert any("CLLM: assets/cllm/adapter (LoRA on tiny)" in c.value for c in at.caption)
        at.text_input(key="cllm_folder").input("assets/cllm/adapter").run()
        assert str(ROOT) not in page_text(at)
    finally:
        models.get_model.clear()
