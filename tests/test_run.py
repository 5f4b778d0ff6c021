"""The loop's contract: clear errors before any work, streaming steps, early stop, recording off."""

import pytest

from decoding.loop import MAX_NEW_TOKENS_CAP, Run, decode
from decoding.methods import ConfigError, resolve_params
from tiny import tiny_lm


@pytest.fixture(scope="module")
def lm():
    return tiny_lm("qwen2", 2)


@pytest.mark.parametrize("method,params,kw,msg", [
    ("beam", {}, {}, "unknown method"),
    ("jacobi", {"n": 0}, {}, "n must be between 1"),
    ("lookahead", {"N": 1}, {}, "N must be between 2"),
    ("lookahead", {"W": 0}, {}, "W must be between 1"),
    ("lookahead", {"G": -1}, {}, "G must be between 0"),
    ("lookahead", {"seed_pool_prompt": "yes"}, {}, "true or false"),
    ("pld", {"k": 2.5}, {}, "must be an integer"),
    ("ar", {"n": 3}, {}, "ar has no parameter 'n'"),
    ("ar", {}, {"max_new_tokens": 0}, "max_new_tokens must be"),
    ("ar", {}, {"max_new_tokens": MAX_NEW_TOKENS_CAP + 1}, "max_new_tokens must be"),
    ("ar", {}, {"prompt_ids": []}, "the prompt is empty"),
    ("ar", {}, {"prompt_ids": [1, 10_000]}, "prompt ids must be"),
])
def test_bad_config_fails_before_work(lm, method, params, kw, msg):
    args = {"prompt_ids": [1, 2, 3], "max_new_tokens": 8} | kw
    with pytest.raises(ConfigError, match=msg):
        Run(lm, args["prompt_ids"], method, params, args["max_new_tokens"])


def test_defaults_are_filled():
    assert resolve_params("lookahead", {"W": 7})["N"] == 4
    assert resolve_params("jacobi", None) == {"n": 16, "seed": 0, "budget": "fixed"}


def test_steps_stream_and_stop_early(lm):
    run = Run(lm, [4, 5, 6], "jacobi", {"n": 4}, 50)
    seen = []
    for step in run:
        seen.append(step)
        if len(seen) == 3:
            run.stop()
    tr = run.trace
    assert tr.stop_reason == "stopped" and tr.steps == seen and len(seen) == 3
    assert len(tr.output_ids) == 1 + sum(len(s.tokens) for s in seen)
    assert tr.output_ids == decode(lm, [4, 5, 6], "ar", {}, len(tr.output_ids)).output_ids


def test_time_spent_by_the_consumer_is_not_decoding_time(lm):
    import time
    run = Run(lm, [4, 5, 6], "ar", {}, 6)
    t0 = time.perf_counter()
    for _ in run:
        time.sleep(0.05)  # a UI drawing each step
    wall = time.perf_counter() - t0
    assert len(run.trace.steps) == 5 and wall >= 0.25
    assert run.trace.seconds < wall - 0.2
    assert run.trace.seconds >= sum(s.seconds for s in run.trace.steps)


def test_break_out_of_the_loop_keeps_a_valid_trace(lm):
    run = Run(lm, [4, 5, 6], "lookahead", {"W": 3, "N": 3, "G": 3}, 50)
    it = iter(run)
    next(it), next(it)
    it.close()
    assert run.trace.stop_reason == "stopped" and len(run.trace.steps) == 2
    assert len(run.trace.output_pieces) == len(run.trace.output_ids)


@pytest.mark.parametrize("method", ["ar", "jacobi", "lookahead", "pld"])
def test_recording_off_changes_nothing_but_the_records(lm, method):
    on = decode(lm, [9, 8, 7, 9, 8, 7], method, None, 30)
    off = decode(lm, [9, 8, 7, 9, 8, 7], method, None, 30, record=False)
    assert off.output_ids == on.output_ids and off.n_steps == on.n_steps
    assert all(s.record is None for s in off.steps)
    assert not off.recorded and off.output_pieces == []


def test_a_run_iterates_once(lm):
    run = Run(lm, [1, 2], "ar", {}, 3)
    run.decode()
    with pytest.raises(RuntimeError):
        list(run)
