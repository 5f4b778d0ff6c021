"""End to end: the CLLM page in a real browser (the same server and Chromium as test_browser.py).

Opens the page on the shipped base / CLLM traces, checks the side-by-side animation moves when
Play is pressed, that the training curves are drawn, and that no exception shows.
"""

from __future__ import annotations

from tests.e2e.test_browser import (OTHER_IMG, assert_healthy, goto, page, play_changes_picture,  # noqa: F401
                                    pytestmark, server, wait_idle)


def test_cllm_page_plays_both_trajectories(page):  # noqa: F811
    pg = page
    wait_idle(pg)
    pg.wait_for_selector('h1:has-text("Jacobi")')
    goto(pg, "CLLM")
    assert pg.locator('[data-testid="stSidebar"]').get_by_text("Prompt", exact=True).count() > 0  # app.py's sidebar
    assert_healthy(pg)
    assert pg.get_by_text("shipped traces", exact=False).count() > 0
    after = play_changes_picture(pg)
    assert after
    pg.evaluate("window.scrollTo(0, document.body.scrollHeight)")
    pg.mouse.wheel(0, 5000)
    pg.wait_for_function("document.querySelectorAll('.js-plotly-plot').length >= 3")
    assert pg.get_by_text("Training:", exact=False).count() > 0
    pg.screenshot(path=str(OTHER_IMG / "cllm.png"), full_page=True)
