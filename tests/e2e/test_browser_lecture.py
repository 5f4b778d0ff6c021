"""In a real browser (see test_browser.py for the set-up), issue 23: the Lecture in projector mode walked
through with the keyboard only, at 1400x1000 and 1920x1080: every slide of both walkthroughs fits
the window (no element below the fold or past the right edge, nothing to scroll), token cells of at
least 24 px, the keys a presenter's clicker sends step forward and back, auto-advance steps on its
own; and /jacobi serves the Jacobi page.

Screenshots: every slide in screenshots/ (git ignores it); for the README, docs/img/
lecture_projector_1400x1000.png (a Jacobi fast-forward) and lecture_projector_1920x1080.png (a
lookahead candidate verifying).
"""

from __future__ import annotations

import sys

import pytest

from tests.e2e.test_browser import (ROOT, OTHER_IMG, README_IMG, assert_healthy, goto, page,  # noqa: F401
                                    pytestmark, server, wait_idle)

SIZES = [(1400, 1000), (1920, 1080)]

# elements of the page (not in iframes) that reach below or right of the window
OUTSIDE = """() => {
  const H = window.innerHeight, W = window.innerWidth, bad = [];
  for (const el of document.querySelectorAll('[data-testid="stMain"] *')) {
    const r = el.getBoundingClientRect();
    if (r.width < 1 || r.height < 1) continue;
    const s = getComputedStyle(el);
    if (s.visibility === 'hidden' || s.display === 'none') continue;
    if (r.bottom > H + 1 || r.right > W + 1) bad.push(`${el.tagName}.${el.className.baseVal ?? el.className} ${Math.round(r.right)}x${Math.round(r.bottom)}`);
  }
  return bad.slice(0, 20);
}"""
# the scrollable main area: how far it could scroll
SCROLL = """() => { const m = document.querySelector('[data-testid="stMain"]');
  return Math.max(m.scrollHeight - m.clientHeight, document.documentElement.scrollHeight - window.innerHeight); }"""
# text of a chart drawn outside its chart (a title lifted above the top, a legend past the edge)
CLIPPED = """() => [...document.querySelectorAll('.js-plotly-plot')].flatMap(p => {
  const box = p.querySelector('.main-svg').getBoundingClientRect();
  return [...p.querySelectorAll('.gtitle, .legendtext, .annotation-text')].filter(t => {
    const r = t.getBoundingClientRect();
    return r.width > 0 && (r.top < box.top - 1 || r.bottom > box.bottom + 1 || r.right > box.right + 1);
  }).map(t => t.textContent.slice(0, 40));
})"""
# the smallest token cell drawn (px): a mask slide's heatmap cells (the plot's side over its cells), else the
# smallest square marker (the halo rings are larger; the position view's diagonals are lines, no points)
MIN_CELL = """() => { const p = document.querySelector('.js-plotly-plot'), d = p._fullData || [], L = p._fullLayout;
  if (d.length && d[0].type === 'heatmap') return Math.min(L.xaxis._length, L.yaxis._length) / d[0].z.length - 1;
  const ps = [...p.querySelectorAll('.scatterlayer .trace .point')];
  return ps.length ? Math.min(...ps.map(p => p.getBoundingClientRect().width)) : 0; }"""


def walkthroughs():
    sys.path.insert(0, str(ROOT))
    from decoding.trace import Trace
    from viz import lecture
    return {kind: lecture.lecture(Trace.load(str(ROOT / "assets" / f"example_{kind}.json")))
            for kind in ("jacobi", "lookahead", "suffix")}


def step_text(pg) -> str:
    return pg.locator('[data-testid="stProgress"]').first.inner_text()


def press(pg, key: str, expect: str) -> None:
    pg.locator("body").press(key) if key != "Space" else pg.keyboard.press("Space")
    pg.get_by_text(expect, exact=True).first.wait_for(timeout=30_000)
    wait_idle(pg)


def test_jacobi_is_served_at_slash_and_slash_jacobi(page, server):
    pg = page
    for path in ("/jacobi", "/"):
        pg.goto(server + path)
        wait_idle(pg)
        pg.wait_for_selector('h1:has-text("Jacobi decoding")')
        assert pg.get_by_text("Page not found", exact=False).count() == 0
        assert_healthy(pg)


@pytest.mark.parametrize("size", SIZES, ids=[f"{w}x{h}" for w, h in SIZES])
def test_projector_lecture_fits_and_runs_from_the_keyboard(page, server, size):
    w, h = size
    walks = walkthroughs()
    pg = page
    pg.set_viewport_size({"width": w, "height": h})
    pg.goto(server + "/lecture")
    wait_idle(pg)
    pg.wait_for_selector('h1:has-text("Lecture")')
    pg.get_by_text("Shipped example", exact=True).first.click()
    wait_idle(pg)
    pg.get_by_text("Projector mode", exact=True).first.click()
    wait_idle(pg)
    assert pg.locator('[data-testid="stSidebar"]').first.is_hidden()
    for kind, label in (("jacobi", "Jacobi decoding"), ("lookahead", "Lookahead decoding"), ("suffix", "Suffix drafting")):
        steps = walks[kind]
        n = len(steps)
        pg.get_by_role("button", name="Setup").click()
        pg.locator('[data-testid="stRadio"]').get_by_text(label, exact=True).first.click()  # not the nav link
        wait_idle(pg)
        pg.keyboard.press("Escape")  # close the popover
        pg.evaluate("document.activeElement && document.activeElement.blur()")  # keys go to the page
        wait_idle(pg)
        pg.get_by_text(f"Step 1 of {n}", exact=True).first.wait_for()
        keys = ["PageDown", "Space", "ArrowRight", "ArrowDown"]
        for i in range(n):
            assert_healthy(pg)
            pg.screenshot(path=str(OTHER_IMG / f"lecture_projector_{w}x{h}_{kind}_{i + 1:02d}.png"))
            assert steps[i].title in pg.locator('[data-testid="lecture-text"]').inner_text()
            assert pg.evaluate(OUTSIDE) == [], f"{kind} step {i + 1} at {w}x{h}: below the fold"
            assert pg.evaluate(SCROLL) <= 1, f"{kind} step {i + 1} at {w}x{h}: the page scrolls"
            assert pg.evaluate(CLIPPED) == [], f"{kind} step {i + 1} at {w}x{h}: text cut at the chart's edge"
            cell = pg.evaluate(MIN_CELL)
            assert cell >= 24, f"{kind} step {i + 1}: cells of {cell:.0f} px"
            if kind == "jacobi" and w == 1400 and steps[i].title.startswith("Fast-forward"):
                pg.screenshot(path=str(README_IMG / "lecture_projector_1400x1000.png"))
            if kind == "lookahead" and w == 1920 and "verifies" in steps[i].title:
                pg.screenshot(path=str(README_IMG / "lecture_projector_1920x1080.png"))
            if i < n - 1:  # the keys a clicker or a keyboard sends, in turn
                press(pg, keys[i % len(keys)], f"Step {i + 2} of {n}")
        # and back: PageUp, the left and the up arrow
        for j, key in enumerate(["PageUp", "ArrowLeft", "ArrowUp"]):
            press(pg, key, f"Step {n - 1 - j} of {n}")
    # auto-advance: one step every 3 s, on its own
    pg.get_by_role("button", name="Setup").click()
    pg.get_by_text("Jacobi decoding", exact=True).first.click()
    wait_idle(pg)
    pg.keyboard.press("Escape")
    start = step_text(pg)
    pg.locator('[data-testid="stSelectbox"]').filter(has_text="auto-advance").first.click()
    pg.get_by_text("auto-advance: 3 s per step", exact=True).first.click()
    pg.wait_for_timeout(11_000)  # 3 s per step, plus each rerun
    wait_idle(pg)
    later = step_text(pg)
    assert int(later.split()[1]) >= int(start.split()[1]) + 2, (start, later)
    pg.locator('[data-testid="stSelectbox"]').filter(has_text="auto-advance").first.click()
    pg.get_by_text("auto-advance: off", exact=True).first.click()
    wait_idle(pg)
    pg.get_by_text("Projector mode", exact=True).first.click()  # back to the page with its sidebar
    wait_idle(pg)
    assert pg.locator('[data-testid="stSidebar"]').first.is_visible()
    pg.set_viewport_size({"width": 1400, "height": 1000})
