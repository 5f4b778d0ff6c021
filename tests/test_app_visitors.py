"""What visitors type (issue 12, item 8), in AppTest and unit tests: user text shown as typed,
Plotly labels with quotes, numbers out of range refused with a sentence, the public-demo switch."""

from __future__ import annotations

import json
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
    from app_pages.common import ui
    at.text_input(key="cllm_folder").input(str(ui.SHIPPED_ADAPTER)).run()
    at.button(key="cllm_run").click().run()
    assert not at.exception and not at.error, [e.value for e in at.error]
    assert public == ["", str(ui.SHIPPED_ADAPTER)]
    assert json.dumps(at.session_state["results"].cllm.source).startswith('"live run')
