"""A trace the validator accepts renders on every page (issue 12, item 5).

Property: take a valid example trace from assets/, change one value anywhere in its JSON (another
type, an out-of-range index, a missing key, a shorter list, ...); then ``Trace.from_dict`` either
refuses it with a TraceError sentence, or every page draws it without an exception or an error box
(AppTest). Plus the mutations found by hand in the issue, each refused.

PDL_FUZZ_EXAMPLES sets the number of mutations per example trace (default 12: a quick check; run
with a few hundred to search harder).
"""

from __future__ import annotations

import copy
import json
import math
import os
import re
from pathlib import Path

import pytest

pytest.importorskip("streamlit")
hypothesis = pytest.importorskip("hypothesis")
from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402
from streamlit.testing.v1 import AppTest  # noqa: E402

from decoding.trace import Trace, TraceError  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
APP = str(ROOT / "app.py")
EXAMPLES = {m: json.loads((ROOT / "assets" / f"example_{m}.json").read_text()) for m in ("ar", "jacobi", "lookahead", "pld")}
PAGES = re.findall(r'st\.Page\("([^"]+)"', (ROOT / "app.py").read_text())  # every page of app.py's navigation
N = int(os.environ.get("PDL_FUZZ_EXAMPLES", "12"))

# ---- rendering on every page ----------------------------------------------------------------------
_APP: dict[str, AppTest] = {}


def app() -> AppTest:
    """One app session for all mutants (a page left broken by one shows up on the next)."""
    if "at" not in _APP:
        _APP["at"] = AppTest.from_file(APP, default_timeout=60).run()
    return _APP["at"]


def problems(at) -> list[str]:
    return [f"exception: {e.value}" for e in at.exception] + [f"error: {e.value}" for e in at.error]


def render_everywhere(t: Trace) -> list[str]:
    """Show ``t`` on every page (and both lectures, and as the CLLM pair if it is Jacobi); the problems."""
    from app_pages.common.state import CllmPair

    at = app()
    res = at.session_state["results"]
    res.put(t, "mutant")
    if t.method == "jacobi":
        res.cllm = CllmPair(t, t, "mutant", "nowhere")
    out = []
    for page in PAGES:
        at.switch_page(page).run()
        out += [f"{page}: {p}" for p in problems(at)]
        if page == "app_pages/lecture.py":
            for kind in ("Jacobi decoding", "Lookahead decoding"):
                at.radio(key="lecture_kind").set_value(kind).run()
                out += [f"{page} ({kind}): {p}" for p in problems(at)]
    return out


# ---- mutations -----------------------------------------------------------------------------------
VALUES = st.one_of(
    st.integers(-2, 3), st.sampled_from([99, 10**9, -1]), st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=4), st.booleans(), st.none(), st.lists(st.integers(-1, 99), max_size=4),
    st.sampled_from([{}, [], [[]], [[1, 2]], {"a": 1}, "abc", "hot", 123]),
)


@st.composite
def mutant(draw, method: str):
    """A copy of the example trace of ``method`` with one value replaced, removed or duplicated."""
    d = copy.deepcopy(EXAMPLES[method])
    node, where = d, []
    while True:
        keys = list(node) if isinstance(node, dict) else list(range(len(node)))
        if not keys:
            break
        k = draw(st.sampled_from(keys))
        child = node[k]
        if isinstance(child, (dict, list)) and child and draw(st.integers(0, 3)) > 0:
            node, where = child, where + [k]
            continue
        what = draw(st.sampled_from(["replace", "replace", "replace", "remove", "duplicate"]))
        if what == "replace":
            node[k] = draw(VALUES)
        elif what == "remove":
            del node[k]
        elif isinstance(node, list):
            node.insert(k, copy.deepcopy(child))
        else:
            node[k] = [child, child]
        where.append(f"{k}:{what}")
        break
    return d, where


def check(d: dict, where) -> None:
    try:
        t = Trace.from_dict(json.loads(json.dumps(d)))
    except TraceError as e:
        assert str(e) and "Traceback" not in str(e)
        return
    found = render_everywhere(t)
    assert not found, (where, found)


@pytest.mark.parametrize("method", list(EXAMPLES))
def test_a_mutated_trace_is_refused_or_renders_everywhere(method):
    @settings(max_examples=N, deadline=None, database=None, derandomize=os.environ.get("PDL_FUZZ_RANDOM") != "1",
              suppress_health_check=list(HealthCheck))
    @given(mutant(method))
    def prop(m):
        check(*m)

    prop()


# ---- the mutations the issue found by hand -------------------------------------------------------
def _set(path, value):
    def f(d):
        node = d
        for k in path[:-1]:
            node = node[k]
        if path[-1] == "*":
            for item in node:
                item.update(value)
        else:
            node[path[-1]] = value
    return f


def _first_chosen(value):
    def f(d):
        s = next(s for s in d["steps"] if s.get("lookahead") and s["lookahead"]["candidates"])
        s["lookahead"]["chosen"] = value
    return f


HAND = {
    "chosen 99": ("lookahead", _first_chosen(99)),
    "chosen -2": ("lookahead", _first_chosen(-2)),
    "prompt_text 123": ("lookahead", _set(["prompt_text"], 123)),
    "stop_reason 5": ("lookahead", _set(["stop_reason"], 5)),
    "seconds abc": ("lookahead", _set(["seconds"], "abc")),
    "temperature hot": ("lookahead", _set(["params"], {"temperature": "hot"})),
    "W abc": ("lookahead", _set(["params", "W"], "abc")),
    "a step without tokens": ("ar", lambda d: d["steps"][0].update(tokens=[], origins=[])),
    "negative token id": ("ar", lambda d: d["output_ids"].__setitem__(0, -5)),
    "block out of range": ("jacobi", lambda d: d["steps"][0]["jacobi"].update(block=99)),
    "jacobi start past the block": ("jacobi", lambda d: d["steps"][0]["jacobi"].update(start=99)),
    "pld matched past the draft": ("pld", lambda d: next(s for s in d["steps"] if s["pld"])["pld"].update(matched=99)),
    "chat 'yes'": ("ar", _set(["chat"], "yes")),
    "NaN prefill": ("ar", _set(["prefill_seconds"], math.nan)),
}


@pytest.mark.parametrize("name", list(HAND))
def test_the_issues_mutations_are_refused(name):
    method, mutate = HAND[name]
    d = copy.deepcopy(EXAMPLES[method])
    mutate(d)
    with pytest.raises(TraceError):
        Trace.from_dict(d)
