"""A trace the validator accepts renders on every page (issue 12, item 5; issue 24, items 1, 3, 4).

Property: take a valid example trace from assets/, change one value anywhere in its JSON (another
type, an out-of-range index, a missing key, a shorter list, ...); then ``Trace.from_dict`` either
refuses it with one TraceError sentence naming the field, or every page draws it without an
exception or an error box (AppTest). Two kinds of mutation:

- random ones (hypothesis, on the example files as shipped: schema version 2), PDL_FUZZ_EXAMPLES
  per example (default 12: a quick check; run with a few hundred to search harder);
- semantic ones (issue 24), on every example in today's form (schema 3): each list field emptied
  or nested wrongly, each float set to 0, -1, +-1e300, +-inf, NaN or 1e-300, and steps dropped
  (with and without the output they committed). ``test_semantic_mutations`` runs a sample of
  SEMANTIC_PER_EXAMPLE per example (1,120 in all, slow tier); the fast tier a smaller one.

Plus the mutations found by hand in the issues, each refused with a sentence naming the field.
"""

from __future__ import annotations

import copy
import json
import math
import os
import random
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
EXAMPLES = {m: json.loads((ROOT / "assets" / f"example_{m}.json").read_text())
            for m in ("ar", "jacobi", "lookahead", "lookahead_auto", "pld", "tr")}
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


# one sentence that names the field: "steps[3].record.pool_ops[0]: ..." (a field of the trace first)
FIELD = re.compile(r"^(?P<field>[a-z_]+)(\[\d+\]|\.\w+)*( key)?: \S")


def refused_well(msg: str) -> str | None:
    """What is wrong with a refusal's message (None: one sentence naming a field of the trace)."""
    m = FIELD.match(msg)
    if not m or m["field"] not in Trace.__dataclass_fields__:
        return f"names no field of the trace: {msg!r}"
    if "\n" in msg or "Traceback" in msg or "validation error" in msg or len(msg) > 300:
        return f"not one plain sentence: {msg!r}"
    return None


def check(d: dict, where) -> None:
    try:
        t = Trace.from_dict(json.loads(json.dumps(d)))
    except TraceError as e:
        assert refused_well(str(e)) is None, (where, refused_well(str(e)))
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
    with pytest.raises(TraceError) as e:
        Trace.from_dict(d)
    assert refused_well(str(e.value)) is None, refused_well(str(e.value))


# ---- issue 24: traces the validator accepted, that crashed pages or gave technical messages ------------
def _first_record(method, **change):
    def f(d):
        next(s for s in d["steps"] if s[method])[method].update(change)
    return f


def _append_pool_op(d):
    next(s for s in d["steps"] if s["lookahead"])["lookahead"]["pool_ops"].append(["+", []])


def _every_budget(**change):
    def f(d):
        for s in d["steps"]:
            if s["budget"]:
                s["budget"].update(change)
    return f


ISSUE_24 = {  # name -> (example, mutation, the field the refusal must name)
    # item 1: accepted, then an exception or an error box on a page
    "[] added to pool_seed (Lookahead: IndexError)": ("lookahead", lambda d: d["pool_seed"].append([]), "pool_seed[60]"),
    "blocks [] (Jacobi: KeyError; Lecture)": ("jacobi", _set(["blocks"], []), "steps[0].record.block"),
    "seconds 1e300 (Explain: ZeroDivisionError)": ("lookahead", _set(["seconds"], 1e300), "seconds"),
    '["+", []] in pool_ops ("Cannot draw this view")': ("lookahead", _append_pool_op, "steps[0].record.pool_ops[1][1]"),
    "every budget cost 0 (Cannot draw this view)": ("lookahead_auto", _every_budget(cost=0), "steps[0].budget.cost"),
    # item 3: zero steps and 80 output tokens, described by Explain
    "0 steps with 80 output tokens": ("ar", _set(["steps"], []), "output_ids"),
    # item 4: technical messages
    "blocks[3].index = [] (TypeError: unhashable type)": ("jacobi", _set(["blocks", 3, "index"], []), "blocks[3].index"),
    # the rules the pages rely on, one more each
    "a window row of another width": ("lookahead", _first_record("lookahead", window=[[1, 2]]), "steps[0].record.window"),
    "a step of 0 seconds": ("ar", _set(["steps", 5, "seconds"], 0.0), "steps[5].seconds"),
    "a negative prefill": ("ar", _set(["prefill_seconds"], -0.1), "prefill_seconds"),
    "vocab key not a token id": ("jacobi", _set(["vocab"], {"x1": "a"}), "vocab.x1 key"),
    "a recycling column past k": ("tr", _first_record("recycling", cols=[99]), "steps[0].record"),
}


@pytest.mark.parametrize("name", list(ISSUE_24))
def test_issue_24_traces_are_refused_naming_the_field(name):
    example, mutate, field = ISSUE_24[name]
    d = copy.deepcopy(EXAMPLES[example])
    mutate(d)
    with pytest.raises(TraceError) as e:
        Trace.from_dict(json.loads(json.dumps(d)))
    assert refused_well(str(e.value)) is None, refused_well(str(e.value))
    assert str(e.value).startswith(f"{field}: "), str(e.value)


@pytest.mark.parametrize("depth", [100_000, 5_000])
def test_deep_nesting_is_refused_with_a_plain_sentence(depth):
    """100k nested brackets used to give "maximum recursion depth exceeded while decoding a JSON
    array"; nesting that JSON parses but no field holds is refused by the field."""
    with pytest.raises(TraceError, match="nests lists or objects too deeply"):
        Trace.from_json("[" * depth + "]" * depth)
    d = copy.deepcopy(EXAMPLES["ar"])
    nested: list = []
    for _ in range(500):
        nested = [nested]
    d["steps"][0]["tokens"] = nested
    with pytest.raises(TraceError, match=r"^steps\[0\]\.tokens\[0\]: input should be a valid integer"):
        Trace.from_json(json.dumps(d))


# ---- issue 24: semantic mutations of every example --------------------------------------------------
SEMANTIC_FLOATS = (0.0, -1.0, 1e300, -1e300, math.inf, -math.inf, math.nan, 1e-300)
SEMANTIC_PER_EXAMPLE = int(os.environ.get("PDL_FUZZ_SEMANTIC", "190"))
# lookahead_auto's mutants are mostly its budget floats, and each one accepted is drawn on every
# page (the slowest of all): a smaller share keeps the slow test near 3 minutes on 2 idle cores
SEMANTIC_SHARE = {"lookahead_auto": 0.75}
TODAY = {m: Trace.from_dict(d).to_dict() for m, d in EXAMPLES.items()}  # the examples in schema 3


def _paths(node, path=()):
    """(lists, floats): the path of every list and every float in a JSON value."""
    lists, floats = [], []
    if isinstance(node, dict):
        items = node.items()
    elif isinstance(node, list):
        lists.append(path)
        items = enumerate(node)
    else:
        return lists, floats + ([path] if type(node) is float else [])
    for k, v in items:
        sub_lists, sub_floats = _paths(v, path + (k,))
        lists += sub_lists
        floats += sub_floats
    return lists, floats


def _at(d, path):
    for k in path:
        d = d[k]
    return d


def _list_mutations(v) -> list[tuple[str, list]]:
    """Emptied, and nested wrongly: scalars one level deeper (all, or the first), lists flattened,
    an object wrapped in a list."""
    if not v:
        return []
    out = [("emptied", [])]
    if all(not isinstance(x, (list, dict)) for x in v):
        out += [("nested one level deeper", [v]), ("first item nested", [[v[0]]] + v[1:])]
    elif all(isinstance(x, list) for x in v):
        out += [("flattened", [y for x in v for y in x])]
    elif isinstance(v[0], dict):
        out += [("first object in a list", [[v[0]]] + v[1:])]
    return out


def semantic_mutations(example: str) -> list[tuple[str, tuple, object]]:
    """(what, path, new value) for every list and float of the example (schema 3)."""
    d = TODAY[example]
    lists, floats = _paths(d)
    out = [(what, p, new) for p in lists for what, new in _list_mutations(_at(d, p))]
    return out + [(f"set to {x!r}", p, x) for p in floats for x in SEMANTIC_FLOATS]


def dropped_steps(example: str) -> list[tuple[str, dict]]:
    """Steps dropped: as they are (the output no longer adds up), and with the tokens they committed
    (a run cut short: the last half, every step but the prefill's token, one in the middle)."""
    d = TODAY[example]
    n = len(d["steps"])
    out = []
    for name, keep in (("the first step", range(1, n)), ("the last step", range(n - 1))):
        out.append((f"{example}: {name} dropped", {**d, "steps": [d["steps"][i] for i in keep]}))
    for name, keep in (("the last half", range(n // 2)), ("every step", range(0)),
                       ("the middle step, renumbered", [i for i in range(n) if i != n // 2])):
        steps = [{**d["steps"][i], "index": j} for j, i in enumerate(keep)]
        toks = [t for s in steps for t in s["tokens"]]
        m = {**d, "steps": steps, "output_ids": d["output_ids"][:1] + toks, "output_pieces": []}
        out.append((f"{example}: {name} dropped with its tokens", m))
    return out


def _put(d: dict, path: tuple, value) -> dict:
    d = copy.deepcopy(d)
    node = d
    for k in path[:-1]:
        node = node[k]
    node[path[-1]] = value
    return d


def _sample(example: str, k: int) -> list[tuple[str, dict]]:
    muts = semantic_mutations(example)
    chosen = random.Random(f"semantic {example}").sample(muts, min(k, len(muts)))
    return [(f"{example}: {'.'.join(map(str, p))} {what}", _put(TODAY[example], p, new)) for what, p, new in chosen]


def semantic_count(example: str) -> int:
    return round(SEMANTIC_PER_EXAMPLE * SEMANTIC_SHARE.get(example, 1))


def test_the_semantic_mutations_cover_every_kind():
    kinds = {what.split(" to ")[0] for m in EXAMPLES for what, _, _ in semantic_mutations(m)}
    assert {"emptied", "nested one level deeper", "first item nested", "flattened", "first object in a list", "set"} <= kinds
    assert sum(min(len(semantic_mutations(m)), semantic_count(m)) + len(dropped_steps(m)) for m in EXAMPLES) >= 1_100


@pytest.mark.slow
@pytest.mark.parametrize("example", list(EXAMPLES))
def test_semantic_mutations(example):
    """About 190 mutants of each example (1,120 in all): refused with one sentence naming the
    field, or drawn by every page."""
    for where, d in _sample(example, semantic_count(example)) + dropped_steps(example):
        check(d, where)


@pytest.mark.parametrize("example", list(EXAMPLES))
def test_semantic_mutations_sample(example):
    """The fast tier's share: a few mutants of each example, and its steps dropped with their tokens."""
    for where, d in _sample(example, 6) + dropped_steps(example)[-1:]:
        check(d, where)
