"""Lecture mode: a guided walkthrough of a Jacobi or lookahead trace, one narrated step at a time.

``jacobi_lecture(trace)`` / ``lookahead_lecture(trace)`` turn a trace into a list of
``LectureStep``: a title, a short narration (HTML, model text escaped) generated from the trace's
data, and which frame of which figure to show with which cells framed. ``lecture_figure`` draws it
with the same builders as the Jacobi and Lookahead pages (a still of one frame, highlighted
regions, optionally large type for a projector).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import plotly.graph_objects as go

from decoding import analysis
from viz import jacobi, lookahead
from viz.style import (PROJECTOR_HEIGHT, PROJECTOR_WIDTH, esc, fit_projector, freeze, highlight_boxes, mark_changed,
                       page_of, piece, state_colour, token_texts, visible)

_MD = {"*": "&#42;", "_": "&#95;", "`": "&#96;", "[": "&#91;", "]": "&#93;", "#": "&#35;", "~": "&#126;",
       "$": "&#36;", "\\": "&#92;", "|": "&#124;"}


def tok(text: str) -> str:
    """Model text for narration: escaped for HTML and inert for Markdown and LaTeX."""
    s = esc(visible(text))
    return "<code>" + "".join(_MD.get(ch, ch) for ch in s) + "</code>"


@dataclass
class LectureStep:
    title: str
    text: str  # HTML, model text escaped with ``tok``
    figure: str  # "jacobi" or "lookahead"
    frame: str  # frame name of the figure's animation
    boxes: list[tuple[float, float, float, float]] = field(default_factory=list)  # (x0, x1, y0, y1) cells
    box_label: str = ""
    block: int = 0  # Jacobi: the block shown


# ---- Jacobi ---------------------------------------------------------------------------------------
def pick_block(trace) -> int:
    """The block with the most fast-forwarded + stationary tokens (the most to talk about)."""
    counts = analysis.jacobi_counts(trace)
    if not counts:
        return 0
    return max(counts, key=lambda c: (c["fast_forwarded"] + c["stationary"], -c["block"]))["block"]


def _fixed_point_iteration(v: jacobi.BlockView) -> LectureStep:
    """The opening slide: Jacobi decoding as a fixed-point iteration, and why it converges."""
    n = v.n
    return LectureStep(
        "Decoding as solving equations",
        f"Greedy decoding of the next {n} tokens after the text x solves {n} equations: "
        f"<b>y<sub>i</sub> = argmax p( · | x, y<sub>&lt;i</sub>)</b> for i = 1 … {n} (y<sub>0</sub>, the token "
        f"the block starts from, is known). AR solves them one after the other: {n} forward passes. Jacobi "
        f"guesses y<sub>1</sub> … y<sub>{n - 1}</sub>, then updates every y<sub>i</sub> from the current guesses "
        f"of y<sub>&lt;i</sub> in one forward pass (the last position's prediction gives y<sub>{n}</sub>), and "
        f"repeats until nothing changes: a <b>fixed point</b>. It is AR's answer, reached in at most {n} "
        f"iterations: after iteration k, y<sub>1</sub> … y<sub>k</sub> are right (each has a right prefix, so "
        f"its argmax is AR's token). Jacobi only wins when one forward gets more than one token right.",
        "jacobi", "0", [(0, len(v.fp) - 1, 0, 0)], "the solution: the fixed point")


def _opening(v: jacobi.BlockView) -> list[LectureStep]:
    n, texts = v.n, v.texts
    guesses = "".join(piece(texts, t) for t in v.rows[0][1:])
    new = v.states[1].index("new") if len(v.rows) > 1 and "new" in v.states[1] else 1
    return [
        _fixed_point_iteration(v),
        LectureStep(
            "Guess a whole block at once",
            f"Jacobi decoding does not wait for one token at a time: the model guesses <b>{n - 1} tokens at once</b>. "
            f"The block starts from {tok(piece(texts, v.rows[0][0]))}, the token the model already knows; the "
            f"other {n - 1} are picked from the prompt at random: {tok(guesses[:80])}. Almost all of them are wrong "
            f"({state_colour('wrong')}).",
            "jacobi", "0", [(1, n - 1, 1, 1)], f"{n - 1} guesses"),
        LectureStep(
            "One forward pass over the whole block",
            f"One forward pass reads all {n} positions (causal mask) and predicts the next token at each. Every "
            f"guess is replaced by the prediction at the position before it. The prediction after the right "
            f"prefix is always right: it is exactly the token AR would produce next"
            f"{' (' + tok(piece(texts, v.rows[1][new])) + ')' if len(v.rows) > 1 else ''} ({state_colour('new')}), "
            f"and the "
            f"iteration commits it to the output (black outline).",
            "jacobi", "1", [(new, new, 1, 1)], "right after one forward"),
    ]


def _fast_forward(v: jacobi.BlockView, k: int, ff: list[int]) -> LectureStep:
    texts, row = v.texts, v.rows[k]
    first = v.states[k].index("new") if "new" in v.states[k] else ff[0]
    words = "".join(piece(texts, row[p]) for p in [first] + ff)
    nxt = f" Iteration {k + 1} feeds them, confirms them and commits them (outlined in the next frame)." \
        if k + 1 < len(v.rows) else ""
    return LectureStep(
        f"Fast-forward at iteration {k}",
        f"This one forward pass made {len(ff) + 1} consecutive tokens right: {tok(words)}: the one AR would get "
        f"({state_colour('new')}) and {len(ff)} more ({state_colour('fast_forward')}). That is CLLM's "
        f"<b>fast-forward</b>, the source of Jacobi's speedup."
        f"{nxt}", "jacobi", str(k), [(first, max(ff), 1, 1)], f"{len(ff) + 1} right in one forward")


def _stationary(v: jacobi.BlockView, k: int, p: int) -> LectureStep:
    when = "in the initial guess" if k == 0 else f"after iteration {k}"
    return LectureStep(
        f"A stationary token {when}",
        f"Position {p} already holds {tok(piece(v.texts, v.rows[k][p]))}, its final value, while an earlier "
        f"position is still wrong. It will never change again: a <b>stationary</b> token "
        f"({state_colour('stationary')}). It cannot be "
        f"committed until everything before it is right, and then it is committed without being fast-forwarded.",
        "jacobi", str(k), [(p, p, 1, 1)], "stationary")


def _jacobi_notable(v: jacobi.BlockView, max_steps: int) -> list[LectureStep]:
    """The states worth a slide: fast-forwards, first sightings of stationary tokens, and one plain
    iteration (one token, like AR) first if there is room."""
    notable, seen = [], set()
    for k, row in enumerate(v.states):
        ff = [p for p, s in enumerate(row) if s == "fast_forward"]
        st = [p for p, s in enumerate(row) if s == "stationary" and p not in seen]
        seen.update(st)
        if ff:
            notable.append(_fast_forward(v, k, ff))
        elif st:
            notable.append(_stationary(v, k, st[0]))
    plain = [k for k in range(2, len(v.rows)) if len(v.commits[k]) == 1 and "new" in v.states[k]]
    if plain and len(notable) < max_steps - 5:
        k = plain[0]
        p = v.states[k].index("new")
        notable.insert(0, LectureStep(
            f"Iteration {k}: one token, like AR",
            f"Most iterations get only one more token right ({tok(piece(v.texts, v.rows[k][p]))}): the guesses "
            f"after it are still wrong ({v.states[k].count('wrong')} {state_colour('wrong')} cells) because each one "
            f"depends on the wrong "
            f"token before it.", "jacobi", str(k), [(p, p, 1, 1)], "one more right"))
    return notable


def _fixed_point_slide(trace, v: jacobi.BlockView, block: int) -> LectureStep:
    c = next(c for c in analysis.jacobi_counts(trace) if c["block"] == block)
    return LectureStep(
        "The block's fixed point",
        f"After {c['iterations']} iterations the block equals its <b>fixed point</b>, exactly what greedy AR "
        f"produces. Its iterations committed {c['tokens']} tokens; AR needs {c['tokens']} forward passes for them, "
        f"Jacobi needed {c['iterations']} ({c['fast_forwarded']} fast-forwarded, {c['stationary']} stationary "
        f"token{'s' if c['stationary'] != 1 else ''}). Whether that is faster depends on what a forward over "
        f"{v.n} tokens costs on this hardware: see the Explain page.",
        "jacobi", str(len(v.rows) - 1), [(0, len(v.fp) - 1, 0, 0)], "fixed point = AR output", block)


def jacobi_lecture(trace, block: int | None = None, max_steps: int = 12) -> list[LectureStep]:
    block = pick_block(trace) if block is None else block
    v = jacobi.block_view(trace, block)
    if v is None:
        return []
    steps = _opening(v) + _jacobi_notable(v, max_steps)[: max_steps - 4]
    steps.append(_fixed_point_slide(trace, v, block))
    for s in steps:
        s.block = block
    return steps


# ---- lookahead ------------------------------------------------------------------------------------
def harvested_at(trace, step_index: int, gram: list[int]) -> int | None:
    """The latest step before ``step_index`` whose pool ops added or refreshed ``gram``
    (None: it came from the seed)."""
    for i in range(step_index - 1, -1, -1):
        la = trace.steps[i].record
        if la is not None and any(op in "+~" and g == gram for op, g in la.pool_ops):
            return i
    return None


@dataclass
class _LookaheadCtx:
    trace: object
    idx: list[int]  # the steps with a lookahead record
    texts: dict[int, str]
    grid: "lookahead._Grid"
    before: list[int]  # output tokens committed before each step

    def cur(self, si: int) -> int:
        return self.trace.output_ids[self.before[si] - 1]

    def rec(self, si: int):
        return self.trace.steps[si].record


def _window_and_pool(c: _LookaheadCtx) -> list[LectureStep]:
    g, texts, s0 = c.grid, c.texts, c.idx[0]
    W, N = g.W, g.N
    filling = sum(len(c.rec(i).window) < N - 1 for i in c.idx)  # steps before the window has all its levels
    steps = [LectureStep(
        "A 2D window of guesses",
        f"Lookahead feeds, in every forward pass, the current token (black, {tok(piece(texts, c.cur(s0)))}) and a "
        f"<b>window</b> of {W} columns × {N - 1} levels of guesses. Level 0 starts as tokens from the prompt; the "
        f"upper levels fill during the first {filling} step{'s' if filling != 1 else ''}: each level is the model's "
        f"prediction one position further on.",
        "lookahead", str(s0), [(1, W, g.level(len(c.rec(s0).window) - 1), g.level(0))], "window")]
    if c.trace.pool_seed:
        steps.append(LectureStep(
            "The pool starts with the prompt's n-grams",
            f"Before the first step the <b>n-gram pool</b> already holds the prompt's {len(c.trace.pool_seed)} "
            f"{N}-grams, keyed by their first token: text the answer is likely to repeat.",
            "lookahead", str(s0), [], ""))
    harvest = next((i for i in c.idx if c.rec(i).harvested), None)
    if harvest is not None:
        gram = c.rec(harvest).harvested[0]
        steps.append(LectureStep(
            f"Step {harvest}: harvest one n-gram per column",
            f"Once the window is full, each of its {W} columns plus the top level's prediction (the 'next level' row) "
            f"is a {N}-gram, for example {tok(''.join(piece(texts, t) for t in gram))}. All {W} go into the pool "
            f"(outlined columns), then the window slides up one level.",
            "lookahead", str(harvest), [(1, W, g.next, g.level(0))], f"{W} n-grams harvested"))
    cand = next((i for i in c.idx if c.rec(i).candidates), None)
    if cand is not None:
        la = c.rec(cand)
        steps.append(LectureStep(
            f"Step {cand}: verify candidates in the same forward",
            f"The pool holds {len(la.candidates)} n-gram{'s' if len(la.candidates) != 1 else ''} starting with the "
            f"current token {tok(piece(texts, c.cur(cand)))}. Up to G = {c.trace.params['G']} of them are "
            f"fed in the same forward pass, each with its own mask row, and checked against the model's own "
            f"predictions: {'none matched here' if la.chosen < 0 else 'one matched'}.",
            "lookahead", str(cand), [(1, N - 1, g.cand0, g.cand0 + len(la.candidates) - 1)], "candidates"))
    return steps


def _when_added(c: _LookaheadCtx, si: int, origin: str) -> str:
    """How the chosen candidate of step ``si`` got into the pool, as the start of a sentence."""
    if origin == "window":
        la = c.rec(si)
        h = harvested_at(c.trace, si, [c.cur(si)] + list(la.candidates[la.chosen]))
        return (f"This n-gram was harvested from the window <b>{si - h} step{'s' if si - h != 1 else ''} ago</b> "
                f"(step {h}) and now verifies") if h is not None else "This n-gram, guessed by the window, now verifies"
    if origin == "prompt":
        return "This n-gram was copied from the prompt before decoding started, and now verifies"
    return "This n-gram was harvested from the output written so far, and now verifies"


def _verified(c: _LookaheadCtx) -> list[LectureStep]:
    """For each pool source, the first step where one of its n-grams verified two or more tokens."""
    g, out = c.grid, []
    for origin, what in (("window", "a window"), ("prompt", "a prompt"), ("output", "an output")):
        si = next((i for i in c.idx if c.rec(i).chosen >= 0 and c.rec(i).origins[c.rec(i).chosen] == origin
                   and c.rec(i).matched[c.rec(i).chosen] >= 2), None)
        if si is None:
            continue
        la, n_tok = c.rec(si), len(c.trace.steps[si].tokens)
        k = la.chosen
        words = "".join(piece(c.texts, t) for t in la.candidates[k][: la.matched[k]])
        out.append(LectureStep(
            f"Step {si}: {what} n-gram verifies",
            f"{_when_added(c, si, origin)}: {la.matched[k]} of its tokens, {tok(words)}, match the model's own "
            f"predictions, so this one forward pass commits {n_tok} tokens (the matched ones plus the model's next "
            f"token after them).",
            "lookahead", str(si), [(1, la.matched[k], g.cand0 + k, g.cand0 + k), (1, n_tok, g.committed, g.committed)],
            f"{n_tok} tokens in one step"))
    return sorted(out, key=lambda s: int(s.frame))


def _whole_run(c: _LookaheadCtx) -> LectureStep:
    """The run in numbers: from ``analysis.accepted_histogram`` (Compare's histogram) and the steps'
    fed counts (Explain's cost figure)."""
    t, g, last = c.trace, c.grid, c.idx[-1]
    big = sum(v for k, v in analysis.accepted_histogram(t).items() if k > 1)
    fed = [t.steps[i].fed for i in c.idx]
    return LectureStep(
        "The whole run",
        f"{len(t.output_ids)} tokens in {t.n_steps} forward passes: <b>{t.tokens_per_step:.2f} tokens per "
        f"step</b>; {big} step{'s' if big != 1 else ''} committed more than one token. "
        + ("In float32 the output is greedy AR's token for token (the tests check it; run AR for this prompt on "
           "the Compare page to see it here). " if str(t.dtype) == "float32" else
           f"In {t.dtype} the output can leave greedy AR's at a near-tie of its top two tokens: the Compare page "
           "says how far it matches an AR run. ")
        + f"Each step fed {min(fed)}–{max(fed)} tokens, though (the current token, the window and the "
        f"candidates): the Explain page weighs that against what such a forward costs on this hardware.",
        "lookahead", str(last), [(1, len(t.steps[last].tokens), g.committed, g.committed)], "committed")


def lookahead_lecture(trace) -> list[LectureStep]:
    idx = lookahead.lookahead_steps(trace)
    if not idx:
        return []
    c = _LookaheadCtx(trace, idx, token_texts(trace), lookahead.step_grid(trace), lookahead.committed_before(trace))
    return _window_and_pool(c) + _verified(c) + [_whole_run(c)]


# ---- the figure -----------------------------------------------------------------------------------
def lecture(trace) -> list[LectureStep]:
    return jacobi_lecture(trace) if trace.method == "jacobi" else lookahead_lecture(trace) if trace.method == "lookahead" else []


def changed_cells(trace, step: LectureStep) -> list[tuple[int, int]]:
    """The cells of the step's still (figure coordinates) whose token differs from the previous
    iteration: Jacobi, the block's positions that changed from y(k-1) to y(k); lookahead, the
    window cells (and the next level) that differ from the previous step's at the same place.
    The first state of a walk has nothing before it: none."""
    k = int(step.frame)
    if step.figure == "jacobi":
        rows = analysis.jacobi_states(trace, step.block)
        if not 0 < k < len(rows):
            return []
        return [(p, 1) for p, (a, b) in enumerate(zip(rows[k], rows[k - 1])) if a != b]
    idx = lookahead.lookahead_steps(trace)
    pos = idx.index(k)
    if pos == 0:
        return []
    grid = lookahead.step_grid(trace)
    now, before = trace.steps[k].record.window, trace.steps[idx[pos - 1]].record.window
    return [grid.window(l, j) for l, level in enumerate(now) for j, tok in enumerate(level)
            if l >= len(before) or j >= len(before[l]) or before[l][j] != tok]


def lecture_figure(trace, step: LectureStep, large: bool = False) -> go.Figure:
    """The step's frame of the Jacobi block animation or the lookahead step animation, as a still,
    with the step's cells framed and the cells changed since the previous iteration ringed;
    ``large``: projector mode (``fit_projector``: the slide's figure fits the screen, cells as
    large as it allows, never under MIN_CELL px for the shipped settings)."""
    if step.figure == "jacobi":
        fig, cell = jacobi.block_animation(trace, step.block), jacobi.CELL
    else:
        page = page_of(lookahead.lookahead_steps(trace).index(int(step.frame)))
        fig, cell = lookahead.step_animation(trace, page), lookahead.CELL
    freeze(fig, step.frame)
    highlight_boxes(fig, step.boxes, step.box_label, pad_y=0.3 if step.figure == "jacobi" else 0.5)
    mark_changed(fig, changed_cells(trace, step), cell)
    return fit_projector(fig, PROJECTOR_HEIGHT, PROJECTOR_WIDTH) if large else fig
