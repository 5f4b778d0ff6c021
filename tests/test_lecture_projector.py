"""Issue 23, item 1: the Lecture's projector mode: every slide's figure fits the screen with cells of at
least MIN_CELL px (also at the paper's W = 15, N = 5, G = 15), the whole token on hover, and the
cells changed since the previous iteration ringed. (The browser test, tests/e2e/test_browser_lecture.py,
checks the page at 1400x1000 and 1920x1080 and the keys.)"""

from __future__ import annotations

from pathlib import Path

import pytest

from decoding.loop import decode
from decoding.trace import Trace
from tiny import tiny_lm
from viz import lecture, style
from viz_traces import jacobi_ff_trace, jacobi_trace, lookahead_trace

ROOT = Path(__file__).resolve().parent.parent


def halo(fig):
    return next(d for d in fig.data if d.name == style.HALO_NAME)


def test_jacobi_cells_changed_since_the_previous_iteration_are_ringed():
    t = jacobi_trace()  # y(0) [10 2 3 1] -> y(1) [10 11 5 13] -> y(2) [10 11 12 13] -> y(3) the same
    steps = {s.frame: s for s in lecture.jacobi_lecture(t)}
    guess = lecture.LectureStep("", "", "jacobi", "0")
    assert lecture.changed_cells(t, guess) == []  # nothing before the initial guess
    one = lecture.LectureStep("", "", "jacobi", "1")
    assert lecture.changed_cells(t, one) == [(1, 1), (2, 1), (3, 1)]  # 2 3 1 -> 11 5 13
    two = lecture.LectureStep("", "", "jacobi", "2")
    assert lecture.changed_cells(t, two) == [(2, 1)]  # 5 -> 12; 13 stayed
    fig = lecture.lecture_figure(t, two)
    h = halo(fig)
    assert list(zip(h.x, h.y)) == [(2, 1)] and h.showlegend and h.marker.color == style.HALO
    assert h.marker.size > fig.data[0].marker.size  # a ring around the cell, not over it
    assert list(halo(lecture.lecture_figure(t, guess)).x) == [None]
    assert steps  # the walk itself draws them too
    for s in steps.values():
        assert len([x for x in halo(lecture.lecture_figure(t, s)).x if x is not None]) == len(lecture.changed_cells(t, s))


def test_lookahead_window_cells_changed_since_the_previous_step_are_ringed():
    t = lookahead_trace()  # step 0 window [[1 2]]; step 1 [[1 2] [20 21]]: level 1 is new
    from viz import lookahead
    g = lookahead.step_grid(t, positions=True)
    s1 = lecture.LectureStep("", "", "positions", "1")
    assert lecture.changed_cells(t, s1) == [g.window(1, 0), g.window(1, 1)] == [(2, 1), (3, 1)]  # t+2, t+3 on level 1
    assert lecture.changed_cells(t, lecture.LectureStep("", "", "positions", "0")) == []
    assert lecture.changed_cells(t, lecture.LectureStep("", "", "mask", "1")) == []  # the mask: no cells of a window
    fig = lecture.lecture_figure(t, s1)
    assert list(zip(halo(fig).x, halo(fig).y)) == [(2, 1), (3, 1)]


def paper_trace() -> Trace:
    lm = tiny_lm("llama", 2)
    return decode(lm, [3, 4, 5, 3, 4, 5, 3, 4, 6, 7, 3, 4, 5], "lookahead", {"W": 15, "N": 5, "G": 15}, 60)


@pytest.mark.parametrize("which", ["jacobi", "lookahead", "paper", "jacobi_ff", "suffix", "suffix_edit", "gallery_paper"])
def test_every_projector_slide_fits_with_cells_of_at_least_24_px(which):
    t = {"jacobi": lambda: Trace.load(str(ROOT / "assets" / "example_jacobi.json")),
         "lookahead": lambda: Trace.load(str(ROOT / "assets" / "example_lookahead.json")),
         "suffix": lambda: Trace.load(str(ROOT / "assets" / "example_suffix.json")),
         "suffix_edit": lambda: Trace.load(str(ROOT / "assets" / "gallery" / "edit_suffix.json")),
         "gallery_paper": lambda: Trace.load(str(ROOT / "assets" / "gallery" / "train_lookahead_paper.json")),
         "paper": paper_trace, "jacobi_ff": jacobi_ff_trace}[which]()
    steps = lecture.lecture(t)
    assert steps
    for s in steps:
        fig = lecture.lecture_figure(t, s, large=True)
        cell = style.cell_px(fig)
        assert cell >= style.MIN_CELL == 24, (which, s.title, cell)
        m = fig.layout.margin
        if s.figure == "mask":  # a square heatmap: n cells along both axes, inside the height and width
            n = len(fig.data[0].z)
            assert cell * n <= min(fig.layout.height - m.t - m.b, fig.layout.width - m.l - m.r)
            assert n == len(fig.layout.xaxis.ticktext) == len(fig.layout.yaxis.ticktext)
            legend = [x["label"] for x in style.legend_items(fig)]  # drawn beside the slide
            assert "sees the current token" in legend and "sees its candidate's earlier tokens" in legend
            continue
        unit = (fig.layout.height - m.t - m.b) / abs(fig.layout.yaxis.range[1] - fig.layout.yaxis.range[0])
        assert cell <= unit  # cells do not overlap their neighbours
        cells = next(d for d in fig.data if d.text is not None and len(d.text))  # the still's token cells
        assert cells.marker.size == cell and cells.textfont.size >= 13
        # the label may be cut to fit the cell; the hover has the whole token
        for label, hover in zip(cells.text, cells.hovertext):
            if hover == "text left out":  # a gap in the suffix walk's text
                continue
            for line in label.split("<br>"):  # a draft-tree node: its token over its score
                assert len(style.html.unescape(line)) <= max(2, int(cell / (0.6 * cells.textfont.size)))
            label = label.split("<br>")[0]
            assert "(id " in hover
            if label.endswith("…"):  # cut: the hover quotes the whole token
                whole = hover.split("token ", 1)[1].rsplit(" (id", 1)[0]
                assert len(style.html.unescape(whole)) - 2 > len(style.html.unescape(label)) - 1


def test_recut_keeps_escapes_whole():
    assert style.recut("&lt;tag&gt;", 4) == "&lt;ta…"
    assert style.recut("␣x", 4) == "␣x"
    assert style.recut("␣return…", 4) == "␣re…"
    assert style.recut("␣return<br>0.25", 3) == "␣r…<br>0.…"  # a tree node: token and score cut apart
