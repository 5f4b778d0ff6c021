"""The method registry is the one place that declares methods: the CLI, the sidebar, validation, the
trace validator, the tuning grid and the figures all take exactly what it says; a new method is one
class and one registry entry; the torch-free half of the lab imports without torch."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from decoding import cli
from decoding.methods import REGISTRY, ConfigError, MethodSpec, Param, resolve_params
from decoding.methods.base import Method
from decoding.verify import Chain, Proposal

ROOT = Path(__file__).resolve().parent.parent


def _non_default(prm: Param):
    if prm.is_choice:
        return next(c for c in prm.choices if c != prm.default)
    return (not prm.default) if prm.is_bool else (prm.hi if prm.default != prm.hi else prm.lo)


@pytest.mark.parametrize("method", list(REGISTRY))
def test_cli_takes_exactly_the_registry_parameters(method):
    spec = REGISTRY[method]
    argv = ["generate", "--prompt", "x", "--method", method]
    for prm in spec.params:
        argv += [prm.flag] if prm.is_bool else [prm.flag, str(_non_default(prm))]
    a = cli.build_parser().parse_args(argv)
    got = cli.method_params(method, a)
    assert got == {prm.name: _non_default(prm) for prm in spec.params}
    # no flag given: the registry's defaults
    assert cli.method_params(method, cli.build_parser().parse_args(argv[:5])) == spec.defaults


def test_cli_bounds_are_the_registry_bounds():
    for method, spec in REGISTRY.items():
        for prm in spec.params:
            if prm.is_bool or prm.is_choice:
                continue
            a = cli.build_parser().parse_args(["generate", "--prompt", "x", "--method", method, prm.flag, str(prm.hi + 1)])
            with pytest.raises(ConfigError, match=f"{prm.name} must be between {prm.lo} and {prm.hi}"):
                cli.method_params(method, a)


def test_every_method_flag_comes_from_the_registry():
    p = cli.build_parser()
    gen = p._subparsers._group_actions[0].choices["generate"]
    group = next(g for g in gen._action_groups if g.title.startswith("method options"))
    flags = {s for act in group._group_actions for s in act.option_strings}
    want = {prm.flag for spec in REGISTRY.values() for prm in spec.params}
    assert flags == want


def _sidebar_script():
    import json

    import streamlit as st

    from app_pages.common import keys, session, sidebar

    session.init_state()
    with st.sidebar:
        sidebar.method_widgets(keys.selected_method())
        sidebar.shared_param_widgets()
    st.text(json.dumps({m: keys.method_params(m) for m in keys.METHODS}))
    st.text(json.dumps({m: sidebar.check_inputs([m]) for m in keys.METHODS}))


def test_sidebar_takes_exactly_the_registry_parameters_and_bounds():
    from streamlit.testing.v1 import AppTest

    from app_pages.common import keys

    at = AppTest.from_function(_sidebar_script, default_timeout=60).run()
    assert not at.exception
    params = json.loads(at.text[0].value)
    assert list(params) == list(REGISTRY)
    for method, spec in REGISTRY.items():
        assert params[method] == spec.defaults  # every parameter, nothing else, registry defaults
        for prm in spec.params:
            key = keys.widget_key(method, prm.name)
            if prm.is_choice:
                w = at.selectbox(key=key)
                assert (tuple(w.options), w.value) == (prm.choices, prm.default)
            elif prm.is_bool:
                assert at.checkbox(key=key).value is prm.default
            else:
                # no bounds in the browser (issue 12): Run checks the registry's bounds, one place
                at.number_input(key=key).set_value(prm.hi + 1).run()
                errs = json.loads(at.text[1].value)[method]
                assert any(f"{prm.name} must be between {prm.lo} and {prm.hi}" in e.replace("\\", "") for e in errs), errs
                at.number_input(key=key).set_value(prm.default).run()
                assert json.loads(at.text[1].value)[method] == []
    # one widget per distinct parameter (the seed several methods declare alike is one)
    want = {keys.widget_key(m, prm.name) for m, spec in REGISTRY.items() for prm in spec.params}
    drawn = {w.key for w in list(at.number_input) + list(at.checkbox) + list(at.selectbox) if w.key.startswith("p_")}
    assert drawn == want
    assert keys.widget_key("jacobi", "seed") == keys.widget_key("lookahead", "seed") == "p_seed"


def test_one_name_with_other_defaults_gets_a_widget_per_method(monkeypatch):
    from app_pages.common import keys

    monkeypatch.setitem(REGISTRY, "repeat", REPEAT)  # its k: default 3, bounds 1..8; prompt lookup's: 10, 1..64
    assert keys.widget_key("repeat", "k") == "p_repeat_k" and keys.widget_key("pld", "k") == "p_pld_k"
    assert keys.widget_key("lookahead", "W") == "p_W"
    drawn = {key for _, _, key, _ in keys.param_widgets()}
    assert {"p_repeat_k", "p_pld_k"} <= drawn and "p_k" not in drawn


def test_trace_validator_and_figures_read_the_registry():
    from decoding.trace import Trace, TraceError
    from viz import style

    t = Trace.load(str(ROOT / "assets" / "example_ar.json")).to_dict()
    for method in REGISTRY:
        Trace.from_dict(t | {"method": method})
    with pytest.raises(TraceError, match="unknown method"):
        Trace.from_dict(t | {"method": "medusa"})
    assert style.METHOD_NAMES == {m: s.label for m, s in REGISTRY.items()}
    assert style.METHOD_COLOURS == {m: s.colour for m, s in REGISTRY.items()}


def test_tuning_grid_and_labels_come_from_the_registry():
    from decoding.perf import tune

    grid = tune.settings_grid(tuple(REGISTRY))
    assert grid == [(m, dict(g)) for m, s in REGISTRY.items() for g in s.grid]
    for m, params in grid:
        resolve_params(m, params)  # every grid setting is valid
        assert all(f"{k}={params[k]}" in tune.label(m, params) for k in REGISTRY[m].tuned)


# ---- a fifth method: one class and one registry entry ------------------------------------------
class RepeatLast(Method):
    """Guesses that the current token repeats k times (a toy draft, verified like any other)."""

    def propose(self, run):
        k = self.p["k"]
        return Proposal([run.cur] * k, [Chain([run.cur] * k, list(range(1, k + 1)), "pld")])


REPEAT = MethodSpec(name="repeat", label="Repeat", colour="#123456", cls=RepeatLast, samples=True,
                    params=(Param("k", 3, "draft length", 1, 8, tuned=True),), grid=({"k": 2},))


def test_a_new_method_is_one_class_and_one_registry_entry(monkeypatch):
    from decoding.loop import decode
    from tiny import generate_greedy, tiny_lm

    monkeypatch.setitem(REGISTRY, "repeat", REPEAT)
    lm = tiny_lm("llama", 0)
    prompt = [5, 5, 5, 7, 5, 5, 5]
    tr = decode(lm, prompt, "repeat", {"k": 4}, 40)
    assert tr.output_ids == generate_greedy(lm, prompt, 40)
    assert tr.params == {"k": 4} and all(s.fed == 5 for s in tr.steps)
    assert all(len(s.origins) == len(s.tokens) for s in tr.steps)
    sampled = decode(lm, prompt, "repeat", {"k": 2, "temperature": 0.8}, 16)
    assert len(sampled.output_ids) == 16 and sampled.steps[0].sampling is not None
    a = cli.build_parser().parse_args(["generate", "--prompt", "x", "--method", "repeat", "--k", "6"])
    assert cli.method_params("repeat", a) == {"k": 6}
    from decoding.trace import Trace

    assert Trace.from_json(tr.to_json()).output_ids == tr.output_ids


def test_the_torch_free_half_imports_without_torch():
    code = ("import sys; sys.modules['torch'] = None\n"
            "import decoding, decoding.analysis, decoding.trace, decoding.methods, decoding.verify, decoding.io\n"
            "import viz.style, viz.jacobi, viz.lookahead, viz.compare, viz.explain, viz.sampling, viz.lecture, viz.cllm\n"
            "assert 'decoding.loop' not in sys.modules\n"
            "print('ok')")
    r = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0 and r.stdout.strip() == "ok", r.stderr[-2000:]
