"""AppTest runs of every page on the shipped example traces (no model is loaded here)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

pytest.importorskip("streamlit")
from streamlit.testing.v1 import AppTest  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
APP = str(ROOT / "app.py")
PAGES = ["app_pages/jacobi.py", "app_pages/lookahead.py", "app_pages/compare.py", "app_pages/traces.py"]
TIMEOUT = 60


def fresh() -> AppTest:
    return AppTest.from_file(APP, default_timeout=TIMEOUT).run()


def charts(at) -> list:
    return at.get("plotly_chart")


def test_examples_are_shipped_and_valid():
    from decoding.trace import Trace
    for m in ("ar", "jacobi", "lookahead", "pld"):
        p = ROOT / "assets" / f"example_{m}.json"
        assert p.stat().st_size < 200_000, f"{p.name} should stay small"
        t = Trace.load(str(p))
        assert t.method == m and t.steps


@pytest.mark.parametrize("page", PAGES)
def test_every_page_renders_an_example_without_errors(page):
    at = fresh()
    if page != PAGES[0]:
        at.switch_page(page).run()
    assert not at.exception, [e.value for e in at.exception]
    assert not at.error, [e.value for e in at.error]
    if page != "app_pages/traces.py":
        assert charts(at), "the page should open on a chart of an example trace"
        assert any("example trace" in c.value for c in at.caption)


def test_jacobi_page_block_picker_redraws_from_session_state():
    at = fresh()
    first = json.loads(charts(at)[0].proto.spec)
    sb = at.selectbox(key="jacobi_block")
    sb.select(sb.options[1]).run()
    assert not at.exception
    second = json.loads(charts(at)[0].proto.spec)
    assert first["layout"]["title"]["text"] != second["layout"]["title"]["text"]
    assert "block 1" in second["layout"]["title"]["text"]


def test_lookahead_page_has_animation_pool_and_mask():
    at = fresh()
    at.switch_page("app_pages/lookahead.py").run()
    specs = [json.loads(c.proto.spec) for c in charts(at)]
    # the animation, what G buys (an expander); the step inspector: position still, the current key's
    # pool entries, the step's mask; in expanders: the whole pool as a graph, the mask for any W, N, G
    assert len(specs) == 7
    assert len(specs[0]["frames"]) > 10 and specs[1]["data"][0]["type"] == "bar"
    assert not specs[2].get("frames") and not specs[5].get("frames")
    assert specs[4]["data"][0]["type"] == "heatmap" and specs[6]["data"][0]["type"] == "heatmap"
    at.slider(key="la_cands").set_value(0).run()
    assert not at.exception


def test_lookahead_inspector_one_control_drives_every_view():
    """Issue 23, item 3: one step control for the window, the current key's pool entries, the
    candidates and the step's real mask; it opens on the step whose candidate matched most, and
    -1 / +1 buttons move all views together."""
    from decoding.trace import Trace
    from viz import lookahead
    t = Trace.load(str(ROOT / "assets" / "example_lookahead.json"))
    at = fresh()
    at.switch_page("app_pages/lookahead.py").run()
    start = lookahead.telling_step(t)
    assert at.select_slider(key="la_step").value == start
    titles = lambda: [json.loads(c.proto.spec)["layout"]["title"]["text"] for c in charts(at)[2:6]]
    assert all(f"tep {start}" in x for x in titles()), titles()
    at.button(key="la_step_next").click().run()
    nxt = lookahead.lookahead_steps(t)[lookahead.lookahead_steps(t).index(start) + 1]
    assert at.select_slider(key="la_step").value == nxt
    spec = [json.loads(c.proto.spec) for c in charts(at)]
    assert f"Step {nxt}" in spec[2]["layout"]["title"]["text"] and f"Step {nxt}'s" in spec[4]["layout"]["title"]["text"]
    assert f"before step {nxt}" in spec[5]["layout"]["title"]["text"].lower()
    at.button(key="la_step_back").click().run()
    at.button(key="la_step_back").click().run()
    assert at.select_slider(key="la_step").value == lookahead.lookahead_steps(t)[lookahead.lookahead_steps(t).index(start) - 1]
    assert not at.exception


def test_empty_prompt_gets_a_clear_message_and_no_run():
    at = fresh()
    at.text_area(key="prompt").input("   ").run()
    at.button(key="run_button").click().run()
    assert not at.exception
    assert any("prompt is empty" in e.value for e in at.error)
    assert charts(at)  # the example is still shown


def test_example_prompt_picker_fills_the_prompt():
    at = fresh()
    at.selectbox(key="example").select("Plain text (no chat)").run()
    assert at.text_area(key="prompt").value == "The three laws of thermodynamics are"
    assert at.checkbox(key="chat").value is False


def test_upload_valid_bad_and_huge_traces():
    at = fresh()
    at.switch_page("app_pages/traces.py").run()
    assert at.get("download_button")
    up = at.file_uploader(key="trace_upload")
    up.upload("junk.json", b"{not json", "application/json").run()
    assert not at.exception
    assert any("not a valid trace" in e.value for e in at.error)

    from tests.viz_traces import lookahead_trace
    at = fresh()
    at.switch_page("app_pages/traces.py").run()
    at.file_uploader(key="trace_upload").upload("mine.json", lookahead_trace().to_json().encode(), "application/json").run()
    assert not at.exception and not at.error
    assert any("Loaded mine.json" in s.value for s in at.success)
    at.switch_page("app_pages/lookahead.py").run()
    assert not at.exception and not at.error
    assert any("uploaded file mine.json" in c.value for c in at.caption)


def test_a_page_says_when_it_falls_back_on_the_example_trace():
    """Issue 23, item 8: a reload (a new session) fell back on the example trace without saying
    so. A page showing the example says "Showing the example trace" in a box; once the session has
    its own trace for the method, the box goes."""
    from tests.viz_traces import jacobi_trace
    at = fresh()  # a new session: what a reload gives
    notes = lambda: [i.value for i in at.info if "Showing the example trace" in i.value]
    assert len(notes()) == 1 and "example\\_jacobi.json" in notes()[0] and "reload" in notes()[0]
    for page in ("app_pages/lookahead.py", "app_pages/explain.py", "app_pages/lecture.py"):
        at.switch_page(page).run()
        assert len(notes()) == 1, page
    at.radio(key="lecture_source").set_value("Shipped example").run()
    assert not notes()  # picked on purpose: no fallback to announce
    at.switch_page("app_pages/traces.py").run()
    at.file_uploader(key="trace_upload").upload("j.json", jacobi_trace().to_json().encode(), "application/json").run()
    at.switch_page("app_pages/jacobi.py").run()
    assert not at.exception and not notes()


def test_upload_wrong_schema_version():
    from tests.viz_traces import jacobi_trace
    d = jacobi_trace().to_dict()
    d["version"] = 99
    at = fresh()
    at.switch_page("app_pages/traces.py").run()
    at.file_uploader(key="trace_upload").upload("old.json", json.dumps(d).encode(), "application/json").run()
    assert not at.exception
    assert any("unsupported trace version" in e.value for e in at.error)


def test_unknown_model_gets_one_sentence_and_the_app_keeps_working():
    at = fresh()
    at.text_input(key="model_name").input("no-such-org/no-such-model").run()
    at.button(key="run_button").click().run()
    assert not at.exception, [e.value for e in at.exception]
    errs = [e.value for e in at.error]
    assert len(errs) == 1 and "no-such-org/no-such-model" in errs[0] and "Traceback" not in errs[0]
    assert charts(at)  # the example is still shown
    at.switch_page("app_pages/lookahead.py").run()
    assert not at.exception and charts(at)


def test_streamlit_config_serves_quietly():
    """.streamlit/config.toml (read by scripts/start): no file watcher (it watched .venv and burnt a
    core), no usage stats, and exception boxes without server paths or source lines."""
    import tomllib
    cfg = tomllib.loads((ROOT / ".streamlit" / "config.toml").read_text())
    assert cfg["server"]["fileWatcherType"] == "none"
    assert cfg["browser"]["gatherUsageStats"] is False
    assert cfg["client"]["showErrorDetails"] in ("type", "none")


def test_what_if_gallery_shows_a_recorded_run_at_once():
    """Issue 23, item 5: the sidebar's what-if gallery loads a pre-recorded run (assets/gallery,
    scripts/make_gallery.py) as the session's trace for its method, no decoding: the paper's
    settings on the Lookahead page, the index's tokens/step the trace's own."""
    index = json.loads((ROOT / "assets" / "gallery" / "index.json").read_text())
    assert len(index["runs"]) >= 12 and {"lookahead", "jacobi"} <= {e["method"] for e in index["runs"]}
    from decoding.trace import Trace
    for e in index["runs"]:
        t = Trace.load(str(ROOT / "assets" / "gallery" / e["file"]))
        assert (t.method, round(t.tokens_per_step, 3)) == (e["method"], e["tokens_per_step"])
        assert t.kernel == "skinny" or e["file"].startswith("cllm_pair")  # the CLLM page's pair: as it was made
    pair = [e for e in index["runs"] if e["file"].startswith("cllm_pair")]
    assert len(pair) == 2 and len({json.dumps(Trace.load(str(ROOT / "assets" / "gallery" / e["file"])).prompt_ids)
                                   for e in pair}) == 1  # CLLM vs base on the same prompt
    at = fresh()
    pick = next(k for k in at.selectbox(key="gallery_pick").options if "Math" in k and "paper's settings" in k)
    at.selectbox(key="gallery_pick").select(pick).run()
    at.button(key="gallery_show").click().run()
    assert not at.exception
    at.switch_page("app_pages/lookahead.py").run()
    assert not at.exception and not at.error
    assert any("what-if gallery" in c.value and "W=15" in c.value for c in at.caption)
    spec = json.loads(charts(at)[0].proto.spec)
    assert "candidate 15" in json.dumps(spec["layout"]["yaxis"]["ticktext"])  # G = 15 rows


def test_gallery_script_lists_valid_distinct_runs():
    """scripts/make_gallery.py's runs: distinct names, every setting valid for its method (the
    registry's bounds), the paper's settings among them, and each shipped in the index."""
    import sys
    sys.path.insert(0, str(ROOT / "scripts"))
    import make_gallery
    from decoding.methods import resolve_params
    runs = make_gallery.runs()
    names = [r[0] for r in runs]
    assert len(names) == len(set(names))
    for name, _, prompt, _, method, params in runs:
        assert prompt.strip() and resolve_params(method, params)
    assert any(p.get("W") == 15 and p.get("N") == 5 and p.get("G") == 15 and not p.get("seed_pool_prompt")
               for *_, p in runs)
    shipped = {e["file"] for e in json.loads((ROOT / "assets" / "gallery" / "index.json").read_text())["runs"]}
    assert {f"{n}.json" for n in names} | {f"{n}.json" for n, _, _ in make_gallery.PAIR} == shipped
