"""Every page renders any valid trace, the shortest ones included (issue 12, item 6): a run of one
token (Max new tokens 1: the prefill's token, zero steps) and one of one step, for every method,
uploaded on the Traces page and then shown on every page (AppTest, tiny models)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

pytest.importorskip("streamlit")
from streamlit.testing.v1 import AppTest  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
APP = str(ROOT / "app.py")
PAGES = re.findall(r'st\.Page\("([^"]+)"', (ROOT / "app.py").read_text())  # every page of app.py's navigation
IDS = [5, 9, 2, 7, 5, 9, 2, 7, 1]


def shipped_curve_identity() -> dict:
    d = json.loads((ROOT / "assets" / "cost_curve_cpu.json").read_text())
    return {k: d[k] for k in ("model_id", "device", "dtype")}


def short_trace(method: str, max_new_tokens: int):
    """A tiny model's trace, claiming the bundled model on this CPU so that Explain finds the shipped
    step-cost curve and draws its whole account."""
    from decoding.loop import decode
    from tiny import tiny_lm

    t = decode(tiny_lm("llama", 0), IDS, method, {}, max_new_tokens)
    for k, v in shipped_curve_identity().items():
        setattr(t, k, v)
    return t


def assert_renders(at, where: str) -> None:
    assert not at.exception, (where, [e.value for e in at.exception])
    assert not at.error, (where, [e.value for e in at.error])


def visit_every_page(at, where: str) -> None:
    for page in PAGES:
        at.switch_page(page).run()
        assert_renders(at, f"{where} on {page}")
        if page == "app_pages/lecture.py":
            for kind in ("Jacobi decoding", "Lookahead decoding"):
                at.radio(key="lecture_kind").set_value(kind).run()
                assert_renders(at, f"{where} on the {kind} lecture")


def upload(at, name: str, trace) -> None:
    at.switch_page("app_pages/traces.py").run()
    at.file_uploader(key="trace_upload").upload(name, trace.to_json().encode(), "application/json").run()
    assert_renders(at, f"uploading {name}")
    assert any(f"Loaded {name}" in s.value for s in at.success)


@pytest.mark.parametrize("max_new_tokens", [1, 2])
@pytest.mark.parametrize("method", ["ar", "jacobi", "lookahead", "pld"])
def test_every_page_renders_a_one_token_and_a_one_step_trace(method, max_new_tokens):
    t = short_trace(method, max_new_tokens)
    assert t.n_steps == max_new_tokens - 1 and len(t.output_ids) == max_new_tokens
    at = AppTest.from_file(APP, default_timeout=60).run()
    upload(at, f"short-{method}.json", t)
    if method == "jacobi":  # the CLLM page's pair, both cut as short
        from app_pages.common.state import CllmPair
        at.session_state["results"].cllm = CllmPair(t, short_trace("jacobi", max_new_tokens), "test", "nowhere")
    if method != "ar":  # Explain shows it (an AR trace is the baseline it compares with)
        at.switch_page("app_pages/explain.py").run()
        assert any(f"short-{method}.json" in c.value for c in at.caption)
    visit_every_page(at, f"a {max_new_tokens}-token {method} trace")


@pytest.mark.parametrize("method", ["Lookahead", "Jacobi"])
def test_a_live_run_of_one_token_then_every_page(monkeypatch, method):
    """Max new tokens 1 from the sidebar: the prefill's token only, zero steps."""
    from test_app_sampling import sidebar_run
    from tiny import tiny_lm

    at = sidebar_run(monkeypatch, tiny_lm("llama", 0), method, 1)
    t = at.session_state["results"].latest
    assert len(t.output_ids) == 1 and t.n_steps == 0 and t.stop_reason == "max_new_tokens"
    assert any("prefill: the first token" in m.value for m in at.markdown)
    visit_every_page(at, f"a live one-token {method} run")
