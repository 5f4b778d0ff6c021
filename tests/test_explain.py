"""Explain and Lecture: figure builders (data checked, not only drawn) and AppTest runs of the pages.

The pages read a cost curve from the cache folder (PDL_CACHE) or the shipped asset; these tests
point PDL_CACHE at a temporary folder holding a hand-made curve for the bundled model on CPU.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from decoding.perf.account import account
from decoding.perf.costs import CostCurve, curve_path, find_curve
from decoding import analysis
from decoding.trace import Trace
from viz import explain, lecture, style
from viz_traces import ar_trace, jacobi_ff_trace, jacobi_trace, lookahead_trace

ROOT = Path(__file__).resolve().parent.parent
BUNDLED_ID = "SmolLM2-135M-Instruct (Q4_1 GGUF, bundled)"


def hand_curve(model_id="hand-made") -> CostCurve:
    return CostCurve(model_id, "cpu", "float32", 2, 256, [1, 2, 4, 8, 16, 32, 64],
                     [0.01, 0.018, 0.019, 0.02, 0.022, 0.028, 0.05], repeats=3, ar_overhead=0.02)


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("PDL_CACHE", str(tmp_path))
    c = hand_curve(BUNDLED_ID)
    c.save(curve_path(c.model_id, c.device, c.dtype, c.threads))
    return tmp_path


# ---- figures ----------------------------------------------------------------------------------------
def test_cost_curve_figure_plots_the_relative_curve_and_the_runs_steps():
    t = lookahead_trace()
    fig = explain.cost_curve_figure(hand_curve(), [s.fed for s in t.steps])
    assert fig.layout.xaxis.type == "log"
    assert list(fig.data[0].x) == [1, 2, 4, 8, 16, 32, 64]
    assert fig.data[0].y[0] == 1.0 and fig.data[0].y[-1] == pytest.approx(5.0)
    assert sorted(fig.data[1].x) == [3, 9] and list(fig.data[1].customdata) == [1, 1]
    assert "cpu" in fig.layout.title.text


def test_account_figure_bars_are_the_running_product():
    acc = account(lookahead_trace(), hand_curve(), ar_trace())
    fig = explain.account_figure(acc)
    names, ys = list(fig.data[0].x), list(fig.data[0].y)
    assert names == ["AR", "× tokens/step", "÷ step cost", "× overhead", "prefill", "predicted", "measured"]
    assert ys[0] == 1.0 and ys[1] == pytest.approx(acc.tokens_per_step)
    assert ys[2] == pytest.approx(acc.tokens_per_step / acc.step_cost)
    assert ys[3] == pytest.approx(acc.decode_speedup) and ys[5] == pytest.approx(acc.predicted)
    assert ys[6] == pytest.approx(acc.measured)


def test_missing_curve_gives_a_message_not_an_empty_chart():
    fig = explain.cost_curve_figure(None)
    assert fig.layout.annotations and "No step-cost curve" in fig.layout.annotations[0].text


def test_find_curve_prefers_the_cache_then_the_shipped_file(tmp_path, monkeypatch):
    monkeypatch.setenv("PDL_CACHE", str(tmp_path / "empty"))
    shipped = tmp_path / "shipped.json"
    hand_curve("m").save(shipped)
    c, where = find_curve("m", "cpu", "float32", (shipped,))
    assert "shipped" in where and c.model_id == "m"
    assert find_curve("other", "cpu", "float32", (shipped,)) is None
    monkeypatch.setenv("PDL_CACHE", str(tmp_path))
    mine = hand_curve("m")
    mine.context = 128
    mine.save(curve_path("m", "cpu", "float32", 1))
    c, where = find_curve("m", "cpu", "float32", (shipped,))
    assert "this machine" in where and c.context == 128


# ---- lecture ------------------------------------------------------------------------------------------
def test_jacobi_lecture_narrates_the_hand_made_block():
    steps = lecture.jacobi_lecture(jacobi_trace())
    titles = [s.title for s in steps]
    assert titles[:2] == ["Decoding as solving equations", "Guess a whole block at once"]
    assert "3 tokens at once" in steps[1].text
    st = next(s for s in steps if s.title.startswith("A stationary token"))
    assert st.frame == "1" and st.boxes == [(3, 3, 1, 1)]
    assert not any(s.title.startswith("Fast-forward") for s in steps)  # 13 is stationary, not fast-forwarded
    assert titles[-1] == "The block's fixed point"


def test_jacobi_lecture_fast_forward_at_the_forward_that_made_it():
    """Issue 11, error 2: the slide shows the state after iteration 1, whose forward made 11 12 13 right."""
    steps = lecture.jacobi_lecture(jacobi_ff_trace())
    ff = next(s for s in steps if s.title.startswith("Fast-forward"))
    assert ff.title == "Fast-forward at iteration 1" and ff.frame == "1" and ff.boxes == [(1, 3, 1, 1)]
    assert "made 3 consecutive tokens right" in ff.text and "Iteration 2 feeds them" in ff.text


def test_jacobi_narration_names_the_colours_drawn():
    """Issue 23, item 8: the narration called the vermillion "wrong" cells red (and fast-forwards
    orange after they changed colour). Every colour word in the Jacobi narration is the name of
    the state colour the figure draws for what it talks about."""
    from viz.jacobi import DEFINITIONS
    from viz.style import COLOUR_NAMES, JACOBI_STATES, colour_name

    names = {s: colour_name(c) for s, (c, _) in JACOBI_STATES.items()}
    words = set(COLOUR_NAMES.values()) | {"red", "amber", "orange", "purple"}
    t = Trace.load(str(ROOT / "assets" / "example_jacobi.json"))
    texts = [s.text for tr in (t, jacobi_trace(), jacobi_ff_trace()) for s in lecture.jacobi_lecture(tr)]
    said = {w for text in texts + [DEFINITIONS] for w in words if re.search(rf"\b{w}\b", text)}
    assert said and said <= set(names.values()) | {"black"}  # black: the commit outline
    guess = next(s for s in lecture.jacobi_lecture(t) if s.title == "Guess a whole block at once")
    assert f"({names['wrong']})" in guess.text and names["wrong"] == "vermillion"
    ff = next(s for s in lecture.jacobi_lecture(jacobi_ff_trace()) if s.title.startswith("Fast-forward"))
    assert f"({names['fast_forward']})" in ff.text and f"({names['new']})" in ff.text
    assert DEFINITIONS.startswith(f"Fast-forwarded ({names['fast_forward']},")


def test_jacobi_lecture_counts_come_from_the_analysis():
    """Issue 11, error 3: the fixed-point slide states the block's tokens, AR's forward passes for
    them and Jacobi's iterations as decoding.analysis.jacobi_counts has them (it said len(fixed
    point) - 1 forward passes for AR)."""
    for t in (jacobi_trace(), jacobi_ff_trace()):
        c = analysis.jacobi_counts(t)[0]
        last = lecture.jacobi_lecture(t)[-1]
        assert f"committed {c['tokens']} tokens; AR needs {c['tokens']} forward passes" in last.text
        assert f"Jacobi needed {c['iterations']} ({c['fast_forwarded']} fast-forwarded" in last.text
        opening = lecture.jacobi_lecture(t)[0]
        n = t.params["n"]
        assert f"solves {n} equations" in opening.text and f"at most {n} iterations" in opening.text
        assert max(x["tokens"] for x in analysis.jacobi_counts(t)) <= n


def test_lookahead_lecture_finds_the_harvested_ngram_that_verifies():
    t = lookahead_trace()
    steps = lecture.lookahead_lecture(t)
    v = next(s for s in steps if "verifies" in s.title)
    # (11 12 13) was added by step 0's ops and accepted at step 1: harvested 1 step ago
    assert v.frame == "1" and "1 step ago" in v.text and "(step 0)" in v.text


def test_lookahead_lecture_counts_come_from_the_trace():
    """Issue 11, error 3: the numbers in words are the ones the figures use: the window filled in
    the steps whose window has fewer than N - 1 levels, the steps that committed more than one token
    (Compare's histogram), the fed counts (Explain's cost figure)."""
    t = lookahead_trace()
    steps = lecture.lookahead_lecture(t)
    assert "fill during the first 1 step." in steps[0].text  # step 0 has 1 of 2 levels
    last = steps[-1].text
    hist = analysis.accepted_histogram(t)
    assert f"{sum(v for k, v in hist.items() if k > 1)} step committed more than one token" in last
    fed = [s.fed for s in t.steps]
    assert f"fed {min(fed)}–{max(fed)} tokens" in last


def test_lookahead_lecture_runs_forward_in_time_in_the_papers_order():
    """Issue 23, item 2: the walk never jumps back in time (a live run showed "Step 2: harvest", then
    "Step 1: verify"); at the step it follows: the pool's entries for the current token, the step's
    mask, then the verification, after the step that harvested the n-gram it verifies; the position
    view (the paper's picture) for the window."""
    from decoding.loop import decode
    from tiny import tiny_lm
    for t in (lookahead_trace(), Trace.load(str(ROOT / "assets" / "example_lookahead.json")),
              decode(tiny_lm("llama", 2), [3, 4, 5, 3, 4, 5, 3, 4, 6, 7, 3, 4, 5], "lookahead", {"W": 4, "N": 3, "G": 3}, 40)):
        steps = lecture.lookahead_lecture(t)
        frames = [int(s.frame) for s in steps]
        assert frames == sorted(frames), [(s.frame, s.title) for s in steps]
        kinds = [s.figure for s in steps]
        assert {"positions", "pool", "mask"} <= set(kinds) and kinds[0] == "positions"
        p = kinds.index("pool")
        assert kinds[p + 1] == "mask" and "verif" in steps[p + 2].title and steps[p].frame == steps[p + 2].frame
        h = next(s for s in steps if "diagonal" in s.title)
        if "will verify it" in h.text:  # the harvest of the n-gram the walk then verifies: before it
            assert int(h.frame) < int(steps[p].frame)
    example = lecture.lookahead_lecture(Trace.load(str(ROOT / "assets" / "example_lookahead.json")))
    assert "will verify it" in next(s for s in example if "diagonal" in s.title).text
    s = lecture.lookahead_lecture(lookahead_trace())  # step 1 verifies, then harvests (the window's update)
    assert [(x.frame, x.figure) for x in s] == [("0", "positions"), ("0", "positions"), ("1", "pool"), ("1", "mask"),
                                                ("1", "positions"), ("1", "positions"), ("1", "positions")]
    assert "verifies" in s[4].title and "diagonal" in s[5].title


def test_suffix_lecture_walks_match_tree_and_verification_in_time_order():
    """Issue 22, item 2: the Lecture knows suffix drafting: the match in its text (the suffix and
    its earlier occurrence framed), the draft tree scored by frequency, the verified branch framed,
    the fallback, the whole run; in time order, on the gallery's edit run (text that repeats)."""
    from viz import suffix
    from viz.recycling import tree_layout
    t = Trace.load(str(ROOT / "assets" / "gallery" / "edit_suffix.json"))
    steps = lecture.lecture(t)
    frames = [int(x.frame) for x in steps]
    assert frames == sorted(frames) and steps[-1].title == "The whole run"
    kinds = [x.figure for x in steps]
    assert kinds[0] == "suffix_match" and "suffix_tree" in kinds
    verify = next(x for x in steps if "verifies the tree" in x.title)
    si = int(verify.frame)
    r = next(s.record for s in t.steps if s.index == si)
    depth, y = tree_layout(r.parents)
    assert verify.boxes == [(depth[i], depth[i], y[i], y[i]) for i in r.path] and len(r.path) >= 2
    n_tok = len(next(s.tokens for s in t.steps if s.index == si))
    assert f"commits {n_tok} tokens" in verify.text
    match = steps[0]
    m0 = next(s.record for s in t.steps if s.index == int(match.frame))
    want = suffix.match_cells(t, int(match.frame), "suffix") + suffix.match_cells(t, int(match.frame), "earlier")
    assert match.boxes == want and sum(b[1] - b[0] + 1 for b in want) == 2 * m0.match  # the suffix and its twin
    assert f"{t.tokens_per_step:.2f} tokens per step" in steps[-1].text
    for x in steps:
        fig = lecture.lecture_figure(t, x)
        assert len(fig.layout.shapes) == len(x.boxes)
    assert lecture.lecture(Trace.load(str(ROOT / "assets" / "example_suffix.json")))  # the example: fallback mostly


def test_lecture_text_escapes_model_text():
    steps = lecture.jacobi_lecture(jacobi_trace()) + lecture.lookahead_lecture(lookahead_trace())
    html = " ".join(s.text for s in steps)
    assert "<b>" in html  # our own markup stays
    assert "<z>" not in html and "&lt;z&gt;" in html  # the model's does not
    assert lecture.tok("a*b_$x$") == "<code>a&#42;b&#95;&#36;x&#36;</code>"


def _cells(fig):
    """A still's token cells: the trace with text (the position view's first trace is its diagonals)."""
    return next(d for d in fig.data if d.type == "heatmap" or (d.text is not None and len(d.text)))


@pytest.mark.parametrize("method", ["jacobi", "lookahead", "lookahead_auto"])
def test_every_lecture_step_of_the_examples_draws_a_highlighted_still(method):
    t = Trace.load(str(ROOT / "assets" / f"example_{method}.json"))
    steps = lecture.lecture(t)
    assert 5 <= len(steps) <= 14
    for s in steps:
        fig = lecture.lecture_figure(t, s)
        assert not fig.frames and not fig.layout.sliders
        assert len(_cells(fig).x) > 0  # cells drawn
        assert len(fig.layout.shapes) == len(s.boxes)
    for s in steps:  # projector mode: the screen's height, cells of at least MIN_CELL px, the title wrapped
        big = lecture.lecture_figure(t, s, large=True)
        assert big.layout.height <= style.PROJECTOR_HEIGHT and style.cell_px(big) >= style.MIN_CELL
        cells = _cells(big)
        assert cells.type == "heatmap" or cells.marker.size == style.cell_px(big)
        assert big.layout.font.size >= 14
        assert max(len(line) for line in big.layout.title.text.split("<br>")) <= 70


def test_wrap_title_breaks_at_separators_then_spaces():
    from viz.style import wrap_title
    assert wrap_title("short · title", 40) == "short · title"
    assert wrap_title("Step 48 · current 'x' · 4 candidates · accepted 2 from the pool", 30) == \
        "Step 48 · current 'x'<br>4 candidates<br>accepted 2 from the pool"
    assert wrap_title("one very long part without separators", 12) == "one very<br>long part<br>without<br>separators"


# ---- pages ----------------------------------------------------------------------------------------------
st_testing = pytest.importorskip("streamlit.testing.v1")


@pytest.fixture
def app(cache):
    return st_testing.AppTest.from_file(str(ROOT / "app.py"), default_timeout=60).run()


def test_explain_page_opens_on_the_example_traces(app):
    at = app
    at.switch_page("app_pages/explain.py").run()
    assert not at.exception, [e.value for e in at.exception]
    assert not at.error
    html = " ".join(m.value for m in at.markdown)
    assert re.search(r"tokens/step, each step cost [\d.]+ AR steps, \d+% overhead \(AR \d+%\): predicted [\d.]+x, measured [\d.]+x", html)
    specs = [json.loads(c.proto.spec) for c in at.get("plotly_chart")]
    titles = " ".join(s["layout"].get("title", {}).get("text", "") for s in specs)
    assert "Step cost: cpu" in titles and "factor by factor" in titles
    assert len(specs) >= 4  # account, curve, provenance, what-if
    # another trace: Jacobi
    sb = at.selectbox(key="explain_trace")
    sb.select(next(o for o in sb.options if o.startswith("Jacobi"))).run()
    assert not at.exception
    assert any("Jacobi" in m.value and "predicted" in m.value for m in at.markdown)


def test_explain_prices_the_run_in_a_gpu_regime(app):
    """Issue 23, item 5: a "GPU regime" toggle replays the run under a flat step cost (any step up to
    256 tokens costs one AR step): predicted = tokens per step over (1 + overhead share), no measured
    figure (nothing ran there); the what-if table is priced the same way."""
    from decoding.perf.costs import flat_curve
    c = CostCurve.load(ROOT / "assets" / "cost_curve_cpu.json")
    flat = flat_curve(c)
    assert flat.relative_cost(1) == flat.relative_cost(121) == flat.relative_cost(256) == 1.0
    assert "flat step cost" in flat.regime and c.relative_cost(121) > 3
    at = app
    at.switch_page("app_pages/explain.py").run()
    here = next(m.value for m in at.markdown if "predicted" in m.value and "tokens/step" in m.value)
    r = at.radio(key="explain_regime")
    r.set_value(next(o for o in r.options if o.startswith("a GPU-like flat cost"))).run()
    assert not at.exception, [e.value for e in at.exception]
    gpu = next(m.value for m in at.markdown if "predicted" in m.value and "tokens/step" in m.value)
    assert "each step cost 1.00 AR steps" in gpu and "measured" not in gpu.split("predicted")[1]
    pred = lambda x: float(re.search(r"predicted ([\d.]+)x", x).group(1))
    assert pred(gpu) > pred(here)  # the window's extra tokens are free there
    assert any("A what-if" in i.value for i in at.info)


def test_explain_page_without_a_curve_offers_to_measure(tmp_path, monkeypatch, app):
    monkeypatch.setenv("PDL_CACHE", str(tmp_path / "nothing"))
    monkeypatch.setattr("decoding.perf.costs.find_curve", lambda *a, **k: None)
    at = app
    at.switch_page("app_pages/explain.py").run()
    assert not at.exception
    assert at.button(key="explain_measure")
    assert any("No step-cost curve" in w.value for w in at.warning)


def test_lecture_page_walks_through_all_steps(app):
    at = app
    at.switch_page("app_pages/lecture.py").run()
    assert not at.exception and not at.error
    n = len(lecture.lecture(Trace.load(str(ROOT / "assets" / "example_jacobi.json"))))
    seen = set()
    for i in range(n):
        text = next(m.value for m in at.markdown if "lecture-text" in m.value)
        seen.add(text)
        assert f"Step {i + 1} of {n}" in at.get("progress")[0].proto.text
        assert json.loads(at.get("plotly_chart")[0].proto.spec)["layout"]["shapes"] is not None
        if i < n - 1:
            at.button(key="lecture_next").click().run()
            assert not at.exception
    assert len(seen) == n
    assert at.button(key="lecture_next").disabled
    at.button(key="lecture_back").click().run()
    assert f"Step {n - 1} of {n}" in at.get("progress")[0].proto.text
    at.radio(key="lecture_kind").set_value("Suffix drafting").run()
    assert not at.exception and "Step 1 of" in at.get("progress")[0].proto.text
    at.radio(key="lecture_kind").set_value("Lookahead decoding").run()
    assert "Step 1 of" in at.get("progress")[0].proto.text
    at.toggle(key="lecture_large").set_value(True).run()
    assert not at.exception
    assert "1.4rem" in next(m.value for m in at.markdown if "lecture-text" in m.value)
    assert any("stSidebar" in m.value and "display: none" in m.value for m in at.markdown)  # the slide gets the window
    spec = json.loads(at.get("plotly_chart")[0].proto.spec)
    assert spec["layout"]["height"] <= style.PROJECTOR_HEIGHT and spec["layout"]["meta"]["cell_px"] >= style.MIN_CELL


def test_the_shipped_curve_matches_the_example_traces():
    """The Explain page opens on the examples without measuring: assets/cost_curve_cpu.json is a
    measured curve of the model and device the examples were made with."""
    c = CostCurve.load(ROOT / "assets" / "cost_curve_cpu.json")
    t = Trace.load(str(ROOT / "assets" / "example_lookahead.json"))
    assert (c.model_id, c.device, c.dtype) == (t.model_id, t.device, t.dtype)
    assert c.ks[0] == 1 and c.ks[-1] >= 128 and c.relative_cost(c.ks[-1]) > 2
    assert (ROOT / "assets" / "cost_curve_cpu.json").stat().st_size < 5000
