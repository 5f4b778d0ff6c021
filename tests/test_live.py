"""The app's stoppable decodes (app_pages/common/live.py) on tiny models, without Streamlit running:
a stop ends every run within one step, the traces stay valid and marked, the model lock is
released, and a stop while waiting for the lock never takes it."""

from __future__ import annotations

import threading

import pytest

pytest.importorskip("streamlit")

from app_pages.common import live  # noqa: E402
from decoding.loop import Run  # noqa: E402
from decoding.trace import Trace  # noqa: E402
from tiny import tiny_lm  # noqa: E402

IDS = [5, 9, 2, 7, 5, 9, 2, 7, 1]


def test_a_stop_ends_every_run_after_its_current_step():
    runs = [Run(tiny_lm("llama", 0), IDS, "jacobi", {"n": 6}, 200), Run(tiny_lm("llama", 1), IDS, "lookahead", {}, 200)]
    lv = live.LiveRun(runs=runs)
    seen = []

    def on_step(i, step):
        seen.append(i)
        if len(seen) == 5:
            threading.Thread(target=lv.stop).start()  # as the next script run does, from another thread
            threading.Event().wait(0.05)

    live.drive(runs, lv, on_step)
    assert seen[:4] == [0, 1, 0, 1]  # side by side, one step each in turn
    assert len(seen) <= 6  # each run ended within one step of the stop
    for r in runs:
        t = r.trace
        assert t.stop_reason == "stopped" and 1 <= t.n_steps <= 3 and len(t.output_ids) < 200
        assert Trace.from_json(t.to_json()).output_ids == t.output_ids  # a valid trace
        assert live.stopped_source(t).startswith(f"live run (stopped after {len(t.output_ids)} tokens")


def test_an_exception_while_drawing_closes_the_runs():
    """Streamlit stops a script thread by raising at its next st.* call: the runs are closed, their
    traces finished and marked stopped."""
    run = Run(tiny_lm("llama", 0), IDS, "ar", {}, 50)
    lv = live.LiveRun(runs=[run])

    class Stopped(Exception):
        pass

    def on_step(i, step):
        if run.trace.n_steps == 3:
            raise Stopped

    with pytest.raises(Stopped):
        live.drive([run], lv, on_step)
    assert run.trace.stop_reason == "stopped" and run.trace.n_steps == 3 and len(run.trace.output_ids) == 4


def test_model_held_releases_the_lock_and_gives_up_when_stopped():
    lock = threading.Lock()
    lv = live.LiveRun()
    with live.model_held(lock, lv, lambda: None) as held:
        assert held and lock.locked()
    assert not lock.locked()
    # another session holds the model: a stop while waiting returns without the lock
    lock.acquire()
    waits = []

    def waiting():
        waits.append(1)
        if len(waits) == 2:
            lv.stop()

    with live.model_held(lock, lv, waiting) as held:
        assert not held
    assert lock.locked() and len(waits) == 2  # still the other session's
    lock.release()
    # an exception inside (Streamlit's stop while drawing) releases it
    lv2 = live.LiveRun()
    with pytest.raises(RuntimeError):
        with live.model_held(lock, lv2, lambda: None):
            raise RuntimeError
    assert not lock.locked()


def test_the_explain_measurement_goes_through_the_locked_scaffold(monkeypatch):
    """runs.LockedDecode, as Explain's "Measure" uses it: the lock is held while measuring, the
    curve is kept for the session, and the decode is marked done with the lock released."""
    from pathlib import Path
    from types import SimpleNamespace

    import decoding.perf.measure
    from streamlit.testing.v1 import AppTest

    from app_pages.common import models
    from tiny import ByteTokenizer

    lm = tiny_lm("llama", 0)
    lm.tokenizer = ByteTokenizer()
    held = []

    def measure(lm, progress, force):
        held.append(models.model_lock().locked())
        return SimpleNamespace(model_id=lm.model_id, device=lm.device, dtype=lm.dtype, kernel=lm.kernel)

    monkeypatch.setattr(models, "get_model", lambda name: lm)
    monkeypatch.setattr(decoding.perf.measure, "load_or_measure", measure)
    monkeypatch.setattr("decoding.perf.costs.find_curve", lambda *a, **k: None)
    at = AppTest.from_file(str(Path(__file__).resolve().parent.parent / "app.py"), default_timeout=60).run()
    at.switch_page("app_pages/explain.py").run()
    at.button(key="explain_measure").click().run()
    assert not at.exception, [e.value for e in at.exception]
    assert held == [True] and not models.model_lock().locked()
    assert at.session_state["live"].done.is_set()
    found = at.session_state["results"].curves[(lm.model_id, lm.device, lm.dtype, lm.kernel)]
    assert found.where == "measured on this machine just now"
