"""The Lecture page narrates any trace (issue 11, item 8): a live run from the sidebar, an uploaded
trace, or the shipped example; it opens on the fixed-point slide."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

pytest.importorskip("streamlit")
from streamlit.testing.v1 import AppTest  # noqa: E402

from tests.viz_traces import jacobi_ff_trace  # noqa: E402

APP = str(Path(__file__).resolve().parent.parent / "app.py")


def lecture_text(at) -> str:
    return next(m.value for m in at.markdown if "lecture-text" in m.value)


def test_lecture_of_a_live_jacobi_run(monkeypatch):
    from app_pages.common import models
    from tiny import ByteTokenizer, tiny_lm

    lm = tiny_lm("llama", 2)
    lm.tokenizer = ByteTokenizer()
    monkeypatch.setattr(models, "get_model", lambda name: lm)
    at = AppTest.from_file(APP, default_timeout=60).run()
    at.selectbox(key="example").select("Plain text (no chat)").run()
    at.selectbox(key="method_label").select("Jacobi").run()
    at.number_input(key="p_n").set_value(4).run()
    at.number_input(key="max_new_tokens").set_value(20).run()
    at.button(key="run_button").click().run()
    assert not at.exception and not at.error
    live = at.session_state["results"].traces["jacobi"]
    at.switch_page("app_pages/lecture.py").run()
    assert not at.exception and not at.error
    assert "Decoding as solving equations" in lecture_text(at) and "solves 4 equations" in lecture_text(at)
    assert any("live run" in c.value and live.model_id in c.value for c in at.caption)
    assert at.get("plotly_chart")
    assert at.selectbox(key="lecture_block")  # several blocks: a picker, the suggested one first
    n = int(at.get("progress")[0].proto.text.split(" of ")[1])
    for _ in range(n - 1):
        at.button(key="lecture_next").click().run()
        assert not at.exception and not at.error
    assert "The block's fixed point" in lecture_text(at)
    at.radio(key="lecture_source").set_value("Shipped example").run()
    assert "Step 1 of" in at.get("progress")[0].proto.text  # another trace starts at its first step
    assert any("example trace" in c.value for c in at.caption)


def test_lecture_of_an_uploaded_trace():
    at = AppTest.from_file(APP, default_timeout=60).run()
    at.switch_page("app_pages/traces.py").run()
    at.file_uploader(key="trace_upload").upload("ff.json", jacobi_ff_trace().to_json().encode(), "application/json").run()
    assert not at.exception and not at.error
    at.switch_page("app_pages/lecture.py").run()
    assert not at.exception and not at.error
    assert any("uploaded file ff.json" in c.value for c in at.caption)
    at.button(key="lecture_next").click().run()
    at.button(key="lecture_next").click().run()
    at.button(key="lecture_next").click().run()
    assert "Fast-forward at iteration 1" in lecture_text(at)
    spec = json.loads(at.get("plotly_chart")[0].proto.spec)
    assert spec["layout"]["shapes"]  # the highlighted cells
