"""End to end, as a visitor would break it (issue 12): deep links on a fresh server, an idle server
that stays idle, no request leaving localhost.

The server here is started the way scripts/start starts it (no watcher or usage-stats flags), so
that `.streamlit/config.toml` is what decides; each test module gets its own fresh server.
"""

from __future__ import annotations

import os
import re
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


def assert_sidebar_defaults(pg) -> None:
    """The sidebar shows the session's first settings (example prompt, Lookahead, 64 tokens, W 5)."""
    side = pg.locator('[data-testid="stSidebar"]')
    side.get_by_role("combobox", name="Method").wait_for()  # widgets may show a skeleton first
    prompt = side.get_by_label("Prompt", exact=True).input_value()
    assert prompt.startswith("Write a Python function is_prime"), f"the prompt was reset to {prompt!r}"
    method = side.get_by_role("combobox", name="Method").input_value()
    assert method == "Lookahead", f"the method was reset to {method!r}"
    assert side.get_by_role("spinbutton", name="Max new tokens").input_value() == "64"
    assert side.get_by_role("spinbutton", name="W (window columns)").input_value() == "5"


@pytest.mark.parametrize("attempt", range(3))
def test_an_early_page_click_keeps_the_sidebar_settings(fresh_server, browser, attempt):
    """Issue 12 item 3: a page link clicked as soon as it appears (the first script run may still be
    going) must not reset the sidebar to the widgets' minimums."""
    _, url = fresh_server
    pg = new_page(browser)
    try:
        pg.goto(url)
        link = pg.locator('[data-testid="stSidebarNav"] a').filter(has_text="Compare").first
        link.wait_for(state="visible")
        link.click()
        wait_idle(pg)
        pg.wait_for_selector('h1:has-text("Compare")')
        for _ in range(2):  # and it stays so over further page changes
            for title in ("Lookahead", "Jacobi"):
                pg.locator('[data-testid="stSidebarNav"] a').filter(has_text=title).first.click()
                wait_idle(pg)
        assert_sidebar_defaults(pg)
        assert_healthy(pg)
    finally:
        pg.close()


# ---- Stop and page clicks during a decode (items 1 and 2; these load the bundled model) --------------
TOKENS = re.compile(r"(\d+) tokens · \d+ (steps|Jacobi iterations)")


def side(pg):
    return pg.locator('[data-testid="stSidebar"]')


def set_number(pg, name: str, value: int) -> None:
    box = side(pg).get_by_role("spinbutton", name=name)
    box.fill(str(value))
    box.press("Enter")
    wait_idle(pg)


def wait_for_tokens(pg, at_least: int, timeout_s: float = 240) -> int:
    """Wait until a live progress bar says it has decoded ``at_least`` tokens; returns the count."""
    deadline = time.time() + timeout_s
    while time.time() < deadline:
        for text in pg.locator('[data-testid="stProgress"]').all_inner_texts():
            m = TOKENS.search(text)
            if m and int(m.group(1)) >= at_least:
                return int(m.group(1))
        pg.wait_for_timeout(200)
    raise AssertionError("the live run did not stream tokens")


def assert_server_idle(proc, seconds: float = 4.0) -> None:
    """The decode really ended (nothing decodes on in the background)."""
    time.sleep(1.0)
    c0 = cpu_seconds(proc.pid)
    time.sleep(seconds)
    used = cpu_seconds(proc.pid) - c0
    assert used < 0.1 * seconds, f"the server used {used:.2f} s of CPU in {seconds:.0f} s after Stop: still decoding?"


def assert_next_run_does_not_wait(pg) -> None:
    """The model lock was released: a new run of 8 tokens never shows the waiting message."""
    set_number(pg, "Max new tokens", 8)
    waited = []
    side(pg).get_by_role("button", name="Run").click()
    t0 = time.time()
    while time.time() - t0 < 180 and pg.get_by_text("done: 8 tokens", exact=False).count() == 0:
        if pg.get_by_text("another session is decoding", exact=False).count():
            waited.append(time.time() - t0)
        pg.wait_for_timeout(100)
    assert pg.get_by_text("done: 8 tokens", exact=False).count() == 1, "the new run did not finish"
    assert not waited, "the new run waited for the model lock"
    wait_idle(pg)


def stopped_count(pg) -> int:
    """k of the 'live run (stopped after k tokens' caption (fails if there is none)."""
    cap = pg.get_by_text(re.compile(r"live run \(stopped after \d+")).first
    cap.wait_for(timeout=10_000)
    return int(re.search(r"stopped after (\d+)", cap.inner_text()).group(1))


def test_stop_keeps_the_partial_run(fresh_server, browser):
    proc, url = fresh_server
    pg = new_page(browser)
    try:
        pg.goto(url + "/lookahead")
        wait_idle(pg)
        set_number(pg, "Max new tokens", 256)
        side(pg).get_by_role("button", name="Run").click()
        n = wait_for_tokens(pg, 12)
        side(pg).get_by_role("button", name="Stop").click()
        wait_idle(pg)
        assert_healthy(pg)
        k = stopped_count(pg)
        assert n <= k < 256
        assert pg.get_by_text("The partial run is kept", exact=False).count() == 1
        assert_server_idle(proc)
        assert_next_run_does_not_wait(pg)
        assert pg.get_by_text("live run (finished", exact=False).count() > 0
    finally:
        pg.close()


def test_a_page_click_during_a_run_keeps_it(fresh_server, browser):
    proc, url = fresh_server
    pg = new_page(browser)
    try:
        pg.goto(url + "/lookahead")
        wait_idle(pg)
        set_number(pg, "Max new tokens", 256)
        side(pg).get_by_role("button", name="Run").click()
        wait_for_tokens(pg, 8)
        pg.locator('[data-testid="stSidebarNav"] a').filter(has_text="Compare").first.click()
        wait_idle(pg)
        pg.wait_for_selector('h1:has-text("Compare")')
        assert_healthy(pg)
        k = stopped_count(pg)  # the Compare page shows the latest prompt's runs: the stopped one
        assert 8 <= k < 256
        pg.locator('[data-testid="stSidebarNav"] a').filter(has_text="Lookahead").first.click()
        wait_idle(pg)
        assert stopped_count(pg) == k
        assert_healthy(pg)
        assert_server_idle(proc)
    finally:
        pg.close()


def test_stop_ends_the_cllm_decode_and_frees_the_model(fresh_server, browser):
    """Item 2: the CLLM page's two-model decode stops within a step, releases the model lock, and
    keeps both partial traces."""
    proc, url = fresh_server
    pg = new_page(browser)
    try:
        pg.goto(url + "/cllm")
        wait_idle(pg)
        set_number(pg, "Max new tokens", 256)
        pg.get_by_text("Decode the sidebar's prompt with both models").click()
        pg.get_by_role("button", name="Decode with base and CLLM").click()
        wait_for_tokens(pg, 8, timeout_s=300)
        side(pg).get_by_role("button", name="Stop").click()
        wait_idle(pg)
        assert_healthy(pg)
        stopped_count(pg)
        assert_server_idle(proc)
        assert_next_run_does_not_wait(pg)
    finally:
        pg.close()


# ---- what visitors type (item 8) ---------------------------------------------------------------------
def test_an_out_of_range_number_is_refused_not_replaced(fresh_server, browser):
    """A number typed out of range is what Run sees: it refuses with a sentence, instead of the
    field showing 9999 while Run silently uses the last valid value."""
    _, url = fresh_server
    pg = new_page(browser)
    try:
        pg.goto(url + "/lookahead")
        wait_idle(pg)
        for name, value, sentence in (("Max new tokens", 9999, "Max new tokens must be between 1 and 512"),
                                      ("W (window columns)", 99, "W must be between 1 and 64")):
            set_number(pg, name, value)
            assert side(pg).get_by_role("spinbutton", name=name).input_value() == str(value)
            side(pg).get_by_role("button", name="Run").click()
            wait_idle(pg)
            assert pg.get_by_text(sentence, exact=False).count() == 1, f"no refusal for {name} = {value}"
            assert pg.get_by_text("live run", exact=False).count() == 0
            set_number(pg, name, {"Max new tokens": 64, "W (window columns)": 5}[name])
    finally:
        pg.close()


def test_run_refuses_what_a_number_field_shows(fresh_server, browser):
    """Issue 24.2: a number beyond the browser's integer bounds (+-2^53), and a temperature of -1 or
    1000 (the sampling fields had browser bounds), stayed in the field with a red mark while Run
    went ahead with the last valid value. Now the field keeps it and Run refuses with a sentence
    naming the field and its bounds."""
    _, url = fresh_server
    pg = new_page(browser)
    try:
        pg.goto(url + "/lookahead")
        wait_idle(pg)
        set_number(pg, "Max new tokens", 1)  # a Run that went ahead anyway stays short
        huge = "99999999999999999999"
        for name, typed, sentence, back in (
                ("Max new tokens", huge, "Max new tokens must be between 1 and 512, not 100000000000000000000", 1),
                ("W (window columns)", huge, "W must be between 1 and 64, got 100000000000000000000", 5),
                ("Temperature (0 = greedy)", "-1", "temperature must be a number between 0 (greedy) and 100, got -1.", 0),
                ("Temperature (0 = greedy)", "1000", "temperature must be a number between 0 (greedy) and 100, got 1000.", 0)):
            if not side(pg).get_by_role("spinbutton", name=name).is_visible():  # the Sampling expander
                side(pg).locator("summary").filter(has_text="Sampling: temperature").click()
            set_number(pg, name, typed)
            shows = side(pg).get_by_role("spinbutton", name=name).input_value()
            assert float(shows) == float(typed), f"{name} shows {shows!r} after {typed!r} was typed"
            side(pg).get_by_role("button", name="Run").click()
            wait_idle(pg)
            assert pg.get_by_text(sentence, exact=False).count() == 1, f"no refusal for {name} = {typed}"
            assert pg.get_by_text("live run", exact=False).count() == 0, f"Run went ahead with {name} = {typed}"
            set_number(pg, name, back)
        assert_healthy(pg)
    finally:
        pg.close()


def test_user_text_shows_as_typed(fresh_server, browser):
    """A prompt with Markdown, LaTeX and HTML in it shows in the trace's caption exactly as typed."""
    _, url = fresh_server
    prompt = "Costs $5 and $6: *not bold*, <b>no tag</b>, [no link](x) and :red[no colour] a_b_c"
    pg = new_page(browser)
    try:
        pg.goto(url + "/lookahead")
        wait_idle(pg)
        box = side(pg).get_by_label("Prompt", exact=True)
        box.fill(prompt)
        box.press("Control+Enter")
        wait_idle(pg)
        set_number(pg, "Max new tokens", 2)
        side(pg).get_by_role("button", name="Run").click()
        pg.get_by_text("done: 2 tokens", exact=False).wait_for(timeout=240_000)
        wait_idle(pg)
        caps = [c for c in pg.locator('[data-testid="stCaptionContainer"]').all_inner_texts() if c.startswith("Prompt")]
        assert caps and caps[0] == f"Prompt (chat): {prompt}", caps
        assert pg.locator('[data-testid="stCaptionContainer"] .katex, [data-testid="stCaptionContainer"] strong, '
                          '[data-testid="stCaptionContainer"] em, [data-testid="stCaptionContainer"] a').count() == 0
    finally:
        pg.close()


# ---- many visitors (README: running it as a public demo) ------------------------------------------------
LOAD_SESSIONS = int(os.environ.get("PDL_LOAD_SESSIONS", "3"))


def streamed_text(pg) -> str:
    return pg.locator('span[title="prefill: the first token"]').first.locator("xpath=..").inner_text()


def test_concurrent_visitors_are_served_in_turn(fresh_server, browser):
    """N sessions press Run (Lookahead, 32 tokens) at once: every one finishes with the same greedy
    text, the later ones show the waiting message, nothing is lost; meanwhile another visitor
    browses pages. Prints the timings (README quotes them)."""
    _, url = fresh_server
    pages = [new_page(browser) for _ in range(LOAD_SESSIONS)]
    browsing = new_page(browser)
    try:
        for pg in pages:
            pg.goto(url + "/lookahead")
            wait_idle(pg)
            set_number(pg, "Max new tokens", 32)
        browsing.goto(url + "/compare")
        wait_idle(browsing)
        t0 = time.time()
        for pg in pages:
            side(pg).get_by_role("button", name="Run").click()
        waited, done, switches, last_switch = set(), {}, [], 0.0
        while len(done) < len(pages) and time.time() - t0 < 300 * len(pages):
            for i, pg in enumerate(pages):
                if i in done:
                    continue
                if pg.get_by_text("another session is decoding", exact=False).count():
                    waited.add(i)
                if pg.get_by_text("done: 32 tokens", exact=False).count():
                    done[i] = time.time() - t0
            if time.time() - last_switch > 5:  # the browsing visitor moves to another page now and then
                s0 = time.time()
                title = ("Jacobi", "Compare")[len(switches) % 2]
                browsing.locator('[data-testid="stSidebarNav"] a').filter(has_text=title).first.click()
                browsing.wait_for_selector(f'h1:has-text("{title}")')
                switches.append(time.time() - s0)
                last_switch = time.time()
            pages[0].wait_for_timeout(500)
        assert len(done) == len(pages), f"only {len(done)} of {len(pages)} runs finished: {done}, waited: {waited}"
        texts = {streamed_text(pg) for pg in pages}
        assert len(texts) == 1, "greedy runs of one prompt must give the same text"
        assert len(waited) >= len(pages) - 1 >= 0, f"{len(waited)} sessions showed the waiting message"
        for pg in pages:
            wait_idle(pg)
            assert pg.get_by_text("live run (finished", exact=False).count() > 0
            assert_healthy(pg)
        print(f"\nLOAD {len(pages)} sessions x 32 tokens: finished after " + ", ".join(f"{t:.1f}" for t in sorted(done.values()))
              + f" s; {len(waited)} showed the waiting message; a page switch meanwhile took median "
              f"{sorted(switches)[len(switches) // 2]:.2f} s, max {max(switches):.2f} s over {len(switches)} switches")
    finally:
        for pg in pages + [browsing]:
            pg.close()
