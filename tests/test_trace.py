"""The trace: JSON round trip, validation of bad input, and the run-level bookkeeping."""

import json
from dataclasses import asdict
from pathlib import Path

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


# ---- issue 19: each method owns its record; schema 3; filled-in parameters -----------------------------
ASSETS = Path(__file__).resolve().parent.parent / "assets"
SHIPPED = sorted(ASSETS.glob("example_*.json")) + sorted((ASSETS / "cllm").glob("*_jacobi.json"))
# the examples made before schema 3 (regenerating them decodes the same: scripts/make_example_traces.py --check)
OLDER = [p for p in SHIPPED if json.loads(p.read_text())["version"] in (1, 2)]


@pytest.mark.parametrize("path", SHIPPED, ids=lambda p: p.name)
def test_shipped_traces_load_and_round_trip(path):
    t = Trace.load(str(path))
    assert t.version == SCHEMA_VERSION and t.steps
    assert Trace.from_dict(t.to_dict()) == t


def test_older_schemas_are_still_among_the_shipped_traces():
    assert len(OLDER) >= 6 and {json.loads(p.read_text())["method"] for p in OLDER} >= {"ar", "jacobi", "lookahead", "pld", "tr"}


@pytest.mark.parametrize("path", OLDER, ids=lambda p: p.name)
def test_shipped_traces_of_older_schemas_load_into_their_methods_records(path):
    from decoding.methods import REGISTRY

    raw = json.loads(path.read_text())
    t = Trace.load(str(path))
    spec = REGISTRY[t.method]
    assert raw["version"] in (1, 2) and t.version == SCHEMA_VERSION == 3
    for s, r in zip(t.steps, raw["steps"], strict=True):
        if spec.record is None:
            assert s.record is None
        else:  # the record the file kept under its method's key, now typed and in Step.record
            old, new = r[spec.legacy_record], asdict(s.record)
            assert isinstance(s.record, spec.record) and {k: new[k] for k in old} == old
            assert all(new[k] is None for k in new.keys() - old.keys())  # fields added since (Jacobi's fed)
    d = t.to_dict()
    assert all(set(s) >= {"record", "origins"} and spec.legacy_record not in s for s in d["steps"])
    assert Trace.from_dict(d) == t


def test_a_loaded_trace_keeps_its_filled_in_parameters():
    """The file names W and G only: loading fills in N and the rest from the registry, and the
    figures read them (the Lookahead animation used to assume W = 1 where its page assumed W = 5)."""
    from decoding.methods import REGISTRY
    from viz import lookahead

    d = json.loads((ASSETS / "example_lookahead.json").read_text())
    d["params"] = {"W": 5, "G": 5}
    t = Trace.from_dict(d)
    assert t.params == REGISTRY["lookahead"].defaults
    d["params"] = {}
    assert lookahead.step_grid(Trace.from_dict(d)).W == 5 == REGISTRY["lookahead"].defaults["W"]


def test_a_record_of_another_method_is_refused(lm):
    d = decode(lm, [1, 2, 3], "ar", {}, 4).to_dict()
    d["steps"][1]["record"] = {"draft": [1], "matched": 0, "ngram": 1, "source": 0}
    with pytest.raises(TraceError, match=r"^steps\[1\]\.record: a ar trace records nothing"):
        Trace.from_dict(d)
    d = decode(lm, [1, 2, 3], "pld", {}, 4).to_dict()
    d["version"] = 2
    for s in d["steps"]:
        s["pld"] = s.pop("record")
    d["steps"][0]["lookahead"] = {"window": []}
    with pytest.raises(TraceError, match=r"^steps\[0\]\.lookahead: a pld trace holds no lookahead records"):
        Trace.from_dict(d)


def test_one_model_checks_a_parameters_bounds():
    """Param states bounds; the method's pydantic model (MethodSpec.params_model) checks them."""
    from decoding.methods import REGISTRY, ConfigError, Param

    assert not hasattr(Param, "check")
    model = REGISTRY["lookahead"].params_model
    assert model.model_fields["W"].default == 5
    assert model.model_json_schema()["properties"]["W"]["maximum"] == 64
    with pytest.raises(ConfigError, match="^W must be between 1 and 64, got 65$"):
        REGISTRY["lookahead"].check_params({"W": 65})
    with pytest.raises(ConfigError, match="^budget must be one of fixed, auto, got 'x'$"):
        REGISTRY["pld"].check_params({"budget": "x"})
