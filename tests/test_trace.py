"""The trace: JSON round trip, validation of bad input, and the run-level bookkeeping."""

import json

import pytest

from decoding.loop import decode
from decoding.trace import SCHEMA_VERSION, Trace, TraceError
from tiny import tiny_lm


@pytest.fixture(scope="module")
def lm():
    return tiny_lm("llama", 0)


@pytest.mark.parametrize("method,params", [("ar", {}), ("jacobi", {"n": 4}), ("lookahead", {"W": 3, "N": 3, "G": 3}), ("pld", {})])
def test_round_trip(lm, method, params):
    tr = decode(lm, [5, 6, 7, 5, 6, 7, 5, 6], method, params, 20)
    back = Trace.from_json(tr.to_json())
    assert back == tr
    assert back.to_dict() == json.loads(tr.to_json())
    assert back.version == SCHEMA_VERSION
    assert len(back.output_pieces) == len(back.output_ids) == 20
    assert back.prompt_pieces and back.model_id == "tiny-llama-0"
    assert set(map(int, back.vocab)) == back.record_ids() - set(back.prompt_ids) - set(back.output_ids)


def test_method_records_present(lm):
    j = decode(lm, [1, 2, 3], "jacobi", {"n": 4}, 20)
    assert all(type(s.record).__name__ == "JacobiRecord" for s in j.steps) and j.blocks
    assert sum(len(b.fixed_point) for b in j.blocks) >= 19
    la = decode(lm, [1, 2, 3, 1, 2, 3], "lookahead", {"W": 3, "N": 3, "G": 3}, 20)
    assert all(type(s.record).__name__ == "LookaheadRecord" for s in la.steps)
    assert len(la.steps[0].record.window) == 1 and len(la.steps[1].record.window) == 2  # fill phase
    assert all(len(s.record.harvested) == 3 for s in la.steps[1:])
    p = decode(lm, [1, 2, 3, 1, 2, 3], "pld", {}, 20)
    assert all(type(s.record).__name__ == "PldRecord" for s in p.steps)


@pytest.mark.parametrize("mutate,msg", [
    (lambda d: d.update(version=99), "^version: unsupported trace version"),
    (lambda d: d.update(method="beam"), "^method: unknown method"),
    (lambda d: d.pop("steps"), "^steps: missing$"),
    (lambda d: d.update(output_ids=[1, "x"]), r"^output_ids\[1\]: input should be a valid integer, got 'x'$"),
    (lambda d: d["steps"][0].update(tokens=[999999]), "^output_ids: the steps' tokens do not add up"),
    (lambda d: d["steps"][0].update(seconds="fast"), r"^steps\[0\]\.seconds: input should be a valid number"),
    (lambda d: d["steps"][0]["record"].update(pool_ops=[["?", [1]]]), r"^steps\[0\]\.record\.pool_ops\[0\]\[0\]: "),
    (lambda d: d["steps"][0]["record"].update(matched=[1] * 40), r"^steps\[0\]\.record: one matched/origin per candidate"),
    (lambda d: d["steps"][0].update(record={"block": 0}), r"^steps\[0\]\.record\.window: missing$"),
])
def test_bad_traces_get_a_clear_error(lm, mutate, msg):
    d = decode(lm, [1, 2, 3, 1, 2, 3], "lookahead", {"W": 3, "N": 3, "G": 3}, 10).to_dict()
    mutate(d)
    with pytest.raises(TraceError, match=msg):
        Trace.from_dict(d)


@pytest.mark.parametrize("text", ["", "{", "[1, 2]", "null", b"\xff\xfe"])
def test_not_a_trace(text):
    with pytest.raises(TraceError):
        Trace.from_json(text)
