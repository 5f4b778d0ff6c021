"""Figure builders on hand-made traces: frames, the colour of given cells at given frames, text."""

from __future__ import annotations

import json
from pathlib import Path

import plotly.graph_objects as go
import pytest

from decoding import analysis
from decoding.trace import Trace
from tests.viz_traces import ar_trace, jacobi_ff_trace, jacobi_trace, lookahead_trace
from viz import compare, jacobi, lookahead, style
from viz.style import JACOBI_STATES, PROVENANCE

ROOT = Path(__file__).resolve().parents[1]


def colour(state: str) -> str:
    return JACOBI_STATES[state][0]


def legend_names(fig: go.Figure) -> list[str]:
    return [t.name for t in fig.data if t.showlegend]


# ---- style ------------------------------------------------------------------------------------------
@pytest.mark.parametrize("piece, label", [
    (" the", "␣the"), ("\n", "↵"), ("<script>", "&lt;scrip…"), ("a&b", "a&amp;b"), ("", "∅"),
])
def test_cell_label_shows_whitespace_and_escapes(piece, label):
    assert style.cell_label(piece, width=7 if piece != "<script>" else 7) == label


def test_pages_split_frames():
    assert style.pages(450, 200) == [(0, 200), (200, 400), (400, 450)]
    assert style.pages(0) == [(0, 0)]


def test_token_texts_cover_prompt_and_output_and_fall_back_to_id():
    t = jacobi_trace()
    texts = style.token_texts(t)
    assert texts[3] == " <C>" and texts[11] == " <b>"
    assert style.piece(texts, 5) == "⟨5⟩"


# ---- Jacobi -----------------------------------------------------------------------------------------
def test_jacobi_animation_frames_and_cells():
    t = jacobi_trace()
    fig = jacobi.block_animation(t, 0)
    # one frame per state: the initial guess, then the block after each of the 3 iterations
    assert [f.name for f in fig.frames] == ["0", "1", "2", "3"]
    f0 = fig.frames[0].data[0]
    # frame 0: the initial guess [10 | 2 3 1] against the fixed point [10 11 12 13]
    assert list(f0.marker.color) == [colour("committed")] + [colour("wrong")] * 3
    assert list(f0.text) == ["␣x", "␣B", "␣&lt;C&gt;", "A"]
    assert "initial guess" in fig.frames[0].layout.title.text
    # frame 1 = after iteration 1 ([10 11 5 13]): 11 made right as AR would, and committed (outlined);
    # 5 is wrong, 13 is already right behind it and never changes: stationary, not fast-forwarded
    f1 = fig.frames[1].data[0]
    assert list(f1.marker.color) == [colour(s) for s in ("committed", "new", "wrong", "stationary")]
    assert list(f1.marker.line.width) == [1, 5, 1, 1]
    assert f1.text[1] == "␣&lt;b&gt;"  # model text is escaped
    # frame 2: 12 made right; 13 joins the right prefix without being fast-forwarded
    f2 = fig.frames[2].data[0]
    assert list(f2.marker.color) == [colour(s) for s in ("committed", "committed", "new", "stationary")]
    assert colour("fast_forward") not in list(f2.marker.color)
    # every frame follows decoding.analysis' states and commits
    commits = analysis.jacobi_commits(t, 0)
    for k, row in enumerate(analysis.jacobi_cell_states(t, 0)):
        assert list(fig.frames[k].data[0].marker.color) == [colour(s) for s in row]
        nxt = [4] if list(fig.frames[k].data[1].marker.line.width) == [5] else []  # the next block's first token
        assert [i for i, w in enumerate(fig.frames[k].data[0].marker.line.width) if w == 5] + nxt == commits[k]
    # the last frame: the fixed point, all committed
    assert list(fig.frames[-1].data[0].marker.color) == [colour("committed")] * 4
    assert "fixed point" in fig.frames[-1].layout.title.text


def test_jacobi_fast_forward_is_shown_at_the_forward_that_made_it():
    """Issue 11, error 2: iteration 1's forward makes 11, 12, 13 right at once: frame 1 (after
    iteration 1) shows 12 and 13 fast-forwarded; iteration 2 commits them (outlined in frame 2)."""
    t = jacobi_ff_trace()
    fig = jacobi.block_animation(t, 0)
    f1, f2 = fig.frames[1].data[0], fig.frames[2].data[0]
    assert list(f1.marker.color) == [colour(s) for s in ("committed", "new", "fast_forward", "fast_forward", "wrong")]
    assert list(f1.marker.line.width) == [1, 5, 1, 1, 1]  # only 11 is committed by iteration 1
    assert "2 fast-forwarded" in fig.frames[1].layout.title.text
    assert colour("fast_forward") not in list(f2.marker.color)
    assert list(f2.marker.line.width) == [1, 1, 5, 5, 5]  # iteration 2 commits 12 13 and its own 14
    assert analysis.jacobi_counts(t)[0]["fast_forwarded"] == 2
    assert jacobi.COMMIT_LEGEND in legend_names(fig)


def outlined(fig) -> int:
    """Outlined (committed) cells over all frames of a Jacobi animation, the next block's cell included."""
    return sum(sum(1 for w in d.marker.line.width if w == 5) for f in fig.frames for d in f.data)


def test_jacobi_last_iteration_commits_the_next_blocks_first_token():
    """Issue 23, item 4: the last iteration read "0 committed" though it commits the next block's
    first token, and the outlines added up to one less than the tokens the counts give."""
    t = jacobi_ff_trace()  # iteration 3 feeds 14 alone and commits 99, the next block's first token
    fig = jacobi.block_animation(t, 0)
    last = fig.frames[-1]
    assert "1 committed: the next block's first token" in last.layout.title.text
    nxt = last.data[1]  # the cell right of the block
    assert list(nxt.x) == [5] and list(nxt.text) == ["␣v"] and list(nxt.marker.line.width) == [5]
    assert list(nxt.marker.color) == [colour("new")]
    assert list(fig.frames[1].data[1].x) == [None]  # not there before it is committed
    assert list(fig.layout.xaxis.ticktext)[-1] == jacobi.NEXT_LABEL
    assert outlined(fig) == analysis.jacobi_counts(t)[0]["tokens"] == 5
    # the hand-made block whose last iteration commits a guess and the next block's first token
    t2 = jacobi_trace()
    fig2 = jacobi.block_animation(t2, 0)
    assert "2 committed, the last is the next block's first token" in fig2.frames[-1].layout.title.text
    assert outlined(fig2) == analysis.jacobi_counts(t2)[0]["tokens"] == 4
    # the static figure: one more cell, outlined, in the last row
    cells = jacobi.block_figure(t, 0).data[0]
    assert sum(1 for w in cells.marker.line.width if w >= 4) == 5
    # the shipped example: every block's outlines add up to its committed tokens (16 for a full one)
    ex = Trace.load(str(ROOT / "assets" / "example_jacobi.json"))
    for c in analysis.jacobi_counts(ex):
        assert outlined(jacobi.block_animation(ex, c["block"])) == c["tokens"]


def test_fast_forwarded_and_wrong_look_apart_for_every_colour_vision():
    """Issue 23, item 8: amber "fast-forwarded" and vermillion "wrong" looked alike on a projector.
    Simulated for normal vision and the three dichromacies, the two fills are far apart (CIELAB
    distance >= 30; orange and vermillion were 18 apart under deuteranopia) and differ in lightness."""
    from cvd import MACHADO, de, seen

    ff, wrong = colour("fast_forward"), colour("wrong")
    assert min(de(ff, wrong, kind) for kind in MACHADO) >= 30
    assert abs(seen(ff, "normal")[0] - seen(wrong, "normal")[0]) >= 25
    # and every pair of Jacobi state colours stays apart for every colour vision
    fills = [c for c, _ in JACOBI_STATES.values()]
    assert min(de(a, b, kind) for i, a in enumerate(fills) for b in fills[i + 1:] for kind in MACHADO) >= 15


def test_jacobi_colours_are_said_to_be_read_in_hindsight():
    """Issue 23, item 8: the colours use the fixed point, known only in hindsight; the legend says so."""
    for fig in (jacobi.block_animation(jacobi_trace(), 0), jacobi.block_figure(jacobi_trace(), 0)):
        assert "hindsight" in fig.layout.legend.title.text
    assert "hindsight" in jacobi.HINDSIGHT and "fixed point" in jacobi.HINDSIGHT


def test_jacobi_animation_has_controls_fixed_axes_and_a_legend_for_every_state():
    fig = jacobi.block_animation(jacobi_trace(), 0)
    menu = fig.layout.updatemenus[0]
    assert [b.label for b in menu.buttons] == ["▶ Play", "❚❚ Pause"]
    assert menu.buttons[0].args[1]["frame"]["redraw"] is True
    assert [s.args[0][0] for s in fig.layout.sliders[0].steps] == ["0", "1", "2", "3"]
    assert [s.label for s in fig.layout.sliders[0].steps] == ["guess", "1", "2", "3"]
    # positions 0..3 and, right of the block, the next block's first token (committed by the last iteration)
    assert fig.layout.xaxis.fixedrange and tuple(fig.layout.xaxis.range) == (-0.6, 4.6)
    assert set(legend_names(fig)) == {label for _, label in JACOBI_STATES.values()} | {jacobi.COMMIT_LEGEND}
    # the fixed point row (trace 1) shows the block's final tokens
    assert list(fig.data[1].text) == ["␣x", "␣&lt;b&gt;", "&amp;", "↵"]
    json.loads(fig.to_json())  # serialisable


def test_jacobi_block_figure_rows_are_states():
    t = jacobi_trace()
    fig = jacobi.block_figure(t, 0)
    cells = fig.data[0]
    # the initial guess + the state after each of 3 iterations, n = 4, and the next block's first token
    assert len(cells.x) == 4 * 4 + 1
    ys = list(cells.y)
    row1 = [c for c, y in zip(cells.marker.color, ys) if y == 1]  # after iteration 1
    assert row1[2:] == [colour("wrong"), colour("stationary")]
    assert list(fig.layout.yaxis.ticktext) == ["guess", "after it 1", "after it 2", "after it 3"]


def test_jacobi_missing_block_gives_an_explaining_figure():
    fig = jacobi.block_animation(jacobi_trace(), 7)
    assert not fig.frames and "No Jacobi iterations" in fig.layout.annotations[0].text


def test_jacobi_counts_figure_and_its_sentence_come_from_one_function():
    """Issue 11, error 3: the words and the bars read decoding.analysis.jacobi_counts."""
    t = jacobi_trace()
    fig = jacobi.counts_figure(t)
    c = analysis.jacobi_counts(t)[0]
    assert [tr.name for tr in fig.data] == [name for _, _, name in jacobi.COUNT_BARS]
    assert [tr.y[0] for tr in fig.data] == [c["tokens"], c["iterations"], c["fast_forwarded"], c["stationary"]]
    assert (c["tokens"], c["iterations"]) == (4, 3)  # 11 12 13 and the next block's 99
    assert "a full block commits 4 tokens, so 4 iterations" in fig.layout.title.text
    words = jacobi.counts_sentence(t)
    assert "A full block commits 4 tokens" in words and "4 iterations" in words
    assert "committed 4 tokens in 3 iterations, with 0 fast-forwarded and 1 stationary" in words


def test_jacobi_frames_are_paged():
    t = jacobi_trace()
    # a long block: 250 more iterations that change nothing
    from decoding.methods.jacobi import JacobiRecord
    from decoding.trace import Step
    for i in range(3, 253):
        t.steps.append(Step(i, 1, [], 0.0, 0.0, record=JacobiRecord(0, i, 3, [10, 11, 12, 13], [10, 11, 12, 13], 0)))
    fig = jacobi.block_animation(t, 0, page=0)
    fig2 = jacobi.block_animation(t, 0, page=1)
    assert len(fig.frames) == style.MAX_FRAMES
    assert fig2.frames[0].name == str(style.MAX_FRAMES)
    assert len(fig2.frames) == 254 - style.MAX_FRAMES  # 253 iterations + the final state, second page


def test_page_items_follow_pages():
    items = list(range(450))
    assert [style.page_items(items, p, 200)[0] for p in (0, 1, 2)] == [0, 200, 400]
    assert style.page_items(items, 9, 200) == items[400:]  # out of range: the nearest page
    assert style.page_items([], 0) == [] and style.page_of(399, 200) == 1


# ---- lookahead --------------------------------------------------------------------------------------
def _cell(frame_data, x, y):
    for i, (cx, cy) in enumerate(zip(frame_data.x, frame_data.y)):
        if (cx, cy) == (x, y):
            return i
    raise AssertionError(f"no cell at {(x, y)}")


def test_lookahead_animation_frames_and_cells():
    t = lookahead_trace()
    fig = lookahead.step_animation(t)
    assert [f.name for f in fig.frames] == ["0", "1"]
    grid = lookahead._Grid(2, 3, 2)
    d1 = fig.frames[1].data[0]
    # the current token (11, " y") sits at column 0 of level 0
    i = _cell(d1, 0, grid.level(0))
    assert d1.text[i] == "␣y" and d1.marker.color[i] == lookahead.LOOKAHEAD_CELLS["current"][0]
    # both window columns were harvested: outlined
    for j in (1, 2):
        for l in (0, 1):
            k = _cell(d1, j, grid.level(l))
            assert d1.marker.line.color[k] == lookahead.HARVEST_LINE and d1.marker.line.width[k] == 4
    # candidate 1 (chosen) fully accepted, candidate 2 matched one token
    acc, mat, no = (lookahead.LOOKAHEAD_CELLS[k][0] for k in ("accepted", "matched", "candidate"))
    assert [d1.marker.color[_cell(d1, x, grid.cand0)] for x in (1, 2)] == [acc, acc]
    assert [d1.marker.color[_cell(d1, x, grid.cand0 + 1)] for x in (1, 2)] == [mat, no]
    # committed row: 12 13 14 coloured by provenance
    prov = analysis.provenance(t)[2:5]
    assert [d1.marker.color[_cell(d1, x, grid.committed)] for x in (1, 2, 3)] == [PROVENANCE[p][0] for p in prov]
    assert d1.text[_cell(d1, 1, grid.committed)] == "␣&lt;z&gt;"
    # step 0: the window is filling; its next level is step 1's top level (20 21)
    d0 = fig.frames[0].data[0]
    assert [d0.hovertext[_cell(d0, x, grid.next)].split("(id ")[1][:2] for x in (1, 2)] == ["20", "21"]
    assert "accepted 2 from the pool" in fig.frames[1].layout.title.text


def test_lookahead_animation_legend_and_controls():
    fig = lookahead.step_animation(lookahead_trace())
    names = legend_names(fig)
    for _, label in lookahead.LOOKAHEAD_CELLS.values():
        assert label in names
    assert "harvested n-gram column" in names
    assert list(fig.layout.sliders[0].steps[1].args[0]) == ["1"]
    assert fig.layout.yaxis.fixedrange


def test_position_view_puts_each_cell_at_its_sequence_position():
    """Issue 11, figure 4: x = position - t, y = level; level l, column j at t + 1 + l + j."""
    t = lookahead_trace()
    fig = lookahead.position_animation(t)
    assert [f.name for f in fig.frames] == ["0", "1"]
    diag, d1 = fig.frames[1].data
    hover = lambda x, y: d1.hovertext[_cell(d1, x, y)]
    tok = lambda x, y: int(hover(x, y).split("(id ")[1].rstrip(")"))
    # step 1: window [[1 2] [20 21]]: level 0 at t+1, t+2; level 1 at t+2, t+3
    assert [tok(1, 0), tok(2, 0), tok(2, 1), tok(3, 1)] == [1, 2, 20, 21]
    assert "position t+3" in hover(3, 1)
    # the next level (the harvested n-grams' last tokens 30 31) one position further: t+3, t+4
    assert [tok(3, 2), tok(4, 2)] == [30, 31]
    # each harvested n-gram is one diagonal: (1 20 30) and (2 21 31)
    assert list(diag.x) == [1, 2, 3, None, 2, 3, 4, None] and list(diag.y) == [0, 1, 2, None, 0, 1, 2, None]
    # the text row: the context 10 at t-1, the current token 11 at t, then the committed 12 13 14
    assert [tok(x, -1) for x in (-1, 0, 1, 2, 3)] == [10, 11, 12, 13, 14]
    assert d1.marker.color[_cell(d1, 0, -1)] == lookahead.LOOKAHEAD_CELLS["current"][0]
    prov = analysis.provenance(t)[2:5]
    assert [d1.marker.color[_cell(d1, x, -1)] for x in (1, 2, 3)] == [PROVENANCE[p][0] for p in prov]
    # candidates after t, below the text: (12 13) accepted on row -2, (12 40) on row -3
    assert [tok(1, -2), tok(2, -2), tok(1, -3), tok(2, -3)] == [12, 13, 12, 40]
    acc = lookahead.LOOKAHEAD_CELLS["accepted"][0]
    assert [d1.marker.color[_cell(d1, x, -2)] for x in (1, 2)] == [acc, acc]
    # step 0 (the window filling): its next level is step 1's level 1 (20 21) at t+2, t+3 on level 1
    d0 = fig.frames[0].data[1]
    assert [d0.hovertext[_cell(d0, x, 1)].split("(id ")[1][:2] for x in (2, 3)] == ["20", "21"]
    assert list(fig.frames[0].data[0].x) == [None]  # nothing harvested yet
    assert list(fig.layout.xaxis.ticktext)[:4] == ["t-3", "t-2", "t-1", "t"]
    assert "at t = 4" in fig.frames[1].layout.title.text  # prompt of 3 tokens, output 10 11: t = 3 + 1
    assert "harvested n-gram (a diagonal)" in legend_names(fig)


def test_compact_view_says_its_x_is_a_column():
    """The compact view's x tick said 'col j / tok j+1', wrong for levels >= 1: now 'col j', with the
    position in the axis title and every cell's hover."""
    fig = lookahead.step_animation(lookahead_trace())
    assert list(fig.layout.xaxis.ticktext)[:3] == ["cur", "col 0", "col 1"]
    assert "t+1+l+j" in fig.layout.xaxis.title.text
    d1 = fig.frames[1].data[0]
    grid = lookahead.step_grid(lookahead_trace())
    assert "position t+3" in d1.hovertext[_cell(d1, 2, grid.level(1))]  # level 1, column 1


def test_pool_sources_sentence():
    """Issue 11, item 9: the Lookahead page says which pool sources the shown trace used."""
    t = lookahead_trace()  # seed_pool_prompt on, harvest_output off
    assert lookahead.pool_sources(t) == ["window", "prompt"]
    words = lookahead.pool_sources_sentence(t)
    assert "the prompt's n-grams (seeded before the first step: 1)" in words and "committed output" not in words
    t.params.update(seed_pool_prompt=False, harvest_output=False)
    assert lookahead.pool_sources(t) == ["window"]
    assert "window only, as in the lookahead paper" in lookahead.pool_sources_sentence(t)
    d = t.to_dict()
    d["params"].pop("harvest_output")  # missing from a file: loading fills in the registry's default (on)
    from decoding.trace import Trace
    assert lookahead.pool_sources(Trace.from_dict(d)) == ["window", "output"]


def test_pool_rows_and_graph():
    t = lookahead_trace()
    rows = lookahead.pool_rows(t, 1)  # before step 1: the prompt seed and (11 12 13)
    assert {(r["key id"], r["continuation ids"]) for r in rows} == {(11, "12 40"), (11, "12 13")}
    fig = lookahead.pool_graph_animation(t)
    assert [f.name for f in fig.frames] == ["0", "1"]
    keys = fig.frames[1].data[2]
    assert list(keys.text) == ["␣y"] and keys.marker.color[0] == style.BLACK  # key 11 = current token
    grams = fig.frames[1].data[1]
    assert sorted(grams.marker.color) == sorted([style.GREEN, style.YELLOW])  # accepted, prefix matched
    # the pool grows: 1 key at step 0 -> 1 key (the harvest lands after step 1)
    assert "1 keys, 1 n-grams" in fig.frames[0].layout.title.text


def test_mask_figure_matches_decoding_masks_and_explains_itself():
    from decoding.methods import lookahead_mask as masks
    W, N, G = 3, 3, 2
    fig = lookahead.mask_figure(W, N, G)
    hm = fig.data[0]
    layout = masks.lookahead_layout(W, N, G, N - 1)
    allowed = masks.lookahead_allowed(layout)
    q = len(layout)
    assert len(hm.z) == q == 1 + W * (N - 1) + G * (N - 1)
    for i in range(q):
        for j in range(q):
            assert (hm.z[i][j] != 0) == allowed[i][j]
    labels = list(fig.layout.xaxis.ticktext)
    assert list(hm.x) == list(range(q))  # numeric axes: equal labels never merge into one column
    cand, win = labels.index("g1t1"), labels.index("L0c0")
    assert "never see each other" in hm.text[cand][win]
    assert "sees the current token" not in hm.text[cand][win]
    assert "why:" in hm.text[labels.index("L1c2")][labels.index("L0c1")]
    assert len(legend_names(fig)) == len(lookahead.MASK_COLOURS)


def test_step_mask_is_the_mask_the_step_fed_labelled_with_its_tokens():
    """Issue 23, item 3: the inspector's mask is the one each step of a real run used: the layout
    ``lookahead_mask`` builds for that step's window levels and candidates, as many rows as the step
    fed (Step.fed, counted by the decoding loop), each labelled with the token fed there."""
    from decoding.loop import decode
    from decoding.methods import lookahead_mask as masks
    from tiny import tiny_lm
    lm = tiny_lm("llama", 2)
    t = decode(lm, [3, 4, 5, 3, 4, 5, 3, 4, 6, 7, 3, 4, 5], "lookahead", {"W": 3, "N": 3, "G": 2}, 40)
    texts = style.token_texts(t)
    checked = 0
    for si in lookahead.lookahead_steps(t):
        rec, step = t.steps[si].record, t.steps[si]
        layout = lookahead.step_layout(t, si)
        assert len(layout) == step.fed
        want = masks.lookahead_layout(3, 3, len(rec.candidates), len(rec.window))
        assert [{k: v for k, v in r.items() if k != "token"} for r in layout] == want
        fed = [t.output_ids[lookahead.committed_before(t)[si] - 1]] + [x for lv in rec.window for x in lv] + \
            [x for c in rec.candidates for x in c]
        assert [r["token"] for r in layout] == fed
        fig = lookahead.step_mask_figure(t, si)
        allowed = masks.lookahead_allowed(want)
        assert [[z != 0 for z in row] for row in fig.data[0].z] == allowed
        ticks = list(fig.layout.xaxis.ticktext)
        assert all(tk.endswith(style.cell_label(style.piece(texts, tok), 6)) for tk, tok in zip(ticks, fed))
        checked += bool(rec.candidates)
    assert checked  # steps with candidates were among them
    # an excerpt keeps the accepted candidate and real column numbers
    si = next(i for i in lookahead.lookahead_steps(t) if t.steps[i].record.chosen >= 0)
    ex = lookahead.step_layout(t, si, max_columns=1, max_candidates=1)
    assert {r["column"] for r in ex if r["kind"] == "window"} == {0}
    assert {r["candidate"] for r in ex if r["kind"] == "candidate"} == {t.steps[si].record.chosen}
    assert "an excerpt" in lookahead.step_mask_figure(t, si, 1, 1).layout.title.text


def test_pool_entries_of_the_current_token_with_their_verification():
    """Hand-made trace, step 1 (current token 11): the pool holds (12 40) from the prompt seed, then
    (12 13) added at step 0; both were verified, (12 13) matched 2 and was accepted."""
    t = lookahead_trace()
    entries = lookahead.pool_entries(t, 1)
    assert [(e["tokens"], e["candidate"], e["matched"], e["accepted"]) for e in entries] == \
        [([12, 40], 1, 1, False), ([12, 13], 0, 2, True)]
    fig = lookahead.pool_entries_figure(t, 1)
    cells = fig.data[0]
    colours = dict(zip(zip(cells.x, cells.y), cells.marker.color))
    assert colours[(0, 0)] == colours[(0, 1)] == style.BLACK  # the key
    assert colours[(1, 0)] == style.YELLOW and colours[(2, 0)] == style.GREY  # (12 40): 12 matched, 40 not
    assert colours[(1, 1)] == colours[(2, 1)] == style.GREEN  # (12 13) accepted
    assert "2 n-gram(s)" in fig.layout.title.text and "2 verified" in fig.layout.title.text
    assert lookahead.pool_entries(t, 0) == []  # step 0's current token 10 keys nothing: a message, not a blank
    assert "held no n-gram starting with the current token '␣x'" in lookahead.pool_entries_figure(t, 0).layout.annotations[0].text
    # a pool entry the step did not feed: sky blue
    t.steps[1].record.candidates, t.steps[1].record.matched, t.steps[1].record.origins = [[12, 13]], [2], ["window"]
    e = lookahead.pool_entries(t, 1)
    assert [(x["candidate"], x["accepted"]) for x in e] == [(None, False), (0, True)]
    assert lookahead.pool_entries_figure(t, 1).data[0].marker.color[1] == style.SKY
    assert lookahead.telling_step(t) == 1


def test_mask_colours_come_from_rule_ids_not_sentences(monkeypatch):
    """The heatmap's colour of a cell is its rule id's colour; rewording the sentences changes the
    hover text only (it used to search the sentences for English substrings)."""
    from decoding.methods import lookahead_mask as masks
    W, N, G = 3, 4, 2
    before = lookahead.mask_figure(W, N, G).data[0].z
    layout = masks.lookahead_layout(W, N, G, N - 1)
    order = list(lookahead.MASK_COLOURS)
    for i, q in enumerate(layout):
        for j, k in enumerate(layout):
            assert before[i][j] == order.index(masks.rule(q, k))
    monkeypatch.setattr(masks, "SEES", {r: f"rule number {i}" for i, r in enumerate(masks.SEES)})
    after = lookahead.mask_figure(W, N, G).data[0]
    assert after.z == before and "rule number" in after.text[1][0]
    assert set(masks.SEES) | {None} == set(lookahead.MASK_COLOURS)


# ---- issue 11, error 1: the bonus token is the model's own, last ------------------------------------
def _as_version_1(t):
    """The trace as an old (version 1) file: no stored origins; loading derives them."""
    from decoding.trace import Trace
    d = t.to_dict()
    d["version"] = 1
    for s in d["steps"]:
        s.pop("origins", None)
        s["lookahead"] = s.pop("record")  # version 1 and 2 kept a step's record under its method's key
    return Trace.from_dict(d)


def _span_colours(html: str) -> list[str]:
    import re
    return re.findall(r"background:(#[0-9A-Fa-f]{6})", html)


@pytest.mark.parametrize("version", [2, 1])
def test_bonus_token_is_the_models_own_and_comes_last(version):
    """Step 1 of the hand-made lookahead trace commits [12 13 | 14]: 12 13 matched the window
    candidate (12 13), 14 is the model's own token after them. The Compare colours and the
    committed row of the Lookahead animation say so (they used to colour 12 as the model's and
    14 as the pool's)."""
    t = lookahead_trace() if version == 2 else _as_version_1(lookahead_trace())
    want = [PROVENANCE["pool"][0], PROVENANCE["pool"][0], PROVENANCE["step"][0]]
    assert analysis.provenance(t)[2:5] == ["pool", "pool", "step"]
    assert _span_colours(compare.provenance_html(t))[2:5] == want
    fig = lookahead.step_animation(t)
    d1, grid = fig.frames[1].data[0], lookahead.step_grid(t)
    assert [d1.marker.color[_cell(d1, x, grid.committed)] for x in (1, 2, 3)] == want
    assert "own next token" in d1.hovertext[_cell(d1, 3, grid.committed)]


def test_bonus_token_of_the_shipped_example_step_48():
    """The issue's example: candidate ' False' '↵   ' ' max', 2 matched; the committed ' return' is
    the model's own token, the two matched ones come from the output pool."""
    from pathlib import Path

    from decoding.trace import Trace
    t = Trace.load(str(Path(__file__).resolve().parent.parent / "assets" / "example_lookahead.json"))
    texts = style.token_texts(t)
    step = t.steps[48]
    assert [texts[x] for x in step.tokens] == [" False", "\n   ", " return"]
    before = lookahead.committed_before(t)[48]
    assert analysis.provenance(t)[before:before + 3] == ["output_pool", "output_pool", "step"]
    colours = _span_colours(compare.provenance_html(t))[before:before + 3]
    assert colours == [PROVENANCE["output_pool"][0]] * 2 + [PROVENANCE["step"][0]]
    fig = lookahead.step_animation(t, style.page_of(lookahead.lookahead_steps(t).index(48)))
    d = next(f for f in fig.frames if f.name == "48").data[0]
    grid = lookahead.step_grid(t)
    assert [d.marker.color[_cell(d, x, grid.committed)] for x in (1, 2, 3)] == colours


# ---- compare ----------------------------------------------------------------------------------------
def test_compare_figures():
    traces = {"AR": ar_trace(), "Lookahead": lookahead_trace()}
    h = compare.accepted_histogram_figure(traces)
    assert [list(b.x) for b in h.data] == [[1], [1, 3]]
    assert [list(b.y) for b in h.data] == [[4], [1, 1]]
    c = compare.committed_curve_figure(traces)
    assert list(c.data[0].y) == [1, 2, 3, 4, 5] and list(c.data[1].y) == [1, 2, 5]
    assert c.data[0].line.color == style.METHOD_COLOURS["ar"]
    p = compare.provenance_figure(traces)
    assert sum(sum(b.x) for b in p.data) == 10
    rows = compare.summary_rows(traces)
    assert rows[0]["speedup vs AR"] == 1.0 and rows[1]["tokens/step"] == 2.0


def test_provenance_html_escapes_model_text():
    t = lookahead_trace()
    html = compare.provenance_html(t)
    assert "<z>" not in html and "&lt;z&gt;" in html
    assert html.count("<span") == len(t.output_ids)
    for src in analysis.provenance(t):
        assert PROVENANCE[src][0] in html


def test_empty_inputs_give_explaining_figures():
    assert compare.committed_curve_figure({}).layout.annotations[0].text == "No runs to compare yet."
    assert lookahead.step_animation(ar_trace()).layout.annotations


def test_what_w_n_and_g_change_in_the_runs_numbers():
    """Issue 23, item 7: "what does G change?" answered on the Lookahead page from the run itself: a
    step that accepted its second candidate would have committed fewer tokens with G = 1."""
    t = lookahead_trace()
    assert lookahead.lost_with_g(t, 1) == (0, 0)  # step 1 accepted its first candidate
    r = t.steps[1].record
    r.candidates, r.matched, r.origins, r.chosen = [[12, 40], [12, 13]], [1, 2], ["prompt", "window"], 1
    assert lookahead.lost_with_g(t, 1) == (1, 1) and lookahead.lost_with_g(t, 2) == (0, 0)
    words = lookahead.wng_text(t)
    assert "1 of 1 accepted candidates were not the first one" in words
    assert "1 fewer token (1 step)" in words and "up to 2 fewer tokens" in words  # (G - 1) x (N - 1) = 1 x 2
    assert "1 of 1 accepting steps matched all 2" in words
    fig = lookahead.g_figure(t)
    assert list(fig.data[0].y) == [0, 2] and list(fig.data[1].x) == [1] and list(fig.data[1].y) == [2]  # rank 2
    assert "1 of 1 accepted were not the first" in fig.layout.title.text
