"""AppTest: the sidebar's sampling controls and the sampling decisions view (no model is loaded)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

pytest.importorskip("streamlit")
from streamlit.testing.v1 import AppTest  # noqa: E402

from tests.test_viz_sampling import sampled_trace  # noqa: E402

APP = str(Path(__file__).resolve().parent.parent / "app.py")


def fresh() -> AppTest:
    return AppTest.from_file(APP, default_timeout=60).run()


def test_sampling_controls_follow_temperature_and_method():
    at = fresh()
    assert at.number_input(key="s_temperature").value == 0.0
    assert at.number_input(key="s_top_k").disabled and at.slider(key="s_top_p").disabled  # greedy: nothing to act on
    at.number_input(key="s_temperature").set_value(0.7).run()
    assert not at.exception
    assert not at.number_input(key="s_top_k").disabled and not at.number_input(key="s_seed").disabled
    at.selectbox(key="method_label").select("Jacobi").run()
    assert at.number_input(key="s_temperature").disabled
    assert any("Jacobi decodes greedily only" in c.value for c in at.caption)


def _params_script():
    import json

    import streamlit as st

    from app_pages.common import keys, session

    session.init_state()
    if st.session_state.get("sample_now"):
        st.session_state.s_temperature, st.session_state.s_top_k, st.session_state.s_top_p = 0.7, 40, 0.9
    st.text(json.dumps({m: keys.method_params(m) for m in keys.METHODS}))


def test_sidebar_settings_become_run_params():
    at = AppTest.from_function(_params_script, default_timeout=60).run()
    greedy = json.loads(at.text[0].value)
    assert "temperature" not in greedy["lookahead"] and "temperature" not in greedy["ar"]
    at.session_state["sample_now"] = True
    at.run()
    sampled = json.loads(at.text[0].value)
    want = {"temperature": 0.7, "top_k": 40, "top_p": 0.9, "sample_seed": 0}
    for m in ("ar", "lookahead", "pld"):
        assert {k: sampled[m][k] for k in want} == want
    assert "temperature" not in sampled["jacobi"]  # Jacobi stays greedy


def test_lookahead_and_compare_pages_show_the_decisions_of_a_sampled_trace():
    at = fresh()
    at.switch_page("app_pages/traces.py").run()
    at.file_uploader(key="trace_upload").upload("sampled.json", sampled_trace().to_json().encode(), "application/json").run()
    assert not at.exception and not at.error
    at.switch_page("app_pages/lookahead.py").run()
    assert not at.exception and not at.error
    specs = {c.proto.id: json.loads(c.proto.spec) for c in at.get("plotly_chart")}
    dec = [s for s in specs.values() if "Sampling verification" in s["layout"].get("title", {}).get("text", "")]
    assert len(dec) == 1
    assert "2 of 3 candidate tokens accepted" in dec[0]["layout"]["title"]["text"]
    assert any("temperature=0.8" in c.value for c in at.caption)
    at.switch_page("app_pages/compare.py").run()
    assert not at.exception and not at.error
    titles = [json.loads(c.proto.spec)["layout"].get("title", {}).get("text", "") for c in at.get("plotly_chart")]
    assert any("Sampling verification" in t for t in titles)


def sidebar_run(monkeypatch, lm, method: str, max_new_tokens: int, temperature: float = 0.0) -> AppTest:
    """The app with ``lm`` (a tiny model, byte tokenizer) as the sidebar's model, after Run."""
    from app_pages.common import models
    from tiny import ByteTokenizer

    lm.tokenizer = ByteTokenizer()
    monkeypatch.setattr(models, "get_model", lambda name: lm)
    at = fresh()
    at.selectbox(key="example").select("Plain text (no chat)").run()
    at.selectbox(key="method_label").select(method).run()
    at.number_input(key="max_new_tokens").set_value(max_new_tokens).run()
    if temperature:
        at.number_input(key="s_temperature").set_value(temperature).run()
    at.button(key="run_button").click().run()
    assert not at.exception and not at.error
    return at


def test_a_sampled_run_from_the_sidebar(monkeypatch):
    from tiny import tiny_lm

    at = sidebar_run(monkeypatch, tiny_lm("llama", 0), "Prompt lookup", 24, temperature=0.8)
    t = at.session_state["results"].traces["pld"]
    assert t.sampled and t.params["temperature"] == 0.8 and len(t.output_ids) == 24
    assert all(s.sampling is not None for s in t.steps)
    assert any("sampling at temperature 0.8" in m.value for m in at.markdown)


def test_a_greedy_run_streams_every_token_the_prefill_first(monkeypatch):
    import html
    import re

    from tiny import tiny_lm

    lm = tiny_lm("qwen2", 1)
    at = sidebar_run(monkeypatch, lm, "Lookahead", 20)
    t = at.session_state["results"].traces["lookahead"]
    streamed = next(m.value for m in at.markdown if "prefill: the first token" in m.value)
    spans = re.findall(r'<span title="([^"]*)"[^>]*>(.*?)</span>', streamed)
    assert spans[0][0] == "prefill: the first token"
    assert len(spans) == 1 + t.n_steps
    assert "".join(html.unescape(text) for _, text in spans) == "".join(lm.pieces(t.output_ids, t.prompt_ids))
