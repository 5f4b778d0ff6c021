"""Small hand-made traces for the figure-builder and page tests (worked out by hand below).

Jacobi, n = 4, prompt "A B C" (ids 1 2 3), prefill token 10:
    block 0 starts [10 | 2 3 1]     (position 0 = the current token, guesses from the prompt)
    it 0: fed 10 2 3 1  -> argmax 11 5 13 14 -> commits 11            after [10 11 5 13]
    it 1: fed 11 5 13   -> argmax 12 13 14   -> commits 12            after [10 11 12 13]
    it 2: fed 12 13     -> argmax 13 99      -> 13 unchanged: commits 13 99
    fixed point [10 11 12 13]; output 10 11 12 13 99. 13 became right in iteration 1's forward
    behind the wrong 5: a stationary token, not a fast-forward (CLLM).

Jacobi with a fast-forward (``jacobi_ff_trace``), n = 5, prefill token 10:
    it 0: fed 10 2 3 1 2   -> argmax 11 12 13 50  -> commits 11  after [10 11 12 13 50]
          (one forward made 11, 12, 13 right: 12 and 13 are fast-forwarded)
    it 1: fed 11 12 13 50  -> argmax 12 13 14 60  -> 12 13 confirmed: commits 12 13 14
    it 2: fed 14           -> argmax 99           -> commits 99 (the next block's first token)
    fixed point [10 11 12 13 14]; output 10 11 12 13 14 99.

Lookahead, W = 2, N = 3, G = 2, prefill token 10:
    step 0: window [[1 2]] (filling), no candidates -> commits 11
    step 1: window [[1 2] [20 21]] harvests (1 20 30) (2 21 31); candidates for 11:
            (12 13) from the window pool matched 2 (chosen), (12 40) from the prompt matched 1
            -> commits 12 13 14
"""

from __future__ import annotations

from decoding.methods import resolve_params
from decoding.methods.jacobi import JacobiBlock, JacobiRecord
from decoding.methods.lookahead import LookaheadRecord
from decoding.trace import Step, Trace


def _base(method, params, **kw):
    return Trace(method=method, params=resolve_params(method, params), model_id="hand-made", device="cpu", dtype="float32",
                 prompt_ids=[1, 2, 3], prompt_pieces=["A", " B", " <C>"], prompt_text="A B <C>", prefill_seconds=0.01, **kw)


def jacobi_trace() -> Trace:
    t = _base("jacobi", {"n": 4, "seed": 0})
    t.output_ids = [10, 11, 12, 13, 99]
    t.output_pieces = [" x", " <b>", "&", "\n", " y"]
    recs = [
        JacobiRecord(0, 0, 0, [10, 2, 3, 1], [10, 11, 5, 13], 1),
        JacobiRecord(0, 1, 1, [10, 11, 5, 13], [10, 11, 12, 13], 1),
        JacobiRecord(0, 2, 2, [10, 11, 12, 13], [10, 11, 12, 13], 2),
    ]
    toks = [[11], [12], [13, 99]]
    origins = [["step"], ["step"], ["jacobi", "step"]]  # 13 was a converged guess, 99 the model's own token
    t.steps = [Step(i, 4 - i, toks[i], 0.01, 0.008, record=r, origins=origins[i]) for i, r in enumerate(recs)]
    t.blocks = [JacobiBlock(0, 0, [10, 11, 12, 13], 3)]
    t.seconds, t.stop_reason, t.max_new_tokens = 0.05, "max_new_tokens", 5
    return t


def jacobi_ff_trace() -> Trace:
    t = _base("jacobi", {"n": 5, "seed": 0})
    t.output_ids = [10, 11, 12, 13, 14, 99]
    t.output_pieces = [" x", " y", " z", " w", "!", " v"]
    recs = [
        JacobiRecord(0, 0, 0, [10, 2, 3, 1, 2], [10, 11, 12, 13, 50], 1),
        JacobiRecord(0, 1, 1, [10, 11, 12, 13, 50], [10, 11, 12, 13, 14], 3),
        JacobiRecord(0, 2, 4, [10, 11, 12, 13, 14], [10, 11, 12, 13, 14], 1),
    ]
    toks = [[11], [12, 13, 14], [99]]
    origins = [["step"], ["jacobi", "jacobi", "step"], ["step"]]
    t.steps = [Step(i, 5 - r.start, toks[i], 0.01, 0.008, record=r, origins=origins[i]) for i, r in enumerate(recs)]
    t.blocks = [JacobiBlock(0, 0, [10, 11, 12, 13, 14], 3)]
    t.seconds, t.stop_reason, t.max_new_tokens = 0.05, "max_new_tokens", 6
    return t


def lookahead_trace() -> Trace:
    t = _base("lookahead", {"W": 2, "N": 3, "G": 2, "seed_pool_prompt": True, "harvest_output": False, "seed": 0})
    t.output_ids = [10, 11, 12, 13, 14]
    t.output_pieces = [" x", " y", " <z>", " w", "!"]
    t.pool_seed = [[11, 12, 40]]
    r0 = LookaheadRecord(window=[[1, 2]], harvested=[], candidates=[], matched=[], origins=[], chosen=-1,
                         pool_ops=[["+", [11, 12, 13]]])
    r1 = LookaheadRecord(window=[[1, 2], [20, 21]], harvested=[[1, 20, 30], [2, 21, 31]],
                         candidates=[[12, 13], [12, 40]], matched=[2, 1], origins=["window", "prompt"], chosen=0,
                         pool_ops=[["+", [1, 20, 30]], ["+", [2, 21, 31]]])
    t.steps = [Step(0, 3, [11], 0.01, 0.008, record=r0, origins=["step"]),
               Step(1, 9, [12, 13, 14], 0.012, 0.01, record=r1, origins=["pool", "pool", "step"])]
    t.seconds, t.stop_reason, t.max_new_tokens = 0.03, "max_new_tokens", 5
    return t


def ar_trace() -> Trace:
    t = _base("ar", {})
    t.output_ids = [10, 11, 12, 13, 14]
    t.output_pieces = [" x", " y", " <z>", " w", "!"]
    t.steps = [Step(i, 1, [tok], 0.01, 0.009, origins=["step"]) for i, tok in enumerate(t.output_ids[1:])]
    t.seconds, t.stop_reason, t.max_new_tokens = 0.05, "max_new_tokens", 5
    return t
