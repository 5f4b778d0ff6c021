"""End to end in a real browser: `streamlit run app.py` driven by headless Chromium (Playwright).

Visits every page, checks each shows a Plotly chart and no exception, presses Play on the Jacobi
and Lookahead animations and checks the picture changed, runs one short live decode with the
bundled model, and saves screenshots (docs/img/jacobi.png and docs/img/lookahead.png for the
README; the others go to screenshots/, which git ignores).

Needs Chromium at /usr/bin/chromium (Debian package `chromium`; or set PDL_CHROMIUM) and the
`playwright` Python package (its bundled browsers are not used). Skipped when either is missing
or PDL_SKIP_E2E=1.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
CHROMIUM = os.environ.get("PDL_CHROMIUM", "/usr/bin/chromium")
ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-background-networking",
        "--disable-component-update", "--disable-sync"]
README_IMG = ROOT / "docs" / "img"
OTHER_IMG = ROOT / "screenshots"

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.slow,  # a Streamlit server and a browser per module: minutes, not for the fast tier
    pytest.mark.skipif(os.environ.get("PDL_SKIP_E2E") == "1", reason="PDL_SKIP_E2E=1"),
    pytest.mark.skipif(not (os.path.exists(CHROMIUM) or shutil.which(CHROMIUM)), reason=f"no Chromium at {CHROMIUM}"),
]
sync_api = pytest.importorskip("playwright.sync_api")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def server():
    port = free_port()
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "STREAMLIT_BROWSER_GATHER_USAGE_STATS": "false"}
    log = open(ROOT / "screenshots" / "streamlit.log", "w") if (ROOT / "screenshots").is_dir() else subprocess.DEVNULL
    proc = subprocess.Popen(
        [sys.executable, "-m", "streamlit", "run", "app.py", "--server.headless", "true", "--server.port", str(port),
         "--server.address", "127.0.0.1", "--server.fileWatcherType", "none", "--server.runOnSave", "false",
         "--browser.gatherUsageStats", "false"],
        cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.time() + 60
        while True:
            try:
                if urllib.request.urlopen(url + "/_stcore/health", timeout=2).read().strip() == b"ok":
                    break
            except OSError:
                pass
            if proc.poll() is not None or time.time() > deadline:
                pytest.fail(f"streamlit did not start (exit code {proc.poll()})")
            time.sleep(0.5)
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()


@pytest.fixture(scope="module")
def page(server):
    OTHER_IMG.mkdir(exist_ok=True)
    README_IMG.mkdir(parents=True, exist_ok=True)
    with sync_api.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, headless=True, args=ARGS)
        pg = browser.new_page(viewport={"width": 1400, "height": 1000})
        pg.set_default_timeout(60_000)
        pg.goto(server)
        yield pg
        browser.close()


def wait_idle(pg, timeout_s: float = 90) -> None:
    """Wait until the app has rendered and no script run is in progress for a moment."""
    pg.wait_for_selector('[data-testid="stApp"]')
    deadline = time.time() + timeout_s
    quiet = 0
    while time.time() < deadline:
        running = pg.locator('[data-testid="stStatusWidget"]').filter(has_text="Running").count()
        stale = pg.locator('[data-stale="true"]').count()
        quiet = quiet + 1 if not running and not stale else 0
        if quiet >= 4:
            return
        pg.wait_for_timeout(250)
    raise AssertionError("the app did not become idle")


def goto(pg, title: str) -> None:
    pg.locator('[data-testid="stSidebarNav"] a').filter(has_text=title).first.click()
    pg.wait_for_timeout(300)
    wait_idle(pg)
    pg.wait_for_selector(f'h1:has-text("{title}")')


def assert_healthy(pg, charts: bool = True) -> None:
    assert pg.locator('[data-testid="stException"]').count() == 0, pg.locator('[data-testid="stException"]').first.inner_text()
    if charts:
        pg.wait_for_selector(".js-plotly-plot .main-svg")
        assert pg.locator(".js-plotly-plot").count() >= 1
        # a chart with something drawn in it, not an empty frame
        assert pg.locator(".js-plotly-plot .scatterlayer .trace .point, .js-plotly-plot .heatmaplayer image, "
                          ".js-plotly-plot .barlayer .point").count() > 0


def play_changes_picture(pg) -> bytes:
    chart = pg.locator(".js-plotly-plot").first
    chart.scroll_into_view_if_needed()
    before = chart.screenshot()
    title0 = chart.locator(".gtitle").text_content()
    chart.locator(".updatemenu-button").filter(has_text="Play").first.click()
    pg.wait_for_timeout(2600)
    chart.locator(".updatemenu-button").filter(has_text="Pause").first.click()
    pg.wait_for_timeout(300)
    after = chart.screenshot()
    assert after != before, "pressing Play did not change the picture"
    assert chart.locator(".gtitle").text_content() != title0
    return after


def seek(pg, label: str) -> None:
    """Move the first chart's animation slider to the step labelled ``label`` (a number): click
    the rail where that step sits, found from two visible step labels (plotly hides some)."""
    chart = pg.locator(".js-plotly-plot").first
    labs = chart.locator(".slider-group .slider-label")
    pts = []
    for i in range(labs.count()):
        t, bb = labs.nth(i).text_content(), labs.nth(i).bounding_box()
        if t and t.strip().isdigit() and bb:
            pts.append((int(t), bb["x"] + bb["width"] / 2))
    rail = chart.locator(".slider-group .slider-rail-touch-rect").first.bounding_box()
    if len(pts) < 2 or rail is None:
        return
    (a, xa), (b, xb) = pts[0], pts[-1]
    x = xa + (int(label) - a) * (xb - xa) / (b - a)
    pg.mouse.click(x, rail["y"] + rail["height"] / 2)
    pg.wait_for_timeout(500)


def readme_frames() -> tuple[str, str]:
    """Frames worth a README picture: a Jacobi iteration that fast-forwards (block 0), a lookahead
    step that accepts the most pool tokens from the most candidates."""
    sys.path.insert(0, str(ROOT))
    from decoding.trace import Trace
    from decoding.analysis import jacobi_cell_states
    j = Trace.load(str(ROOT / "assets" / "example_jacobi.json"))
    # frame k = the block after iteration k (slider label k): the first one with fast-forwarded tokens
    jf = next((str(k) for k, row in enumerate(jacobi_cell_states(j, 0)) if "fast_forward" in row), "1")
    la = Trace.load(str(ROOT / "assets" / "example_lookahead.json"))
    best = max((s.record.matched[s.record.chosen] if s.record.chosen >= 0 else 0, len(s.record.candidates), i)
               for i, s in enumerate(la.steps) if s.record)
    return jf, str(best[2])


def test_pages_play_and_live_run(page):
    jacobi_frame, lookahead_frame = readme_frames()
    pg = page
    wait_idle(pg)
    # Jacobi (the default page) opens on the example trace
    pg.wait_for_selector('h1:has-text("Jacobi")')
    assert_healthy(pg)
    assert pg.get_by_text("example trace", exact=False).count() > 0
    play_changes_picture(pg)
    seek(pg, jacobi_frame)
    pg.screenshot(path=str(README_IMG / "jacobi.png"))

    goto(pg, "Lookahead")
    assert_healthy(pg)
    pg.evaluate("window.scrollTo(0, document.body.scrollHeight)")  # charts below the fold render lazily
    pg.mouse.wheel(0, 5000)
    pg.wait_for_function("document.querySelectorAll('.js-plotly-plot').length >= 3")  # window, pool graph, mask
    pg.evaluate("window.scrollTo(0, 0)")
    play_changes_picture(pg)
    seek(pg, lookahead_frame)
    pg.locator("h1").first.scroll_into_view_if_needed()
    pg.screenshot(path=str(README_IMG / "lookahead.png"))
    pg.screenshot(path=str(OTHER_IMG / "lookahead_full.png"), full_page=True)

    goto(pg, "Compare")
    assert_healthy(pg)
    pg.screenshot(path=str(OTHER_IMG / "compare.png"), full_page=True)

    goto(pg, "Traces")
    assert_healthy(pg, charts=False)
    assert pg.get_by_role("button", name="Download JSON").count() == 1
    pg.screenshot(path=str(OTHER_IMG / "traces.png"))

    # one short live decode with the bundled model (Lookahead, 12 new tokens), on the Lookahead page
    goto(pg, "Lookahead")
    box = pg.get_by_role("spinbutton", name="Max new tokens")
    box.fill("12")
    box.press("Enter")
    wait_idle(pg)
    pg.locator('[data-testid="stSidebar"] button').filter(has_text="Run").first.click()
    pg.wait_for_timeout(500)
    wait_idle(pg, timeout_s=300)  # the first load of the bundled model may convert it (~25 s on 2 cores)
    assert_healthy(pg)
    assert pg.get_by_text("live run (finished", exact=False).count() > 0
    assert pg.get_by_text("done: 12 tokens", exact=False).count() == 1
    assert pg.locator('[data-testid="stAlertContentError"]').count() == 0
    pg.screenshot(path=str(OTHER_IMG / "live_run.png"), full_page=True)


def test_explain_and_lecture_walkthrough(page):
    """The Explain page shows the account of an example trace; the Lecture mode walks through every
    step of both walkthroughs (Next), with a screenshot of each step, then back, then large type."""
    sys.path.insert(0, str(ROOT))
    from decoding.trace import Trace
    from viz import lecture

    pg = page
    pg.set_viewport_size({"width": 1400, "height": 2400})  # tall: whole figures in the screenshots
    wait_idle(pg)
    goto(pg, "Explain")
    assert_healthy(pg)
    if pg.get_by_role("button", name="Measure the step-cost curve").count():  # no shipped curve
        pytest.fail("the Explain page should open on the shipped step-cost curve")
    assert pg.get_by_text("each step cost", exact=False).count() > 0
    pg.evaluate("window.scrollTo(0, document.body.scrollHeight)")
    pg.mouse.wheel(0, 8000)
    pg.wait_for_function("document.querySelectorAll('.js-plotly-plot').length >= 4")
    pg.evaluate("window.scrollTo(0, 0)")
    assert_healthy(pg)
    pg.screenshot(path=str(OTHER_IMG / "explain.png"), full_page=True)
    charts = pg.locator(".js-plotly-plot")
    for i in range(charts.count()):  # the page scrolls inside Streamlit's container: one picture per chart
        charts.nth(i).scroll_into_view_if_needed()
        charts.nth(i).screenshot(path=str(OTHER_IMG / f"explain_chart_{i + 1}.png"))

    goto(pg, "Lecture")
    assert_healthy(pg)
    pg.get_by_text("Shipped example", exact=True).first.click()  # the live run above replaced the current trace
    wait_idle(pg)
    for kind, label in (("jacobi", "Jacobi decoding"), ("lookahead", "Lookahead decoding")):
        pg.get_by_text(label, exact=True).first.click()
        wait_idle(pg)
        steps = lecture.lecture(Trace.load(str(ROOT / "assets" / f"example_{kind}.json")))
        n = len(steps)
        texts = []
        for i in range(n):
            pg.get_by_text(f"Step {i + 1} of {n}", exact=True).wait_for()
            assert_healthy(pg)
            # the highlight frames are drawn over the cells
            assert pg.locator(".js-plotly-plot .layer-above .shapelayer path").count() == len(steps[i].boxes)
            texts.append(pg.locator('[data-testid="lecture-text"]').inner_text())
            pg.screenshot(path=str(OTHER_IMG / f"lecture_{kind}_{i + 1:02d}.png"), full_page=True)
            chart = pg.locator(".js-plotly-plot").first
            chart.scroll_into_view_if_needed()
            chart.screenshot(path=str(OTHER_IMG / f"lecture_{kind}_{i + 1:02d}_figure.png"))
            pg.evaluate("window.scrollTo(0, 0)")
            pg.locator("h1").first.scroll_into_view_if_needed()
            nxt = pg.get_by_role("button", name="Next ▶")
            if i < n - 1:
                nxt.click()
                wait_idle(pg)
            else:
                assert nxt.is_disabled()
        assert len(set(texts)) == n, "every step should say something new"
        pg.get_by_role("button", name="◀ Back").click()
        wait_idle(pg)
        pg.get_by_text(f"Step {n - 1} of {n}", exact=True).wait_for()
    # projector mode: large type
    pg.get_by_text("Projector mode", exact=True).click()
    wait_idle(pg)
    assert_healthy(pg)
    size = pg.locator('[data-testid="lecture-text"]').evaluate("e => parseFloat(getComputedStyle(e).fontSize)")
    assert size >= 22  # and the slide fits the window: tests/e2e/test_browser_lecture.py
    pg.screenshot(path=str(OTHER_IMG / "lecture_projector.png"), full_page=True)
    pg.locator(".js-plotly-plot").first.screenshot(path=str(OTHER_IMG / "lecture_projector_figure.png"))
    pg.set_viewport_size({"width": 1400, "height": 1000})
