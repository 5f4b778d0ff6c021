"""End to end in a real browser: a live Token Recycling run (bundled model, 48 tokens) from the
sidebar, shown on its page (the draft-tree animation plays; the matrix rows render); saves
docs/img/recycling.png for the README. Same server and browser fixtures as test_browser.py."""

from __future__ import annotations

from tests.e2e.test_browser import (README_IMG, assert_healthy, goto, page, play_changes_picture,  # noqa: F401
                                    pytestmark, server, wait_idle)


def test_token_recycling_live_run_and_page(page):  # noqa: F811
    pg = page
    pg.set_viewport_size({"width": 1400, "height": 1800})
    wait_idle(pg)
    goto(pg, "Token Recycling")
    assert_healthy(pg, charts=False)
    side = pg.locator('[data-testid="stSidebar"]')
    side.locator('[data-testid="stSelectbox"]').filter(has_text="Method").first.click()
    pg.get_by_role("option", name="Token Recycling").click()
    wait_idle(pg)
    box = pg.get_by_role("spinbutton", name="Max new tokens")
    box.fill("48")
    box.press("Enter")
    wait_idle(pg)
    side.locator("button").filter(has_text="Run").first.click()
    pg.wait_for_timeout(500)
    wait_idle(pg, timeout_s=300)
    assert_healthy(pg)
    assert pg.get_by_text("steps fed a draft tree", exact=False).count() > 0
    assert pg.locator(".js-plotly-plot").count() >= 2  # the tree and the matrix rows
    play_changes_picture(pg)
    pg.screenshot(path=str(README_IMG / "recycling.png"), full_page=False)
