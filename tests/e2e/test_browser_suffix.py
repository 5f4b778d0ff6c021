"""End to end in a real browser: a live suffix-drafting run (bundled model, 48 tokens) from the
sidebar, on a prompt whose answer copies it, shown on its page (the match in the text it came from,
the draft tree); saves docs/img/suffix.png for the README. Same fixtures as test_browser.py."""

from __future__ import annotations

from tests.e2e.test_browser import (README_IMG, assert_healthy, goto, page, pytestmark, server,  # noqa: F401
                                    wait_idle)

PROMPT = ("Repeat this list exactly, then add one more line: apples 3, pears 5, plums 7, figs 9, "
          "apples 3, pears 5, plums 7, figs 9.")


def test_suffix_live_run_and_page(page):  # noqa: F811
    pg = page
    pg.set_viewport_size({"width": 1400, "height": 1800})
    wait_idle(pg)
    goto(pg, "Suffix drafting")
    assert_healthy(pg, charts=False)
    side = pg.locator('[data-testid="stSidebar"]')
    side.locator('[data-testid="stSelectbox"]').filter(has_text="Method").first.click()
    pg.get_by_role("option", name="Suffix drafting").click()
    wait_idle(pg)
    side.get_by_role("textbox").first.fill(PROMPT)
    box = pg.get_by_role("spinbutton", name="Max new tokens")
    box.fill("48")
    box.press("Enter")
    wait_idle(pg)
    side.locator("button").filter(has_text="Run").first.click()
    pg.wait_for_timeout(500)
    wait_idle(pg, timeout_s=300)
    assert_healthy(pg)
    assert pg.get_by_text("steps drafted from a suffix match", exact=False).count() > 0
    assert pg.locator(".js-plotly-plot").count() >= 1  # the draft tree
    tree = pg.locator(".js-plotly-plot").first
    assert tree.locator("g.trace").count() >= 1, "the draft tree figure draws its nodes"
    pg.screenshot(path=str(README_IMG / "suffix.png"), full_page=False)
