"""In a real browser (see test_browser.py for the set-up): the teaching views of issue 11 render and
animate, with screenshots for the README (docs/img):

- jacobi_fast_forward.png: the Jacobi block at an iteration whose forward fast-forwarded tokens
  (yellow), the commits outlined;
- lookahead_positions.png: the lookahead window in position space (harvested n-grams as diagonals);
- lecture_fixed_point.png: the lecture's opening slide (Jacobi as fixed-point iteration);
- paper_preset.png: the sidebar after the paper-settings preset;
- benchmarks.png: the per-category tokens/step and speedup, the papers' figures marked;
- cllm_objective.png: CLLM's training objective on a real trajectory.
"""

from __future__ import annotations

import sys

from tests.e2e.test_browser import (ROOT, README_IMG, assert_healthy, goto, page, play_changes_picture,  # noqa: F401
                                    pytestmark, seek, server, wait_idle)


def frames() -> tuple[str, str]:
    sys.path.insert(0, str(ROOT))
    from decoding.analysis import jacobi_cell_states
    from decoding.trace import Trace
    j = Trace.load(str(ROOT / "assets" / "example_jacobi.json"))
    jf = next(str(k) for k, row in enumerate(jacobi_cell_states(j, 0)) if "fast_forward" in row)
    la = Trace.load(str(ROOT / "assets" / "example_lookahead.json"))
    lf = next(str(i) for i, s in enumerate(la.steps)
              if s.record and s.record.harvested and s.record.chosen >= 0 and s.record.matched[s.record.chosen] >= 2)
    return jf, lf


def test_teaching_views_render(page):
    jf, lf = frames()
    pg = page
    pg.set_viewport_size({"width": 1400, "height": 1100})
    wait_idle(pg)
    pg.wait_for_selector('h1:has-text("Jacobi")')  # the default page
    assert_healthy(pg)
    play_changes_picture(pg)
    seek(pg, jf)
    chart = pg.locator(".js-plotly-plot").first
    assert "fast-forwarded" in chart.locator(".gtitle").text_content()
    assert pg.get_by_text("CLLM's definition", exact=False).count() > 0  # both definitions in one sentence
    chart.screenshot(path=str(README_IMG / "jacobi_fast_forward.png"))

    goto(pg, "Lookahead")
    assert_healthy(pg)
    assert pg.get_by_text("This trace's pool was fed by the window and by", exact=False).count() == 1
    chart = pg.locator(".js-plotly-plot").first
    assert chart.locator(".xtick text").filter(has_text="t+1").count() > 0  # position space by default
    play_changes_picture(pg)
    seek(pg, lf)
    assert chart.locator(".scatterlayer .trace").first.locator("path.js-line").count() > 0  # the diagonals
    chart.screenshot(path=str(README_IMG / "lookahead_positions.png"))

    goto(pg, "Lecture")
    assert_healthy(pg)
    pg.get_by_text("Step 1 of", exact=False).first.wait_for()
    assert "Decoding as solving equations" in pg.locator('[data-testid="lecture-text"]').inner_text()
    pg.screenshot(path=str(README_IMG / "lecture_fixed_point.png"), full_page=True)

    pg.locator('[data-testid="stSidebar"] button').filter(has_text="Paper settings").first.click()
    wait_idle(pg)
    w = pg.locator('[data-testid="stSidebar"] input[aria-label="W (window columns)"]')
    assert w.input_value() == "15"
    pg.mouse.move(900, 600)  # no tooltip over the sidebar
    pg.keyboard.press("Escape")
    pg.locator('[data-testid="stSidebar"] input[aria-label="G (max candidates)"]').scroll_into_view_if_needed()
    pg.wait_for_timeout(800)
    pg.locator('[data-testid="stSidebar"]').screenshot(path=str(README_IMG / "paper_preset.png"))


def test_benchmarks_and_cllm_objective_render(page):
    pg = page
    pg.set_viewport_size({"width": 1400, "height": 1800})
    wait_idle(pg)
    goto(pg, "Benchmarks")
    assert_healthy(pg)
    assert pg.get_by_text("not measured here", exact=False).count() > 0
    pg.wait_for_function("document.querySelectorAll('.js-plotly-plot').length >= 2")
    assert pg.locator(".js-plotly-plot").nth(1).locator(".annotation-text").filter(has_text="lookahead paper").count() > 0
    pg.screenshot(path=str(README_IMG / "benchmarks.png"))

    goto(pg, "CLLM")
    assert_healthy(pg)
    pg.evaluate("window.scrollTo(0, document.body.scrollHeight)")
    pg.mouse.wheel(0, 8000)
    pg.wait_for_function("document.querySelectorAll('.js-plotly-plot').length >= 5")  # the campaign curve is the 4th
    chart = pg.locator(".js-plotly-plot").filter(has=pg.locator(".gtitle", has_text="The CLLM objective"))
    assert chart.count() == 1
    chart.scroll_into_view_if_needed()
    assert chart.locator(".annotation-text").filter(has_text="AR loss").count() == 1
    chart.screenshot(path=str(README_IMG / "cllm_objective.png"))
    pg.set_viewport_size({"width": 1400, "height": 1000})


def test_lookahead_step_inspector(page):
    """Issue 23, item 3: one step control drives the window (position view), the current key's pool
    entries and the step's real mask; all three draw cells, and +1 moves them together. Screenshot:
    docs/img/lookahead_inspector.png."""
    sys.path.insert(0, str(ROOT))
    from decoding.trace import Trace
    from viz import lookahead
    t = Trace.load(str(ROOT / "assets" / "example_lookahead.json"))
    start = lookahead.telling_step(t)
    nxt = lookahead.lookahead_steps(t)[lookahead.lookahead_steps(t).index(start) + 1]
    pg = page
    pg.set_viewport_size({"width": 1400, "height": 1500})
    wait_idle(pg)
    goto(pg, "Lookahead")
    assert_healthy(pg)
    head = pg.get_by_text("One step, everything at once", exact=True).first
    head.scroll_into_view_if_needed()
    wait_idle(pg)
    charts = pg.locator(".js-plotly-plot")

    def inspector(step: int):
        """The inspector's three charts at ``step``: found by their titles, not their places."""
        by = {}
        for i in range(charts.count()):
            title = charts.nth(i).locator(".gtitle").first.text_content() if charts.nth(i).locator(".gtitle").count() else ""
            for name, mark in (("still", f"Step {step} · current"), ("entries", f"Pool before step {step}:"),
                               ("mask", f"Step {step}'s attention mask")):
                if title.startswith(mark):
                    by[name] = charts.nth(i)
        assert set(by) == {"still", "entries", "mask"}, by.keys()
        return by

    got = inspector(start)
    for name in ("still", "entries"):  # cells drawn, not an empty frame
        assert got[name].locator(".scatterlayer .trace .point").count() > 3
    assert got["mask"].locator(".hm, .heatmaplayer image").count() > 0
    ticks = got["mask"].locator(".ytick text").all_text_contents()
    assert ticks[0].startswith("cur ") and any(x.startswith("g1t1 ") for x in ticks)  # labelled with the tokens fed
    box = head.bounding_box()
    pg.screenshot(path=str(README_IMG / "lookahead_inspector.png"),
                  clip={"x": 300, "y": max(0, box["y"] - 10), "width": 1100, "height": 1500 - max(0, box["y"] - 10)})
    pg.get_by_role("button", name="▶").first.click()
    wait_idle(pg)
    inspector(nxt)  # all three moved to the next step
