"""Suffix drafting (decoding/methods/suffix.py): the suffix trie on tiny integer arrays (counts,
the longest match, the draft tree of the docstring's worked example), the method's drafts and
fallback, the cross-run store, the record's JSON round trip and validation. Exactness against
generate: tests/test_equivalence.py; sampling: tests/test_sampling.py."""

from __future__ import annotations

import json

import pytest

from decoding.loop import decode
from decoding.methods import ConfigError, resolve_params
from decoding.methods.suffix import SuffixDrafting, SuffixTrie, band, best_draft, clear_stores, store, suffix_priors
from decoding.trace import Trace, TraceError
from decoding.verify import StepContext
from tiny import generate_greedy, tiny_lm


def trie(text: list[int], depth: int = 4) -> SuffixTrie:
    t = SuffixTrie(depth)
    t.extend_all(text)
    return t


def node(t: SuffixTrie, s: list[int]) -> int | None:
    """The node of string s (None: not in the trie)."""
    v = 0
    for tok in s:
        v = (t.kids[v] or {}).get(tok)
        if v is None:
            return None
    return v


# ---- the trie ------------------------------------------------------------------------------------------
@pytest.mark.parametrize("text,s,count", [
    ([1, 2, 3, 1, 2, 4, 1, 2], [1, 2], 3),  # three occurrences, the last one at the end
    ([1, 2, 3, 1, 2, 4, 1, 2], [2, 3], 1),
    ([1, 2, 3, 1, 2, 4, 1, 2], [3, 1, 2, 4], 1),  # depth 4: the longest string kept
    ([1, 2, 3, 1, 2, 4, 1, 2], [3, 1, 2, 4, 1], None),  # longer than the depth
    ([7, 7, 7, 7], [7], 4),
    ([7, 7, 7, 7], [7, 7, 7], 2),  # overlapping occurrences count
])
def test_counts(text, s, count):
    t = trie(text)
    v = node(t, s)
    assert (None if v is None else t.count[v]) == count


def test_last_is_where_the_latest_occurrence_ended():
    t = trie([1, 2, 3, 1, 2, 4, 1, 2])
    assert t.last[node(t, [1, 2, 3])] == 2 and t.last[node(t, [1, 2])] == 7 and t.last[node(t, [4])] == 5


@pytest.mark.parametrize("text,max_len,match", [
    ([1, 2, 3, 1, 2, 4, 1, 2], 3, [1, 2]),  # (4, 1, 2) occurred only now: no children
    ([1, 2, 3, 1, 2, 4, 1, 2], 1, [2]),  # capped at max_len
    ([1, 2, 3, 4, 5], 4, []),  # nothing repeats
    ([5, 6, 7, 9, 5, 6, 7], 3, [5, 6, 7]),
    ([7, 7, 7, 7], 3, [7, 7, 7]),  # followed (by 7) at the earlier overlapping occurrence
])
def test_longest_match(text, max_len, match):
    t = trie(text)
    m = t.longest_match(t.active, max_len)
    assert t.level[m] == len(match) and m == (node(t, match) if match else 0)


def test_worked_example_draft_tree():
    """The docstring's example: match (1, 2), followed once by 3 and once by 4, each then by 1."""
    t = trie([1, 2, 3, 1, 2, 4, 1, 2])
    m = t.longest_match(t.active, 3)
    assert t.continuations(m) == {3: 1, 4: 1}
    four = [(path, score, ratio) for path, score, ratio, _ in t.draft(m, 4, 0.1)]
    assert four == [((4,), 0.5, 0.5), ((3,), 0.5, 0.5), ((4, 1), 0.5, 1.0), ((3, 1), 0.5, 1.0)]  # ties: the later first
    assert [p for p, *_ in t.draft(m, 2, 0.1)] == [(4,), (3,)]
    assert t.draft(m, 4, 0.6) == []  # both continuations score 0.5: under the minimum


def test_scores_are_products_of_count_ratios():
    # after (9,): 1 three times (then 2, 2, 3), 5 once
    t = trie([9, 1, 2, 9, 1, 2, 9, 1, 3, 9, 5, 0, 9], depth=4)
    m = t.longest_match(t.active, 3)
    got = {p: round(s, 4) for p, s, _, _ in t.draft(m, 10, 0.0)}
    assert got[(1,)] == 0.75 and got[(5,)] == 0.25
    assert got[(1, 2)] == 0.5 and got[(1, 3)] == 0.25 and got[(1, 2, 9)] == 0.5
    order = [p for p, *_ in t.draft(m, 10, 0.0)]
    assert order.index((1,)) < order.index((1, 2)) < order.index((1, 3))  # best first, parents first


def test_follow_reads_another_trie_without_changing_it():
    s = trie([4, 5, 6, 7, 8], depth=6)
    size = len(s.count)
    cur = [0]
    for tok in [1, 4, 5, 6]:
        cur = s.follow(cur, tok)
    assert len(s.count) == size and s.level[s.longest_match(cur, 5)] == 3
    assert s.continuations(s.longest_match(cur, 5)) == {7: 1}


def test_bands():
    assert [band(r) for r in (1.0, 0.9, 0.6, 0.3, 0.05)] == ["sfx90", "sfx90", "sfx50", "sfx20", "sfx0"]


def test_equal_counts_draft_the_most_recent_continuation_first():
    t = SuffixTrie(4)
    t.extend_all([1, 5, 1, 6, 1])  # (1,) was followed by 5, then by 6
    assert [path for path, *_ in t.draft(t.longest_match(t.active, 3), 2, 0.0)] == [(6,), (5,)]
    t.extend_all([5, 1])  # now 5 twice: frequency first, recency only breaks ties
    assert [path for path, *_ in t.draft(t.longest_match(t.active, 1), 4, 0.0) if len(path) == 1] == [(5,), (6,)]


# ---- the method's draft, on a context without a model ---------------------------------------------------
def ctx(prompt: list[int], output: list[int], max_new: int = 64) -> StepContext:
    return StepContext(prompt, output, max_new, False, None, "cpu")


def method(prompt, output, **params) -> SuffixDrafting:
    return SuffixDrafting(ctx(prompt, output), resolve_params("suffix", params))


@pytest.mark.parametrize("params,room,n", [
    ({"alpha": 1, "offset": 0}, 30, 2),  # alpha 1 x match 2
    ({"offset": 0}, 30, 4),  # the default alpha 2
    ({"alpha": 2, "offset": 1}, 30, 5),  # + offset
    ({"alpha": 16, "max_spec": 3}, 30, 3),  # capped
    ({"alpha": 2}, 1, 1),  # what is left of max_new_tokens
])
def test_draft_size_grows_with_the_match(params, room, n):
    m = method([1, 2, 3, 1, 2, 4, 1], [2], min_prob=30, min_match=2, **params)
    tree, match = m.draft(2, room)
    assert (match.length, match.where, match.source) == (2, "prompt", 5)  # 4 at index 5 followed (1, 2), after 3
    assert len(tree.nodes) == n == match.drafted
    # [4], [3] (ratio 0.5 each), then [4, 1], [3, 1] (ratio 1: always followed by 1), all scoring 0.5
    assert [(nd.tag, nd.source) for nd in tree.nodes] == [(0.5, "sfx50m2")] * min(n, 2) + [(0.5, "sfx90m2")] * max(n - 2, 0)


def test_the_draft_that_promises_most_wins_over_the_longest_match():
    # the 3-token match (5, 1, 2) was followed by 7 once: its draft [7, 8, 1] is worth 3 tokens,
    # more than (1, 2)'s (7, 6 or 9, a third each)
    m = method([5, 1, 2, 7, 8, 1, 2, 6, 1, 2, 9, 4], [5, 1, 2], offset=0, alpha=1, min_prob=0, min_match=2)
    tree, match = m.draft(2, 30)
    assert match.length == 3 and [nd.token for nd in tree.nodes] == [7, 8, 1]
    value, node, _ = best_draft(m.trie, m.trie.active, m.p, 30)
    assert m.trie.level[node] == 3 and value == pytest.approx(3.0)
    # (7, 1, 2) was followed by 5, 6 and 9 once each (3 draft tokens worth 1.0); (1, 2) by 5 seven
    # times in 9, and 5 always by 4: its 2-token draft [5, 4] is worth 2 x 7/9 and wins
    t = [10, 7, 1, 2, 5, 4, 11, 7, 1, 2, 6, 0, 12, 7, 1, 2, 9, 0] + [1, 2, 5, 4] * 6 + [3, 7, 1, 2]
    m2 = method(t[:-1], t[-1:], offset=0, alpha=1, min_prob=0, min_match=2)
    value, node, items = best_draft(m2.trie, m2.trie.active, m2.p, 30)
    assert m2.trie.level[node] == 2 and [p for p, *_ in items] == [(5,), (5, 4)] and value == pytest.approx(14 / 9)
    tree, match = m2.draft(2, 30)
    assert match.length == 2 and [nd.token for nd in tree.nodes] == [5, 4]
    longest = m2.trie.longest_match(m2.trie.active, 12)
    assert m2.trie.level[longest] == 3, "the longest match was (7, 1, 2)"


def test_a_short_match_drafts_with_the_fallback_in_one_tree():
    m = method([1, 2, 3, 4, 9, 8], [9], offset=2)  # (9,) was followed by 8: a 1-token match
    m.matrix[9] = [5]
    tree, match = m.draft(9, 30)
    assert (match.length, match.where) == (1, "fallback")
    assert [(nd.token, nd.source, nd.tag) for nd in tree.nodes if nd.parent == -1] == [(8, "sfx90m1", 1.0), (5, "top1", 0.0)]
    alone = method([1, 2, 3, 4, 9, 8], [9], offset=2, fallback=False).draft(9, 30)
    assert alone[1].where == "prompt" and [nd.token for nd in alone[0].nodes] == [8, 9]  # the text 9, 8, 9


def test_a_node_s_source_says_how_long_its_match_was():
    long = method(list(range(10, 30)), list(range(10, 20)))  # the output repeats the prompt: a 10-token match
    tree, match = long.draft(19, 30)
    assert match.length == 10 and {nd.source for nd in tree.nodes} == {"sfx90m9"}
    short = method([1, 2, 3, 4, 9, 8], [9], fallback=False)
    assert {nd.source for nd in short.draft(9, 30)[0].nodes} == {"sfx90m1"}
    p = suffix_priors()  # the budget's starting estimates: a longer match, a likelier continuation
    assert p["sfx90m9"] > p["sfx90m5"] > p["sfx90m3"] > p["sfx90m2"] > p["sfx90m1"] > p["sfx50m1"] > p["sfx0m1"]


def test_where_is_output_for_a_match_in_the_output():
    m = method([9], [5, 6, 7, 5, 6, 7, 5, 6])
    tree, match = m.draft(6, 30)
    # text [9, 5, 6, 7, 5, 6, 7, 5, 6]: (5, 6, 7, 5, 6) occurred at 1..5, then 7 at index 6 and the text
    # ends (a 3-token draft); (5, 6) occurred at 1..2 too, followed by 7 5 6 7 5 6: the longer draft wins
    assert (match.where, match.length, match.source) == ("output", 2, 6)
    assert [nd.token for nd in tree.nodes] == [7, 5, 6, 7, 5, 6]


def test_a_short_match_falls_back_to_the_matrix():
    m = method([1, 2, 3, 4, 1], [9], min_match=2)  # (9,) never occurred; the matrix has no row for 9 yet
    tree, match = m.draft(9, 30)
    assert match.where == "" and not tree.nodes
    m.matrix[9] = [4, 5]
    m.matrix[4] = [6]
    tree, match = m.draft(9, 30)
    assert match.where == "fallback" and [(n.token, n.source) for n in tree.nodes] == [(4, "top1"), (5, "top2"), (6, "top1")]
    off = method([1, 2, 3, 4, 1], [9], fallback=False)
    assert off.matrix == {} and not off.draft(9, 30)[0].nodes


# ---- runs on tiny models ---------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def cyc():
    """vocabulary 8: greedy output repeats itself (tokens per step ~1.5 with suffix drafts alone)."""
    return tiny_lm("llama", 0, vocab=8)


PROMPT = [0, 1, 2, 3, 4, 5, 6, 7, 1, 3, 5]


def test_suffix_drafts_are_accepted_and_recorded(cyc):
    tr = decode(cyc, PROMPT, "suffix", {"fallback": False}, 60)
    assert tr.output_ids == generate_greedy(cyc, PROMPT, 60)
    recs = [s.record for s in tr.steps]
    assert all(r is not None for r in recs)
    assert tr.tokens_per_step > 1.3, "a repetitive output: suffix drafts are accepted"
    for s, r in zip(tr.steps, recs):
        assert sum(o == "suffix" for o in s.origins) == min(len(r.path), len(s.tokens))
        assert all(0 < x <= 1 for x in r.scores) and len(r.scores) == len(r.tokens)
        assert r.where in ("prompt", "output", "") and (r.where == "") == (not r.tokens)
    assert max(r.match for r in recs) >= 4 and max(len(r.path) for r in recs) >= 3


def test_record_round_trips_and_is_validated(cyc):
    tr = decode(cyc, PROMPT, "suffix", {}, 40)
    back = Trace.from_json(tr.to_json())
    assert back == tr and back.steps[3].record == tr.steps[3].record
    d = json.loads(tr.to_json())
    i = next(i for i, s in enumerate(d["steps"]) if s["record"]["tokens"])
    for key, bad, msg in [("where", "elsewhere", "where: input should be .prompt"), ("scores", [2.0] * len(d["steps"][i]["record"]["tokens"]), "probability"),
                          ("path", [99], "branch of the tree"), ("drafted", 0, "drafted"), ("source", 10_000, "source")]:
        e = json.loads(tr.to_json())
        e["steps"][i]["record"][key] = bad
        with pytest.raises(TraceError, match=msg):
            Trace.from_dict(e)


def test_sampled_run_records_and_round_trips(cyc):
    tr = decode(cyc, PROMPT, "suffix", {"temperature": 0.8, "sample_seed": 3}, 40)
    assert all(s.sampling is not None and s.record is not None for s in tr.steps)
    assert Trace.from_json(tr.to_json()) == tr


def test_cross_run_store_is_off_by_default_and_matches_earlier_outputs(cyc):
    clear_stores()
    assert resolve_params("suffix", None)["cross_run"] is False
    prompt = [3, 1, 4, 1, 5]
    first = decode(cyc, prompt, "suffix", {"cross_run": True, "fallback": False}, 30)
    assert store(first.params["max_match"] + first.params["max_spec"]).n == len(first.output_ids)
    again = decode(cyc, prompt, "suffix", {"cross_run": True, "fallback": False}, 30)
    alone = decode(cyc, prompt, "suffix", {"fallback": False}, 30)
    assert again.output_ids == alone.output_ids == first.output_ids
    assert again.params["cross_run"] is True and any(s.record.where == "earlier" for s in again.steps)
    assert again.n_steps < alone.n_steps, "the earlier run's output is the answer"
    from viz import suffix as S
    si = next(s.index for s in again.steps if s.record.tokens)
    assert "cross-run store of earlier outputs: on" in S.tree_figure(again, si).layout.title.text
    assert "cross-run store" not in S.tree_figure(alone, next(s.index for s in alone.steps if s.record.tokens)).layout.title.text
    assert "store of earlier outputs was on" in S.summary_sentence(again)
    clear_stores()
    assert decode(cyc, prompt, "suffix", {"cross_run": True, "fallback": False}, 30).n_steps == alone.n_steps


def test_budget_auto_is_exact_and_records_its_choices(cyc):
    tr = decode(cyc, PROMPT, "suffix", {"budget": "auto"}, 50)
    assert tr.output_ids == generate_greedy(cyc, PROMPT, 50)
    assert all(s.budget is not None for s in tr.steps)
    assert any(s.budget.fed > 1 for s in tr.steps) and all(s.fed == s.budget.fed for s in tr.steps)
    assert set(tr.steps[-1].budget.acceptance) >= {"sfx90m9", "sfx50m1", "top1"}


@pytest.mark.parametrize("params,msg", [({"alpha": 0}, "alpha must be between"), ({"min_prob": 101}, "min_prob"),
                                        ({"cross_run": 1}, "true or false"), ({"max_spec": 65}, "max_spec")])
def test_bad_params(params, msg):
    with pytest.raises(ConfigError, match=msg):
        resolve_params("suffix", params)


def test_compare_and_explain_know_its_tokens(cyc):
    from decoding.perf.account import reasons
    from viz import compare
    from viz.style import PROVENANCE

    tr = decode(cyc, PROMPT, "suffix", {"fallback": False}, 40)
    n = sum(o == "suffix" for s in tr.steps for o in s.origins)
    assert n > 5
    bars = {b.name: (sum(b.x), b.marker.color) for b in compare.provenance_figure({"suffix": tr}).data}
    assert bars[PROVENANCE["suffix"][1]] == (n, PROVENANCE["suffix"][0])
    assert f"background:{PROVENANCE['suffix'][0]}" in compare.provenance_html(tr)
    assert any(r.startswith(f"{n / len(tr.output_ids):.0%} of the output tokens were drafted by suffix matching")
               for r in reasons(tr))


def test_cost_script_measures_a_text_with_repeats():
    """scripts/suffix_cost.py on 300 tokens (a smoke run: the figures are meaningful on an idle machine only)."""
    import importlib.util
    from pathlib import Path

    path = Path(__file__).resolve().parents[1] / "scripts" / "suffix_cost.py"
    spec = importlib.util.spec_from_file_location("suffix_cost", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    seq = mod.text(300, 50_000, 0.5, 0)
    assert len(seq) == 300 and len(set(seq)) < 280  # copied spans repeat ids
    p = resolve_params("suffix", None)
    r = mod.measure(seq, p)
    assert r["update_us"] > 0 and r["draft_us"] > 0 and r["draft_tokens"] > 0
    assert r["nodes"] == len(trie(seq, p["max_match"] + p["max_spec"]).count)


# ---- the views (viz/suffix.py, app_pages/suffix.py) -----------------------------------------------------
def test_match_pieces_mark_the_suffix_its_earlier_occurrence_and_the_next_token(cyc):
    from viz import suffix as S

    tr = decode(cyc, PROMPT, "suffix", {"fallback": False}, 40)
    si = next(s.index for s in tr.steps if s.record.where in ("prompt", "output") and s.record.match >= 2)
    r, ids = tr.steps[si].record, S.text_before(tr, si)
    assert ids == (PROMPT + tr.output_ids)[:len(ids)] and ids[-1] == tr.output_ids[sum(len(s.tokens) for s in tr.steps[:si])]
    got = {i: kind for i, _, kind in S.match_pieces(tr, si) if i >= 0}
    assert [i for i, k in got.items() if k == "suffix"] == list(range(len(ids) - r.match, len(ids)))
    assert got[r.source] in ("next", "suffix")
    earlier = [i for i in range(r.source - r.match, r.source) if got[i] != "suffix"]
    assert all(got[i] == "earlier" for i in earlier)
    # the earlier occurrence really is the same text, and what followed it is the draft's best first token
    assert ids[r.source - r.match:r.source] == ids[len(ids) - r.match:]
    assert ids[r.source] == r.tokens[r.scores.index(max(r.scores))] or r.drafted > len(r.tokens)
    html = S.match_html(tr, si)
    assert html.count(S.MATCH_KINDS["suffix"][0]) >= r.match + 1  # the legend's swatch and each suffix token


def test_tree_figure_draws_the_fed_tree_with_its_scores(cyc):
    from viz import suffix as S
    from viz.style import PROVENANCE

    tr = decode(cyc, PROMPT, "suffix", {"fallback": False, "alpha": 2}, 40)
    si = next(s.index for s in tr.steps if len(s.record.path) >= 2)
    r = tr.steps[si].record
    fig = S.tree_figure(tr, si)
    nodes = next(d for d in fig.data if d.mode == "markers+text")
    assert len(nodes.x) == len(r.tokens) + 1  # the current token too
    assert list(nodes.marker.color).count(PROVENANCE["suffix"][0]) == len(r.path)
    assert all(f"{s:.2f}" in lab for s, lab in zip(r.scores, nodes.text))
    assert fig.layout.title.text.endswith(f"{len(r.tokens)} tokens, {len(r.path)} accepted")
    best = S.best_step(tr)
    assert len(tr.steps[best].record.path) == max(len(s.record.path) for s in tr.steps)
    none = next((s.index for s in tr.steps if not s.record.tokens), None)
    if none is not None:
        assert "fed no draft" in S.tree_figure(tr, none).layout.annotations[0].text
    assert "steps drafted from a suffix match" in S.summary_sentence(tr)


def test_match_html_escapes_model_text():
    from viz import suffix as S

    lm = tiny_lm("llama", 0, vocab=8)
    tr = decode(lm, PROMPT, "suffix", {}, 20)
    tr.prompt_pieces = ["<b>x</b>"] * len(tr.prompt_ids)
    tr.output_pieces = ["<script>"] * len(tr.output_ids)
    for si in S.suffix_steps(tr):
        html = S.match_html(tr, si)
        assert "<script>" not in html and "<b>x" not in html


def test_the_page_renders_a_sidebar_run(monkeypatch):
    """AppTest: suffix drafting chosen in the sidebar, run on a tiny model; its page, Compare and Explain render it."""
    pytest.importorskip("streamlit")
    from test_app_sampling import sidebar_run
    from viz import suffix as S

    at = sidebar_run(monkeypatch, tiny_lm("llama", 0), "Suffix drafting", 32)
    t = at.session_state["results"].traces["suffix"]
    assert all(s.record is not None for s in t.steps)
    at.switch_page("app_pages/suffix.py").run()
    assert not at.exception and not at.error
    assert any(m.value == S.summary_sentence(t) for m in at.markdown)
    assert len(at.get("plotly_chart")) >= 1
    for page in ("app_pages/compare.py", "app_pages/explain.py"):
        at.switch_page(page).run()
        assert not at.exception, page


def test_tree_excerpt_keeps_the_accepted_branch_and_the_first_fed():
    from types import SimpleNamespace

    from viz import suffix as S
    # 0 -> 1 -> 2 (accepted: 0, 3, 4), 0 -> 3 -> 4, 5 (root), 6 under 5
    r = SimpleNamespace(tokens=[10, 11, 12, 13, 14, 15, 16], parents=[-1, 0, 1, 0, 3, -1, 5],
                        scores=[0.5] * 7, path=[0, 3, 4])
    assert S.tree_excerpt(r) == (r.tokens, r.parents, r.scores, r.path)
    tokens, parents, scores, path = S.tree_excerpt(r, 4)
    assert tokens == [10, 11, 13, 14] and parents == [-1, 0, 0, 2] and path == [0, 2, 3]
    assert S.tree_excerpt(r, 2)[0] == [10, 13, 14], "never fewer than the accepted branch"
    tokens, parents, _, path = S.tree_excerpt(r, 6)
    assert tokens == [10, 11, 12, 13, 14, 15] and parents == [-1, 0, 1, 0, 3, -1] and path == [0, 3, 4]
