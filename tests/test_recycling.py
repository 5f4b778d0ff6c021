"""Token Recycling (decoding/methods/recycling.py): the static tree, the matrix the walk reads and
the loop's top-k writes, the record's JSON round trip and validation, the CLI variants, and the
figures' data (viz/recycling.py). Exactness against generate: tests/test_equivalence.py; sampling:
tests/test_sampling.py."""

from __future__ import annotations

import json
import random

import pytest

from decoding.loop import decode
from decoding.methods import REGISTRY, ConfigError, resolve_params
from decoding.methods.recycling import best_walk, prompt_rows, static_shape, walk
from decoding.trace import Trace, TraceError
from tiny import generate_greedy, tiny_lm


def _prompt(seed: int = 1, n: int = 45) -> list[int]:
    rng = random.Random(seed)
    base = [rng.randrange(96) for _ in range(15)]
    return (base * 4)[:n]


@pytest.fixture(scope="module")
def run():
    lm = tiny_lm("llama", 0)
    prompt = _prompt()
    return lm, prompt, decode(lm, prompt, "tr", {}, 37)


def test_default_static_tree_is_about_the_papers_80_nodes():
    shape = static_shape(6, 8, 14, 8)
    assert [sum(level) for level in shape] == [8, 14, 14, 14, 14, 14] and sum(map(sum, shape)) == 78
    assert shape[1][:3] == [8, 6, 0]  # skewed to the best branches: rank r gets branch - r children


def test_walk_is_breadth_first_over_the_rows():
    m = {1: [2, 3, 4], 2: [5, 6], 3: [7], 5: [8]}
    tree = walk(m, 1, depth=3, branch=2, width=3)
    nodes = [(n.token, n.parent, n.depth, n.tag) for n in tree.nodes]
    # level 1: row(1)[:2]; level 2: 2 gets 2 children, 3 gets 1 (rank 1: branch - 1), width 3; level 3: 5 -> 8
    assert nodes == [(2, -1, 1, 0), (3, -1, 1, 1), (5, 0, 2, 0), (6, 0, 2, 1), (7, 1, 2, 0), (8, 2, 3, 0)]
    assert walk({}, 1, 6, 8, 14).nodes == []  # no row: no draft


def test_best_walk_keeps_the_most_likely_nodes_of_the_whole_walk():
    """``best_walk``: the ``limit`` paths of the matrix (columns < width, levels <= depth) whose
    product of acceptance estimates is highest, parents before children, sources by column."""
    rng = random.Random(3)
    matrix = {t: rng.sample(range(40), 5) for t in range(40)}
    p = lambda src, d: 0.7 / int(src[3:]) ** 1.3 * (0.93 + 0.01 * d)

    def score(path: list[int], cols: list[int]) -> float:
        out = 1.0
        for d, c in enumerate(cols, 1):
            out *= p(f"top{c + 1}", d)
        return out

    every: list[tuple[float, tuple[int, ...]]] = []
    stack = [(7, [], [])]
    while stack:
        tok, path, cols = stack.pop()
        if path:
            every.append((score(path, cols), tuple(path)))
        if len(path) < 4:
            stack += [(t, path + [t], cols + [c]) for c, t in enumerate(matrix[tok][:3])]
    for limit in (1, 6, 15, 500):
        tree = best_walk(matrix, 7, 4, 3, p, limit)
        paths: list[tuple[int, ...]] = []
        for i, n in enumerate(tree.nodes):
            assert n.parent < i and n.source == f"top{n.tag + 1}"  # parents first; the column names the source
            paths.append((paths[n.parent] if n.parent >= 0 else ()) + (n.token,))
        scores = dict((q, sc) for sc, q in every)
        best = sorted((sc for sc, _ in every), reverse=True)[:limit]  # paths of one column sequence tie
        assert sorted((scores[q] for q in paths), reverse=True) == pytest.approx(best)
        assert len(set(paths)) == len(paths) == min(limit, len(every))


def test_prompt_rows_latest_first():
    assert prompt_rows([1, 2, 1, 3, 1, 2], 8) == {1: [2, 3], 2: [1], 3: [1]}
    assert prompt_rows([1, 2, 1, 3, 1, 4], 2) == {1: [4, 3], 2: [1], 3: [1]}


def test_greedy_equals_generate_and_trees_are_fed(run):
    lm, prompt, t = run
    assert t.output_ids == generate_greedy(lm, prompt, 37)
    recs = [s.record for s in t.steps]
    assert all(r is not None for r in recs)
    assert t.tokens_per_step > 1.2, "the repeated prompt makes the matrix's drafts match"
    for s in t.steps:
        r = s.record
        assert s.fed == 1 + len(r.tokens) and len(r.path) == sum(o == "recycled" for o in s.origins)
        assert [r.tokens[i] for i in r.path] == s.tokens[:len(r.path)]


def test_the_matrix_replayed_from_the_trace_gives_every_tree(run):
    from viz.recycling import current_token, matrix_before

    _, _, t = run
    done = 1
    for s in t.steps:
        depth = min(6, t.max_new_tokens - done - 1)
        tree = walk(matrix_before(t, s.index), current_token(t, s.index), depth, 8, 14)
        assert [n.token for n in tree.nodes] == s.record.tokens
        assert [n.tag for n in tree.nodes] == s.record.cols
        done += len(s.tokens)


def test_record_round_trips_and_is_validated(run):
    _, _, t = run
    again = Trace.from_json(t.to_json())
    assert again.to_dict() == t.to_dict()
    d = json.loads(t.to_json())
    s = next(i for i, st in enumerate(d["steps"]) if st["record"]["path"])
    bad = json.loads(json.dumps(d))
    bad["steps"][s]["record"]["parents"][0] = 5
    with pytest.raises(TraceError, match=rf"steps\[{s}\]\.record\.parents\[0\]: must be -1 \(the current token\) or an earlier"):
        Trace.from_dict(bad)
    bad = json.loads(json.dumps(d))
    bad["steps"][s]["record"]["path"] = [len(bad["steps"][s]["record"]["tokens"])]
    with pytest.raises(TraceError, match="branch"):
        Trace.from_dict(bad)
    assert t.record_ids() >= {tok for st in t.steps for tok in st.record.tokens}


def test_params_and_cli_variants():
    assert REGISTRY["tr"].label == "Token Recycling" and REGISTRY["tr"].topk_param == "successors"
    with pytest.raises(ConfigError, match="width"):
        resolve_params("tr", {"width": 0})
    from decoding import bench, cli

    a = cli.build_parser().parse_args(["bench", "--prompts", "q.jsonl", "--methods", "ar,tr,tr:auto"])
    assert bench.parse_methods(a.methods) == ["ar", "tr", "tr:auto"]
    assert bench.variant_params("tr:auto", vars(a))["budget"] == "auto"
    assert bench.variant_params("tr:depth=3", vars(a))["depth"] == 3


def test_sampled_run_records_and_round_trips():
    lm = tiny_lm("llama", 0)
    t = decode(lm, _prompt(), "tr", {"temperature": 0.8, "sample_seed": 3}, 24)
    assert all(s.sampling is not None and s.record is not None for s in t.steps)
    assert Trace.from_json(t.to_json()).to_dict() == t.to_dict()


def test_figures_data(run):
    from viz import recycling as R

    _, _, t = run
    si = next(s.index for s in t.steps if s.record.path)
    d = R.tree_data(t, si)
    rec = t.steps[si].record
    assert d["fed"] == len(rec.tokens) and d["accepted"] == len(rec.path)
    assert [n["token"] for n in d["nodes"] if n["accepted"]] == [rec.tokens[i] for i in rec.path]
    assert all(n["x"] >= 1 for n in d["nodes"]) and d["root"]["x"] == 0
    assert sum(on for _, _, on in d["edges"]) == len(rec.path)
    m = R.matrix_rows_data(t, si)
    assert m["rows"][0]["token"] == d["root"]["token"]  # the current token's row first
    assert set(m["rows"][0]["used"]) >= set(n["col"] for n, p in zip(d["nodes"], rec.parents) if p < 0)
    assert rec.cols[rec.path[0]] in m["rows"][0]["accepted"]  # (a token expanded twice reads one row)
    fig = R.tree_animation(t)
    assert len(fig.frames) == sum(bool(s.record.tokens) for s in t.steps)
    assert "accepted" in fig.frames[0].layout.title.text
    assert R.matrix_figure(t, si).layout.title.text.startswith(f"Step {si}")
    assert "steps fed a draft tree" in R.summary_sentence(t)


def test_the_page_renders_a_sidebar_run(monkeypatch):
    """AppTest: Token Recycling chosen in the sidebar, run on a tiny model; its page, Compare and
    Explain render it."""
    pytest.importorskip("streamlit")
    from test_app_sampling import sidebar_run
    from viz import recycling as R

    at = sidebar_run(monkeypatch, tiny_lm("llama", 0), "Token Recycling", 32)
    t = at.session_state["results"].traces["tr"]
    assert all(s.record is not None for s in t.steps)
    at.switch_page("app_pages/recycling.py").run()
    assert not at.exception and not at.error
    assert any(m.value == R.summary_sentence(t) for m in at.markdown)
    assert len(at.get("plotly_chart")) >= 2  # the tree and the matrix rows
    for page in ("app_pages/compare.py", "app_pages/explain.py"):
        at.switch_page(page).run()
        assert not at.exception, page


def test_bench_runs_tr_and_its_auto_variant(monkeypatch, tmp_path):
    """`python -m decoding bench --methods ar,tr,tr:auto` on a tiny model: every row exact."""
    import decoding.model
    from decoding import cli

    lm = tiny_lm("llama", 3)
    lm.encode = lambda text, chat=False: [1 + ord(c) % 90 for c in text][:10]
    monkeypatch.setattr(decoding.model, "load_model", lambda *a, **k: lm)
    prompts, out = tmp_path / "q.jsonl", tmp_path / "bench.jsonl"
    prompts.write_text("\n".join(json.dumps({"question_id": i, "category": c, "turns": [f"{c} prompt {i} {c} prompt"]})
                                 for i, c in enumerate("ab")) + "\n")
    assert cli.main(["bench", "--prompts", str(prompts), "--methods", "ar,tr,tr:auto", "--max-new-tokens", "12",
                     "--out", str(out)]) == 0
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert sorted({r["method"] for r in rows}) == ["ar", "tr", "tr:auto"]
    assert all(r["matches_ar"] is True for r in rows)


@pytest.mark.parametrize("max_new_tokens", [1, 2])
def test_figures_of_a_one_token_and_a_one_step_trace(max_new_tokens):
    from viz import recycling as R

    t = decode(tiny_lm("llama", 0), [5], "tr", {}, max_new_tokens)
    assert t.n_steps == max_new_tokens - 1
    assert R.tree_animation(t).layout.annotations  # says why there is no tree
    for s in t.steps:
        assert R.matrix_figure(t, s.index).layout.annotations
        assert "steps fed a draft tree" in R.summary_sentence(t)
