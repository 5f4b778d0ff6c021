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
from viz import jacobi, lookahead, suffix
from viz.style import (PROJECTOR_HEIGHT, PROJECTOR_WIDTH, esc, fit_heatmap, fit_projector, freeze, highlight_boxes,
                       mark_changed, page_of, piece, state_colour, token_texts, visible)

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
    figure: str  # "jacobi"; lookahead: "positions" (the position view), "pool" (a key's entries), "mask";
    # suffix drafting: "suffix_match" (the match in its text), "suffix_tree" (the draft tree)
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
    grid: "lookahead.PositionGrid"
    before: list[int]  # output tokens committed before each step

    def cur(self, si: int) -> int:
        return self.trace.output_ids[self.before[si] - 1]

    def rec(self, si: int):
        return self.trace.steps[si].record

    def words(self, ids) -> str:
        return "".join(piece(self.texts, t) for t in ids)


# A lookahead slide's place in the walk: (step, phase), phases in a step's order: what it feeds, the
# pool it reads, its one forward (the mask), verification, then the window's update (the harvest)
WINDOW, SEED, POOL, MASK, VERIFY, HARVEST = range(6)
MASK_COLUMNS, MASK_CANDIDATES = 3, 2  # the mask slide's excerpt: it fits a projector at N = 5


def _featured(c: _LookaheadCtx) -> int | None:
    """The step the walk follows through the paper's order: the first whose accepted candidate came
    from the window with two or more tokens matched (the mechanism the paper draws), else the first
    accepted candidate of any source, else the first step with candidates."""
    def chosen(i, origin=None, least=1):
        r = c.rec(i)
        return r.chosen >= 0 and r.matched[r.chosen] >= least and (origin is None or r.origins[r.chosen] == origin)
    for test in (lambda i: chosen(i, "window", 2), lambda i: chosen(i, None, 2), lambda i: chosen(i),
                 lambda i: bool(c.rec(i).candidates)):
        si = next((i for i in c.idx if test(i)), None)
        if si is not None:
            return si
    return None


def _diagonal(c: _LookaheadCtx, si: int, column: int) -> list[tuple[float, float, float, float]]:
    """Boxes around window column ``column``'s cells at step ``si`` and its next-level cell: the
    harvested n-gram, a diagonal in the position view."""
    g, levels = c.grid, len(c.rec(si).window)
    cells = [g.window(l, column) for l in range(levels)] + [g.next_level(levels, column)]
    return [(x, x, y, y) for x, y in cells]


def _window_slides(c: _LookaheadCtx) -> list[tuple[tuple[int, int], LectureStep]]:
    g, texts = c.grid, c.texts
    W, N = g.W, g.N
    fed = [i for i in c.idx if c.rec(i).window]  # budget=auto leaves the window out where it does not pay
    s0 = fed[0] if fed else c.idx[0]
    levels = len(c.rec(s0).window)
    filling = sum(0 < len(c.rec(i).window) < N - 1 for i in c.idx)  # steps before the window has all its levels
    auto = c.trace.params.get("budget") == "auto"
    out = [] if not fed else [((s0, WINDOW), LectureStep(
        "A 2D window of guesses",
        ("This run's budget (budget=auto) feeds the window only on steps where it pays on this hardware; "
         f"step {s0} is the first that fed it. " if auto else "")
        + f"Lookahead feeds, in every forward pass, the current token (black, {tok(piece(texts, c.cur(s0)))}, at "
        f"position t) and a <b>window</b> of {W} columns × {N - 1} levels of guesses for the positions after it. "
        f"Level 0 starts as tokens from the prompt; each upper level is the model's prediction one position "
        f"further on, so column j of level l guesses position t+1+l+j: the window runs <b>diagonally</b> over "
        f"positions. Its upper levels fill during the first {filling} step{'s' if filling != 1 else ''}.",
        "positions", str(s0), [(1 + l, l + W, l, l) for l in range(levels)], "window"))]
    if c.trace.pool_seed:
        out.append(((c.idx[0], SEED), LectureStep(
            "The pool starts with the prompt's n-grams",
            f"Before the first step the <b>n-gram pool</b> already holds the prompt's {len(c.trace.pool_seed)} "
            f"{N}-grams, keyed by their first token: text the answer is likely to repeat. (The paper's pool starts "
            f"empty and holds window n-grams only.)",
            "positions", str(c.idx[0]), [], "")))
    return out


def _harvest_slide(c: _LookaheadCtx, feat: int | None) -> list[tuple[tuple[int, int], LectureStep]]:
    """The step that harvested the featured step's accepted n-gram (else the first harvest)."""
    h, gram = None, None
    if feat is not None and c.rec(feat).chosen >= 0 and c.rec(feat).origins[c.rec(feat).chosen] == "window":
        la = c.rec(feat)
        gram = [c.cur(feat)] + list(la.candidates[la.chosen])
        h = harvested_at(c.trace, feat, gram)
        if h is not None and not any(g == gram for g in c.rec(h).harvested):
            h = None  # refreshed by the output harvest, not by the window
    if h is None:
        h = next((i for i in c.idx if c.rec(i).harvested), None)
        gram = c.rec(h).harvested[0] if h is not None else None
    if h is None:
        return []
    cols = lookahead.harvested_columns(c.rec(h).window, c.rec(h).harvested)
    col = next((j for j, g in cols.items() if g == gram), 0)
    W, N = c.grid.W, c.grid.N
    later = f" (step {feat} will verify it)" if feat is not None and feat > h and gram[0] == c.cur(feat) else ""
    return [((h, HARVEST), LectureStep(
        f"Step {h}: each column's diagonal becomes an n-gram",
        f"Once the window is full, column j's {N - 1} guesses plus the top level's prediction after them form a "
        f"{N}-gram along a diagonal, for example column {col}: {tok(c.words(gram))}{later}. All {W} columns "
        f"go into the pool, keyed by their first token; then the window slides up one level (the top level's "
        f"predictions become the new top level).",
        "positions", str(h), _diagonal(c, h, col), f"{N}-gram of column {col}"))]


def _featured_slides(c: _LookaheadCtx, si: int) -> list[tuple[tuple[int, int], LectureStep]]:
    """The featured step in the paper's order: the pool's entries for the current token, the one
    forward's mask (both branches), verification and commit."""
    la, texts, G = c.rec(si), c.texts, c.trace.params["G"]
    entries = lookahead.pool_entries(c.trace, si)
    k = next((r for r, e in enumerate(entries) if e["accepted"]), None)
    cur = tok(piece(texts, c.cur(si)))
    out = [] if not entries else [((si, POOL), LectureStep(
        f"Step {si}: the pool's n-grams for the current token",
        f"The current token is {cur}. The pool holds {len(entries)} n-gram{'s' if len(entries) != 1 else ''} "
        f"whose first token is {cur}; up to G = {G} of them become this step's <b>candidates</b>: guesses for the "
        f"positions t+1, t+2, … that the same forward pass checks."
        + (f" Entry {k + 1} will match." if k is not None else " None of them will match."),
        "pool", str(si), [(0, len(entries[k]["tokens"]), k, k)] if k is not None else [], "will verify"))]
    n_win, n_cand = min(MASK_COLUMNS, c.grid.W), min(MASK_CANDIDATES, len(la.candidates))
    cands = f"{n_cand} candidate{'s' if n_cand != 1 else ''}"
    verify = (f"The <b>verification branch</b>: a candidate's token sees only its own earlier tokens, as if it "
              f"were the text.")
    if la.window:
        text = (f"The current token, the window and the candidates go into <b>one</b> forward pass; the attention "
                f"mask keeps them apart (here the first {n_win} columns and {cands}, labelled with the tokens "
                f"fed). Everyone sees the current token and the whole text before it (the KV cache, not drawn). "
                f"The <b>lookahead branch</b>: level 0 reads left to right; an upper level sees its own column "
                f"below it. {verify} The two branches never see each other.")
    else:
        text = (f"This step's budget left the window out (it did not pay on this hardware): the forward pass "
                f"feeds the current token and the candidates only (here {cands}, labelled with the tokens fed). "
                f"Everyone sees the current token and the whole text before it (the KV cache, not drawn). {verify}")
    out.append(((si, MASK), LectureStep(f"Step {si}: one forward pass, two branches" if la.window else
                                        f"Step {si}: one forward pass, the verification branch", text,
                                        "mask", str(si), [], "")))
    if la.chosen >= 0:
        out.append(((si, VERIFY), _verify_slide(c, si)))
    else:
        out.append(((si, VERIFY), LectureStep(
            f"Step {si}: verify, then commit",
            f"The model's predictions at t, t+1, … are compared with each candidate's tokens: none matches its "
            f"first guess, so this step commits only the model's own next token, as AR would.",
            "positions", str(si), [(1, 1, -1, -1)], "1 token")))
    return out


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


def _verify_slide(c: _LookaheadCtx, si: int) -> LectureStep:
    g, la, n_tok = c.grid, c.rec(si), len(c.trace.steps[si].tokens)
    k = la.chosen
    what = {"window": "a window", "prompt": "a prompt", "output": "an output"}.get(la.origins[k], "a pool")
    return LectureStep(
        f"Step {si}: {what} n-gram verifies",
        f"{_when_added(c, si, la.origins[k])}: {la.matched[k]} of its tokens, "
        f"{tok(c.words(la.candidates[k][: la.matched[k]]))}, equal the model's own predictions at t, t+1, …, so "
        f"this one forward pass commits {n_tok} token{'s' if n_tok != 1 else ''} (the matched ones plus the "
        f"model's next token after them, outlined on the text row).",
        "positions", str(si), [(1, la.matched[k], g.candidate(k, 0)[1], g.candidate(k, 0)[1]),
                               (1, n_tok, -1, -1)], f"{n_tok} tokens in one step")


def _other_sources(c: _LookaheadCtx, feat: int | None) -> list[tuple[tuple[int, int], LectureStep]]:
    """For each pool source but the featured step's, its first step where an n-gram verified two or
    more tokens."""
    shown = c.rec(feat).origins[c.rec(feat).chosen] if feat is not None and c.rec(feat).chosen >= 0 else None
    out = []
    for origin in ("window", "prompt", "output"):
        if origin == shown:
            continue
        si = next((i for i in c.idx if c.rec(i).chosen >= 0 and c.rec(i).origins[c.rec(i).chosen] == origin
                   and c.rec(i).matched[c.rec(i).chosen] >= 2), None)
        if si is not None:
            out.append(((si, VERIFY), _verify_slide(c, si)))
    return out


def _whole_run(c: _LookaheadCtx) -> LectureStep:
    """The run in numbers: from ``analysis.accepted_histogram`` (Compare's histogram) and the steps'
    fed counts (Explain's cost figure)."""
    t, last = c.trace, c.idx[-1]
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
        "positions", str(last), [(1, len(t.steps[last].tokens), -1, -1)], "committed")


def lookahead_lecture(trace) -> list[LectureStep]:
    """The lookahead walk in time order, the paper's order within a step: the window (and the
    seeded pool), the harvest of the n-gram a later step verifies, then at that step the pool's
    entries for the current token, the forward's mask and the verification; other pool sources'
    first verifications where they come; the whole run."""
    idx = lookahead.lookahead_steps(trace)
    if not idx:
        return []
    c = _LookaheadCtx(trace, idx, token_texts(trace), lookahead.step_grid(trace, positions=True),
                      lookahead.committed_before(trace))
    feat = _featured(c)
    slides = _window_slides(c) + _harvest_slide(c, feat) + (_featured_slides(c, feat) if feat is not None else []) \
        + _other_sources(c, feat)
    slides.sort(key=lambda s: s[0])  # stable: a step's slides keep the paper's order
    return [s for _, s in slides] + [_whole_run(c)]


# ---- suffix drafting ---------------------------------------------------------------------------------
MATCHED = ("prompt", "output", "earlier")  # a SuffixRecord's sources that are a suffix match


TREE_NODES = 24  # a slide's draft tree: an excerpt of at most this many nodes (cells a projector shows)


def _tree_nodes(trace, si: int) -> list[tuple[float, float, float, float]]:
    """Boxes around step ``si``'s accepted branch in its slide's tree figure (an excerpt of TREE_NODES)."""
    from viz.recycling import tree_layout

    _, parents, _, path = suffix.tree_excerpt(next(s.record for s in trace.steps if s.index == si), TREE_NODES)
    depth, y = tree_layout(parents)
    return [(depth[i], depth[i], y[i], y[i]) for i in path]


def _suffix_match_slide(trace, recs: dict, si: int, title: str, opening: str) -> LectureStep:
    """A slide of step ``si``'s match: the text's end and its earlier occurrence framed."""
    r, texts = recs[si], token_texts(trace)
    ids = suffix.text_before(trace, si)
    first = ids[r.source] if 0 <= r.source < len(ids) else None
    boxes = suffix.match_cells(trace, si, "suffix") + suffix.match_cells(trace, si, "earlier")
    words = "".join(piece(texts, t) for t in ids[-r.match:])
    return LectureStep(
        title, opening + f"At step {si} the last {r.match} tokens of the text, {tok(words)}, occurred "
        f"{suffix.WHERE[r.where]} (both framed)"
        + (f"; there they were followed by {tok(piece(texts, first))}, the draft's first token" if first is not None else "")
        + f". The longer the match, the more the draft may hold: at most alpha × match = "
        f"{trace.params['alpha']} × {r.match} tokens.", "suffix_match", str(si), boxes, f"{r.match} tokens matched")


def _suffix_tree_slides(trace, recs: dict, best: int) -> list[tuple[tuple[int, int], LectureStep]]:
    """The furthest-matching step's draft tree scored by frequency, then its verified branch."""
    r, texts = recs[best], token_texts(trace)
    n_tok = len(next(s.tokens for s in trace.steps if s.index == best))
    accepted = "".join(piece(texts, r.tokens[i]) for i in r.path)
    return [((best, 1), LectureStep(
        f"Step {best}: a draft tree scored by frequency",
        f"What followed the match earlier becomes a tree of {len(r.tokens)} draft tokens: where the text went on "
        f"in several ways, each branch is scored by how often it did (the product of count ratios along its "
        f"path, written under each token), and the most frequent ones are kept. The whole tree is fed in one "
        f"forward pass, each branch with its own causal mask.", "suffix_tree", str(best), [], "")),
        ((best, 2), LectureStep(
            f"Step {best}: one forward verifies the tree",
            f"The model's predictions along the tree select the branch it agrees with: {len(r.path)} draft token"
            f"{'s' if len(r.path) != 1 else ''}, {tok(accepted)}, match, so this step commits {n_tok} token"
            f"{'s' if n_tok != 1 else ''} (the matched ones plus the model's own next token). Greedy output stays "
            f"exactly AR's: a draft only decides how many tokens one forward can confirm.",
            "suffix_tree", str(best), _tree_nodes(trace, best), f"{len(r.path)} accepted"))]


def _fallback_slide(trace, recs: dict, f: int) -> LectureStep:
    r = recs[f]
    return LectureStep(
        f"Step {f}: no long match, the fallback drafts",
        f"Here the best earlier match was {r.match} token{'s' if r.match != 1 else ''}, shorter than "
        f"min_match = {trace.params['min_match']}: too weak to rely on. As SAM-Decoding does, the step falls "
        f"back to Token Recycling's matrix (the top successors the model predicted after each token in earlier "
        f"forwards), grafted onto the short match's own draft (its nodes keep a score; the matrix's show none): "
        f"a tree of {len(r.tokens)} tokens, {len(r.path)} accepted.",
        "suffix_tree", str(f), _tree_nodes(trace, f), f"{len(r.path)} accepted")


def suffix_lecture(trace) -> list[LectureStep]:
    """The suffix-drafting walk in time order: the first step that drafted from a suffix match (the
    text's end found earlier, what followed it), the step whose draft went furthest (its match, its
    tree scored by frequency, the verified branch), the first fallback step (Token Recycling's
    matrix beside a match shorter than min_match), the whole run."""
    recs = {s.index: s.record for s in trace.steps if s.record is not None}
    if not recs:
        return []
    matched = [i for i, r in recs.items() if r.where in MATCHED and r.tokens]
    best = max(matched, key=lambda i: (len(recs[i].path), recs[i].match, -i)) if matched else None
    slides: list[tuple[tuple[int, int], LectureStep]] = []
    if matched:
        slides.append(((matched[0], 0), _suffix_match_slide(
            trace, recs, matched[0], "Drafting from the text itself",
            "Suffix drafting keeps every stretch of the prompt and the output written so far in a suffix trie, with how "
            "often each continuation followed it. Each step finds the ends of the text that occurred before and keeps "
            "the one whose continuations promise most (usually the longest). ")))
    if best is not None:
        if best != matched[0]:
            slides.append(((best, 0), _suffix_match_slide(trace, recs, best, f"Step {best}: a long match", "")))
        slides += _suffix_tree_slides(trace, recs, best)
    fb = [i for i, r in recs.items() if r.where == "fallback" and r.tokens]
    if fb:
        f = max(fb[:20], key=lambda i: (len(recs[i].path), -i))  # an early one that got something
        slides.append(((f, 1), _fallback_slide(trace, recs, f)))
    slides.sort(key=lambda x: x[0])
    last = max((i for i, r in recs.items() if r.tokens), default=max(recs))  # the last step that drafted
    whole = LectureStep(
        "The whole run",
        f"{len(trace.output_ids)} tokens in {trace.n_steps} forward passes: <b>{trace.tokens_per_step:.2f} tokens "
        f"per step</b>. {esc(suffix.summary_sentence(trace))} Suffix drafting shines where text repeats (edits of "
        f"a file, a tool loop, a summary quoting its source); on fresh text the fallback carries it.",
        "suffix_tree" if recs[last].tokens else "suffix_match", str(last), [], "")
    return [s for _, s in slides] + [whole]


# ---- the figure -----------------------------------------------------------------------------------
def lecture(trace) -> list[LectureStep]:
    walks = {"jacobi": jacobi_lecture, "lookahead": lookahead_lecture, "suffix": suffix_lecture}
    return walks[trace.method](trace) if trace.method in walks else []


def changed_cells(trace, step: LectureStep) -> list[tuple[int, int]]:
    """The cells of the step's still (figure coordinates) whose token differs from the previous
    iteration: Jacobi, the block's positions that changed from y(k-1) to y(k); lookahead (the
    position view), the window cells that differ from the previous step's at the same place. The
    first state of a walk has nothing before it, and the pool and mask slides have no such cells:
    none."""
    k = int(step.frame)
    if step.figure == "jacobi":
        rows = analysis.jacobi_states(trace, step.block)
        if not 0 < k < len(rows):
            return []
        return [(p, 1) for p, (a, b) in enumerate(zip(rows[k], rows[k - 1])) if a != b]
    if step.figure not in ("positions", "lookahead"):
        return []
    idx = lookahead.lookahead_steps(trace)
    pos = idx.index(k)
    if pos == 0:
        return []
    grid = lookahead.step_grid(trace, positions=step.figure == "positions")
    now, before = trace.steps[k].record.window, trace.steps[idx[pos - 1]].record.window
    return [grid.window(l, j) for l, level in enumerate(now) for j, tok in enumerate(level)
            if l >= len(before) or j >= len(before[l]) or before[l][j] != tok]


def lecture_figure(trace, step: LectureStep, large: bool = False) -> go.Figure:
    """The slide's figure: a still of the Jacobi block animation's frame or of the lookahead
    position view's step, with the step's cells framed and the cells changed since the previous
    iteration ringed; the pool's entries for a step's current token; a step's mask (an excerpt).
    ``large``: projector mode (``fit_projector``: the slide's figure fits the screen, cells as large
    as it allows, never under MIN_CELL px for the shipped settings)."""
    if step.figure == "mask":
        si = int(step.frame)
        fig = lookahead.step_mask_figure(trace, si, MASK_COLUMNS, MASK_CANDIDATES)
        shown, fed = len(fig.data[0].z), len(lookahead.step_layout(trace, si))
        fig.update_layout(title_text=f"Step {si}'s attention mask"  # the narration beside it says the rest
                          + (f" · {shown} of its {fed} fed tokens" if shown < fed else ""))
        return fit_heatmap(fig, PROJECTOR_HEIGHT, PROJECTOR_WIDTH) if large else fig
    if step.figure == "pool":
        fig, cell = lookahead.pool_entries_figure(trace, int(step.frame)), lookahead.CELL
    elif step.figure == "suffix_match":
        fig, cell = suffix.match_figure(trace, int(step.frame)), 40
    elif step.figure == "suffix_tree":
        fig, cell = suffix.tree_figure(trace, int(step.frame), TREE_NODES), 30
    elif step.figure == "jacobi":
        fig, cell = jacobi.block_animation(trace, step.block), jacobi.CELL
        freeze(fig, step.frame)
    else:
        page = page_of(lookahead.lookahead_steps(trace).index(int(step.frame)))
        build = lookahead.position_animation if step.figure == "positions" else lookahead.step_animation
        fig, cell = build(trace, page), lookahead.CELL
        freeze(fig, step.frame)
    highlight_boxes(fig, step.boxes, step.box_label, pad_y=0.3 if step.figure == "jacobi" else 0.5)
    mark_changed(fig, changed_cells(trace, step), cell)
    return fit_projector(fig, PROJECTOR_HEIGHT, PROJECTOR_WIDTH) if large else fig
