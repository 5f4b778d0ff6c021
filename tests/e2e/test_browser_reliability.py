"""End to end, as a visitor would break it (issue 12): deep links on a fresh server, an idle server
that stays idle, no request leaving localhost.

The server here is started the way scripts/start starts it (no watcher or usage-stats flags), so
that `.streamlit/config.toml` is what decides; each test module gets its own fresh server.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
import urllib.parse
import urllib.request

import pytest

from tests.e2e.test_browser import ARGS, CHROMIUM, ROOT, assert_healthy, free_port, pytestmark, wait_idle  # noqa: F401

sync_api = pytest.importorskip("playwright.sync_api")


def start_server(*extra: str, env: dict | None = None):
    """`streamlit run app.py` as scripts/start runs it (plus a free port, headless); returns (proc, url)."""
    port = free_port()
    env = {**os.environ, "HF_HUB_OFFLINE": "1", **(env or {})}
    log = open(ROOT / "screenshots" / f"streamlit_{port}.log", "w") if (ROOT / "screenshots").is_dir() else subprocess.DEVNULL
    proc = subprocess.Popen(
        [sys.executable, "-m", "streamlit", "run", "app.py", "--browser.gatherUsageStats", "false",
         "--server.headless", "true", "--server.port", str(port), "--server.address", "127.0.0.1", *extra],
        cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    deadline = time.time() + 60
    while True:
        try:
            if urllib.request.urlopen(url + "/_stcore/health", timeout=2).read().strip() == b"ok":
                return proc, url
        except OSError:
            pass
        if proc.poll() is not None or time.time() > deadline:
            stop_server(proc)
            pytest.fail(f"streamlit did not start (exit code {proc.poll()})")
        time.sleep(0.5)


def stop_server(proc) -> None:
    proc.terminate()
    try:
        proc.wait(10)
    except subprocess.TimeoutExpired:
        proc.kill()


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process so far (Linux /proc)."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


@pytest.fixture(scope="module")
def fresh_server():
    proc, url = start_server()
    try:
        yield proc, url
    finally:
        stop_server(proc)


@pytest.fixture(scope="module")
def browser():
    with sync_api.sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, headless=True, args=ARGS)
        yield b
        b.close()


def new_page(browser, requests: list | None = None):
    pg = browser.new_page(viewport={"width": 1400, "height": 1000})
    pg.set_default_timeout(60_000)
    if requests is not None:
        pg.on("request", lambda r: requests.append(r.url))
    return pg


def test_deep_link_is_a_first_visit_on_a_fresh_server(fresh_server, browser):
    """Issue 12 item 4: /lookahead opened before anyone opened / shows the page with the shared
    sidebar (no legacy file-name navigation, no missing session state)."""
    _, url = fresh_server
    pg = new_page(browser)
    try:
        pg.goto(url + "/lookahead")
        wait_idle(pg)
        pg.wait_for_selector('h1:has-text("Lookahead decoding")')
        assert_healthy(pg)
        side = pg.locator('[data-testid="stSidebar"]')
        assert side.get_by_text("Prompt", exact=True).count() > 0, "the shared sidebar is missing"
        assert side.get_by_role("button", name="Run").count() == 1
        nav = pg.locator('[data-testid="stSidebarNav"] a')
        assert nav.filter(has_text="Explain").count() == 1  # app.py's navigation, not the page files
        # and a second deep link in a new session
        pg2 = new_page(browser)
        pg2.goto(url + "/explain")
        wait_idle(pg2)
        pg2.wait_for_selector('h1:has-text("Explain")')
        assert_healthy(pg2)
        pg2.close()
    finally:
        pg.close()


def test_pages_load_nothing_from_outside_localhost(fresh_server, browser):
    """Issue 12 item 8: every request the pages make (fonts, icons, scripts) goes to this server,
    so a lecture hall without network sees no difference."""
    _, url = fresh_server
    requests: list[str] = []
    pg = new_page(browser, requests)
    try:
        for path in ("", "/lookahead", "/compare", "/cllm", "/explain", "/lecture", "/traces"):
            pg.goto(url + path)
            wait_idle(pg)
            assert_healthy(pg, charts=path != "/traces")
    finally:
        pg.close()
    outside = sorted({u for u in requests if urllib.parse.urlsplit(u).hostname not in {"127.0.0.1", "localhost"}
                      and not u.startswith(("data:", "blob:"))})
    assert requests and not outside, outside[:10]


def test_idle_server_stays_idle(fresh_server, browser):
    """Issue 12 item 7: with a visitor on the page, the idle server uses almost no CPU (the default
    file watcher watched the repository with its .venv: inotify overflows, a core busy for minutes)."""
    proc, url = fresh_server
    pg = new_page(browser)
    try:
        pg.goto(url + "/")
        wait_idle(pg)
        time.sleep(3)  # let the first render's work settle
        c0, t0 = cpu_seconds(proc.pid), time.time()
        time.sleep(10)
        used, wall = cpu_seconds(proc.pid) - c0, time.time() - t0
    finally:
        pg.close()
    assert used < 0.05 * wall, f"the idle server used {used:.2f} s of CPU in {wall:.1f} s"
