"""The pages' defaults and words (issue 24.6), in AppTest: the Traces and Explain pages open on the
latest run, an upload names the pages that show it, Compare's button counts the registry's
methods, and the CLLM page draws no loss (nor a stopped decode) as a green gain."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

pytest.importorskip("streamlit")
from streamlit.proto.Metric_pb2 import Metric as MetricProto  # noqa: E402
from streamlit.testing.v1 import AppTest  # noqa: E402

from decoding.methods import REGISTRY  # noqa: E402
from decoding.trace import Trace  # noqa: E402
from viz.style import METHOD_NAMES  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
APP = str(ROOT / "app.py")
TITLES = dict((title, page) for page, title in re.findall(r'st\.Page\("([^"]+)", title="([^"]+)"', (ROOT / "app.py").read_text()))


def fresh() -> AppTest:
    return AppTest.from_file(APP, default_timeout=60).run()


def test_traces_and_explain_open_on_the_latest_run(monkeypatch):
    """After a Lookahead run the Traces page offered the AR example for download; after Lookahead
    then Prompt lookup, Explain opened on Lookahead."""
    from test_app_sampling import sidebar_run
    from tiny import tiny_lm

    at = sidebar_run(monkeypatch, tiny_lm("llama", 0), "Lookahead", 8)
    at.switch_page("app_pages/traces.py").run()
    assert at.selectbox(key="trace_pick").value.startswith("Lookahead · live run")
    at.selectbox(key="method_label").select("Prompt lookup").run()  # run again while on the Traces page
    at.button(key="run_button").click().run()
    assert not at.exception and not at.error
    assert at.selectbox(key="trace_pick").value.startswith("Prompt lookup · live run")
    at.switch_page("app_pages/explain.py").run()
    assert not at.exception
    assert at.selectbox(key="explain_trace").value.startswith("Prompt lookup · live run")
    assert any("Showing: live run" in c.value and "Prompt lookup" in c.value for c in at.caption)


@pytest.mark.parametrize("method", ["ar", "lookahead", "tr"])
def test_an_upload_names_the_pages_that_show_it(method):
    """An uploaded AR trace was said to be shown by "the AR and Compare pages" (there is no AR page)."""
    name = f"mine-{method}.json"
    at = fresh()
    at.switch_page("app_pages/traces.py").run()
    data = (ROOT / "assets" / f"example_{method}.json").read_bytes()
    at.file_uploader(key="trace_upload").upload(name, data, "application/json").run()
    said = next(s.value for s in at.success if name in s.value)
    pages = re.search(r"The (.+) pages? now shows? it\.", said).group(1).replace(" and ", ", ").split(", ")
    assert "Compare" in pages and set(pages) <= set(TITLES), said
    for title in pages:
        at.switch_page(TITLES[title]).run()
        if title == "Lecture":
            at.radio(key="lecture_kind").set_value(f"{METHOD_NAMES[method]} decoding").run()
        assert not at.exception
        assert any(f"uploaded file {name}" in c.value for c in at.caption), f"the {title} page does not show it"


def test_compare_runs_and_counts_every_method_of_the_registry():
    at = fresh()
    at.switch_page("app_pages/compare.py").run()
    button = at.button(key="compare_run")
    assert f"Run all {len(REGISTRY)} methods" in button.label, button.label
    assert all(spec.label in button.proto.help for spec in REGISTRY.values())


def _copy(t: Trace, stop_reason: str | None = None) -> Trace:
    t = Trace.from_json(t.to_json())
    if stop_reason is not None:
        t.stop_reason = stop_reason
    return t


@pytest.mark.parametrize("stopped", [False, True])
def test_the_cllm_page_draws_no_loss_as_a_gain(stopped):
    """A stopped decode's 1.10 -> 1.05 tokens/step was drawn as a green "0.96x" gain."""
    from app_pages.common.state import CllmPair

    at = fresh()
    pair = at.session_state["results"].cllm
    slow, fast = _copy(pair.cllm, "stopped" if stopped else None), _copy(pair.base)  # the CLLM as the base: a loss
    assert fast.tokens_per_step < slow.tokens_per_step
    at.session_state["results"].cllm = CllmPair(slow, fast, "test", pair.folder)
    at.switch_page("app_pages/cllm.py").run()
    assert not at.exception
    m = next(m for m in at.metric if m.label.startswith("Tokens per step"))
    assert m.proto.color != MetricProto.MetricColor.GREEN and m.proto.direction != MetricProto.MetricDirection.UP
    if stopped:
        assert "stopped" in m.proto.delta and m.proto.color == MetricProto.MetricColor.GRAY
    else:
        assert m.proto.color == MetricProto.MetricColor.RED and m.proto.direction == MetricProto.MetricDirection.DOWN
    at.session_state["results"].cllm = CllmPair(_copy(pair.base), _copy(pair.cllm), "test", pair.folder)
    at.run()
    m = next(m for m in at.metric if m.label.startswith("Tokens per step"))
    assert m.proto.color == MetricProto.MetricColor.GREEN  # the shipped pair: a real gain stays green
