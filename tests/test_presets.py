"""The sidebar's paper-settings preset (issue 11, item 9) and the Lookahead page's pool sources."""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("streamlit")
from streamlit.testing.v1 import AppTest  # noqa: E402

from app_pages.common import presets  # noqa: E402
from decoding.methods import REGISTRY  # noqa: E402

APP = str(Path(__file__).resolve().parent.parent / "app.py")
PAPER = next(iter(presets.PRESETS))


def test_presets_are_registry_parameters_within_bounds():
    for method, params in presets.PRESETS.values():
        presets.check(method, params)
        assert set(params) <= {p.name for p in REGISTRY[method].params}
    assert presets.PRESETS[PAPER] == ("lookahead", {"W": 15, "N": 5, "G": 15, "seed_pool_prompt": False,
                                                    "harvest_output": False})


def test_paper_preset_sets_the_sidebar_and_the_run_uses_it(monkeypatch):
    from app_pages.common import models
    from tiny import ByteTokenizer, tiny_lm

    lm = tiny_lm("llama", 0)
    lm.tokenizer = ByteTokenizer()
    monkeypatch.setattr(models, "get_model", lambda name: lm)
    at = AppTest.from_file(APP, default_timeout=60).run()
    at.selectbox(key="method_label").select("Jacobi").run()
    at.button(key="preset_0").click().run()
    assert not at.exception
    assert at.selectbox(key="method_label").value == "Lookahead"
    assert [at.number_input(key=f"p_{k}").value for k in "WNG"] == [15, 5, 15]
    assert at.checkbox(key="p_seed_pool_prompt").value is False and at.checkbox(key="p_harvest_output").value is False
    at.selectbox(key="example").select("Plain text (no chat)").run()
    at.number_input(key="max_new_tokens").set_value(16).run()
    at.button(key="run_button").click().run()
    assert not at.exception and not at.error
    t = at.session_state["results"].traces["lookahead"]
    assert {k: t.params[k] for k in ("W", "N", "G", "seed_pool_prompt", "harvest_output")} == presets.PRESETS[PAPER][1]
    assert not t.pool_seed
    assert all(o == "window" for s in t.steps if s.record for o in s.record.origins)
    at.switch_page("app_pages/lookahead.py").run()
    assert not at.exception and not at.error
    assert any("window only, as in the lookahead paper" in m.value for m in at.markdown)


def test_lookahead_page_says_the_example_seeds_the_pool():
    at = AppTest.from_file(APP, default_timeout=60).run()
    at.switch_page("app_pages/lookahead.py").run()
    assert not at.exception
    words = next(m.value for m in at.markdown if "This trace's pool" in m.value)
    assert "the prompt's n-grams" in words and "committed output" in words and "paper-settings preset" in words
