"""The decoding loop: AR, Jacobi, lookahead and prompt lookup behind one loop shape.

Every step of every method is:
  1. propose  - the method picks the tokens to feed after the current token (guesses, window,
                candidates, draft) with their positions and, if needed, a 4D attention mask;
  2. forward  - one forward pass of [current token] + proposal over the KV cache;
  3. verify   - the method reads the argmax at each fed position and decides which tokens are
                right: always the model's next token, plus whatever guesses the chain confirms;
  4. commit   - the accepted tokens join the output (cut at EOS / max_new_tokens), only the KV of
                fed tokens that are now part of the output stays in the cache;
  5. record   - a Step (with the method's own record) goes into the trace and to the caller.

The "current token" is the last committed token; its KV is not cached yet, so every forward feeds
it first and its argmax is always right (that is what makes every method exact under greedy).

Sampling (temperature > 0; ar, lookahead and pld) is a separate path: step 3 calls the method's
``verify_sampled`` with the logits instead of ``verify`` with the argmax list, and a ``Sampler``
(transformers' temperature / top-k / top-p warpers, a seeded torch.Generator) decides each token by
``verify_tree``: candidates tried one at a time, token t accepted with probability p(t), on
rejection p(t) = 0 and the rest renormalised, and when nothing is left to try a draw from what
remains. That keeps the output distribution equal to AR sampling (tests/test_sampling.py). Greedy
runs never touch this path.

    run = Run(lm, prompt_ids, "lookahead", {"W": 5, "N": 4, "G": 5}, max_new_tokens=64)
    for step in run:            # steps arrive as they are committed; `break` stops the run
        print(step.tokens)
    trace = run.trace
"""

from __future__ import annotations

import inspect
import random
import time
from functools import lru_cache
from dataclasses import dataclass
from typing import Any, Iterator

import torch

from .masks import mask_4d
from .pool import NGramPool
from .trace import JacobiBlock, JacobiRecord, LookaheadRecord, PldRecord, SampleRecord, Step, Trace

MAX_NEW_TOKENS_CAP = 4096
DEFAULT_PARAMS: dict[str, dict[str, Any]] = {
    "ar": {},
    "jacobi": {"n": 16, "seed": 0},
    "lookahead": {"W": 5, "N": 4, "G": 5, "seed_pool_prompt": True, "harvest_output": True, "seed": 0},
    "pld": {"k": 10, "max_ngram": 3},
}
_LIMITS = {"n": (1, 256), "W": (1, 64), "N": (2, 16), "G": (0, 64), "k": (1, 64), "max_ngram": (1, 16)}
# The `sampling` params group: accepted by the methods whose sampling is exact. temperature 0 means
# greedy (the default); then the group is left out of the resolved params altogether.
SAMPLING_DEFAULTS: dict[str, Any] = {"temperature": 0.0, "top_k": 0, "top_p": 1.0, "sample_seed": 0}
SAMPLING_METHODS = ("ar", "lookahead", "pld")


@lru_cache(maxsize=None)
def cache_kw(model_class: type) -> str:
    """transformers 5.x renames forward's `past_key_values=` to `cache=`; use whichever it takes."""
    params = inspect.signature(model_class.forward).parameters
    return "cache" if "cache" in params else "past_key_values"


class ConfigError(ValueError):
    """A bad method, parameter or prompt, found before any work starts."""


def resolve_params(method: str, params: dict[str, Any] | None) -> dict[str, Any]:
    """Defaults filled in and every value checked; raises ConfigError with one clear sentence.

    Sampling keys (SAMPLING_DEFAULTS) are taken by ar, lookahead and pld. With temperature > 0 the
    result holds all four of them; with temperature 0 (greedy) none of them.
    """
    if method not in DEFAULT_PARAMS:
        raise ConfigError(f"unknown method {method!r}; choose one of {', '.join(DEFAULT_PARAMS)}")
    params = dict(params or {})
    sampling = {k: params.pop(k) for k in list(params) if k in SAMPLING_DEFAULTS}
    out = dict(DEFAULT_PARAMS[method])
    for k, v in params.items():
        if k not in out:
            raise ConfigError(f"{method} has no parameter {k!r} (it takes {', '.join(out) or 'none'})")
        out[k] = v
    for k, v in out.items():
        if k in ("seed_pool_prompt", "harvest_output"):
            if not isinstance(v, bool):
                raise ConfigError(f"{k} must be true or false")
        elif isinstance(v, bool) or not isinstance(v, int):
            raise ConfigError(f"{k} must be an integer, got {v!r}")
        elif k in _LIMITS and not _LIMITS[k][0] <= v <= _LIMITS[k][1]:
            lo, hi = _LIMITS[k]
            raise ConfigError(f"{k} must be between {lo} and {hi}, got {v}")
    if sampling:
        out.update(_resolve_sampling(method, sampling))
    return out


def _resolve_sampling(method: str, given: dict[str, Any]) -> dict[str, Any]:
    s = SAMPLING_DEFAULTS | given
    t, k, p, seed = s["temperature"], s["top_k"], s["top_p"], s["sample_seed"]
    if isinstance(t, bool) or not isinstance(t, (int, float)) or not 0 <= t <= 100:
        raise ConfigError(f"temperature must be a number between 0 (greedy) and 100, got {t!r}")
    if isinstance(k, bool) or not isinstance(k, int) or not 0 <= k <= 1_000_000:
        raise ConfigError(f"top_k must be an integer >= 0 (0: off), got {k!r}")
    if isinstance(p, bool) or not isinstance(p, (int, float)) or not 0 < p <= 1:
        raise ConfigError(f"top_p must be a number in (0, 1] (1: off), got {p!r}")
    if isinstance(seed, bool) or not isinstance(seed, int) or not 0 <= seed < 2**63:
        raise ConfigError(f"sample_seed must be a non-negative integer, got {seed!r}")
    if t == 0:
        return {}  # greedy: top_k / top_p / sample_seed have nothing to act on
    if method not in SAMPLING_METHODS:
        raise ConfigError(f"{method} decodes greedily only (sampling is not an exact method for it); "
                          f"use temperature 0, or sample with {', '.join(SAMPLING_METHODS)}")
    return {"temperature": float(t), "top_k": k, "top_p": float(p), "sample_seed": seed}


# ---- the KV cache -------------------------------------------------------------------------------
def _cache_len(cache) -> int:
    return cache.get_seq_length()


def keep_fed(cache, base: int, keep: list[int]) -> None:
    """Keep only the fed tokens at relative indices ``keep`` (sorted) after cache position ``base``."""
    total = _cache_len(cache)
    n = len(keep)
    if keep != list(range(n)):  # not a prefix: move the kept entries down first (lookahead)
        idx = torch.tensor(keep, device=cache.layers[0].keys.device) + base
        for layer in cache.layers:
            layer.keys[:, :, base:base + n] = layer.keys[:, :, idx]
            layer.values[:, :, base:base + n] = layer.values[:, :, idx]
    if total - base - n > 0:
        cache.crop(-(total - base - n))


# ---- sampling -----------------------------------------------------------------------------------
class Sampler:
    """The sampling distribution and the random draws of one run.

    p = softmax of the logits after transformers' own warpers, in generate's order (temperature,
    top-k, top-p); every draw comes from one seeded torch.Generator, so a run is reproducible.
    """

    def __init__(self, temperature: float, top_k: int, top_p: float, sample_seed: int, device):
        from transformers import LogitsProcessorList, TemperatureLogitsWarper, TopKLogitsWarper, TopPLogitsWarper

        self.warpers = LogitsProcessorList([TemperatureLogitsWarper(temperature)])
        if top_k:
            self.warpers.append(TopKLogitsWarper(top_k))
        if top_p < 1.0:
            self.warpers.append(TopPLogitsWarper(top_p))
        self.gen = torch.Generator(device=device)
        self.gen.manual_seed(sample_seed)

    @classmethod
    def from_params(cls, params: dict[str, Any], device) -> "Sampler | None":
        if params.get("temperature", 0) <= 0:
            return None
        return cls(params["temperature"], params["top_k"], params["top_p"], params["sample_seed"], device)

    def probs(self, logits: torch.Tensor) -> torch.Tensor:
        """p over the vocabulary for one row of logits (float32, sums to 1)."""
        return torch.softmax(self.warpers(None, logits[None].float()), dim=-1)[0]

    def draw(self, p: torch.Tensor) -> int:
        """One token drawn from p (p need not be normalised)."""
        return int(torch.multinomial(p, 1, generator=self.gen))

    def accepts(self, q: float) -> bool:
        """True with probability q."""
        return float(torch.rand((), generator=self.gen, device=self.gen.device)) < q

    def reject(self, p: torch.Tensor, t: int) -> None:
        """p(t) = 0; the rest is renormalised implicitly (q = p(t) / p.sum(), draws take p as weights)."""
        p[t] = 0.0


def verify_tree(cands: list[list[int]], dist, sampler: Sampler) -> tuple[list[int], int, SampleRecord]:
    """Sampling verification of candidate continuations of the current token (one-hot drafts).

    ``dist(c, d)``: p for the token at depth d (0 = right after the current token), computed from
    the logits at the fed position that precedes it along candidate c: the current token for d = 0,
    candidate c's token d-1 otherwise (any candidate with the same accepted prefix has the same
    context there, so the same p).

    At each depth the candidates that share the accepted prefix are tried in order:
        # q = p(t) / sum(p): token t of the candidate is accepted with probability q
        # rejected: p(t) = 0 (the rest renormalised); the next candidate is tried
        # nothing accepted, or no candidate reaches this depth: draw from what is left of p
    Each accept is speculative sampling's min(1, p/q_draft) rule with a one-hot draft, and each
    rejection leaves the residual max(0, p - q_draft) normalised, so the token at every depth has
    exactly the distribution p: the output is distributed as AR sampling.

    Returns (tokens decided, the candidate the accepted prefix belongs to or -1, the record).
    """
    tokens: list[int] = []
    chosen = -1
    active = list(range(len(cands)))
    rec = SampleRecord([], [], [])
    while True:
        d = len(tokens)
        p = dist(chosen, d).clone()
        tried, hit, rejected = [], -1, set()
        for c in active:
            if d >= len(cands[c]) or cands[c][d] in rejected:
                continue
            t = cands[c][d]
            q = float(p[t] / p.sum())
            ok = sampler.accepts(q)
            tried.append([c, t, round(q, 6), ok])
            if ok:
                hit = c
                break
            sampler.reject(p, t)
            rejected.add(t)
        rec.tried.append(tried)
        if hit < 0:  # draw from what is left (all of p if nothing was tried)
            t = sampler.draw(p)
            rec.final.append(t)
            rec.final_p.append(round(float(p[t] / p.sum()), 6))
            tokens.append(t)
            return tokens, chosen, rec
        t = cands[hit][d]
        rec.final.append(t)
        rec.final_p.append(tried[-1][2])
        tokens.append(t)
        chosen = hit
        active = [c for c in active if cands[c][:d + 1] == tokens]


# ---- methods: propose and verify ----------------------------------------------------------------
@dataclass
class Proposal:
    tokens: list[int]  # fed after the current token
    offsets: torch.Tensor | None = None  # positions relative to the current token (None: 1, 2, ...)
    mask: torch.Tensor | None = None  # 4D float mask, or None for a plain causal sequence
    logit_rows: list[int] | None = None  # fed positions whose logits are needed (None: all)


@dataclass
class Verdict:
    tokens: list[int]  # accepted tokens, the model's next token first
    keep: list[int]  # fed indices whose KV stays (always starts with 0, the current token)
    sources: list[str] | None = None


class Method:
    name = ""

    def __init__(self, run: "Run", p: dict[str, Any]):
        self.run, self.p = run, p

    def propose(self) -> Proposal:
        return Proposal([])

    def verify(self, am: list[int], proposal: Proposal) -> Verdict:
        return Verdict([am[0]], [0])

    def verify_sampled(self, logits: torch.Tensor, proposal: Proposal, sampler: Sampler) -> Verdict:
        """Sampling path of step 3 (``logits`` rows as ``proposal.logit_rows``); AR: one draw."""
        tokens, _, self.sample_rec = verify_tree([], lambda c, d: sampler.probs(logits[0]), sampler)
        return Verdict(tokens, [0], ["step"])

    def after_commit(self, verdict: Verdict, committed: list[int], step: Step) -> None:
        pass

    def finish(self) -> None:
        pass


class AR(Method):
    name = "ar"


class Jacobi(Method):
    """CLLM's Jacobi decoding in block mode (DESIGN.md). Block position 0 is the current token."""

    name = "jacobi"

    def __init__(self, run, p):
        super().__init__(run, p)
        self.rng = random.Random(p["seed"])
        self.block_index = -1
        self._new_block()

    def _new_block(self) -> None:
        r = self.run
        self.block_index += 1
        self.iteration = 0
        self.offset = len(r.output) - 1  # the current token is the block's position 0
        guesses = min(self.p["n"] - 1, r.max_new_tokens - len(r.output))
        self.block = [r.cur] + [self.rng.choice(r.prompt_ids) for _ in range(guesses)]
        self.c = 0  # block positions < c are committed (their KV is cached); c is the current token

    def propose(self) -> Proposal:
        return Proposal(self.block[self.c + 1:])

    def verify(self, am, proposal):
        guesses = proposal.tokens
        # Jacobi update: the argmax at each fed position is the new guess for the next position
        self.after = self.block[:self.c + 1] + am[:len(guesses)]
        a = 0  # guesses that did not change: each is then right, and so is the argmax after it
        while a < len(guesses) and guesses[a] == am[a]:
            a += 1
        return Verdict(am[:a + 1], list(range(a + 1)), ["step"] + ["jacobi"] * a)

    def after_commit(self, verdict, committed, step):
        before, after = self.block, self.after
        if self.run.record:
            step.jacobi = JacobiRecord(self.block_index, self.iteration, self.c, before, after, len(verdict.keep))
        self.block = after
        self.c += len(verdict.keep)
        self.iteration += 1
        if self.c >= len(self.block) or self.run.done:
            self._close_block()
            if not self.run.done:
                self._new_block()

    def _close_block(self) -> None:
        out = self.run.output
        fixed = out[self.offset:self.offset + len(self.block)]
        self.run.trace.blocks.append(JacobiBlock(self.block_index, self.offset, fixed, self.iteration))

    def verify_sampled(self, logits, proposal, sampler):
        raise ConfigError("jacobi decodes greedily only")  # resolve_params refuses sampling earlier

    def finish(self) -> None:
        if not self.run.trace.blocks or self.run.trace.blocks[-1].index != self.block_index:
            if self.iteration:
                self._close_block()


class Lookahead(Method):
    """Lookahead decoding (Fu et al., 2024): a 2D window of guesses fills an n-gram pool whose
    entries for the current token are verified in the same forward."""

    name = "lookahead"

    def __init__(self, run, p):
        super().__init__(run, p)
        self.W, self.N, self.G = p["W"], p["N"], p["G"]
        rng = random.Random(p["seed"])
        self.window = [[rng.choice(run.prompt_ids) for _ in range(self.W)]]  # level 0 from the prompt
        self.pool = NGramPool(self.G)
        self.ops: list[list] = []
        if p["seed_pool_prompt"]:
            ids = run.prompt_ids
            for i in range(len(ids) - self.N + 1):
                self.pool.add(ids[i:i + self.N], "prompt")
            if run.record:
                run.trace.pool_seed = [[k, *c] for k, v in self.pool.as_dict().items() for c in v]

    def propose(self):
        self.cands = self.pool.candidates(self.run.cur)[: self.G]
        levels = len(self.window)
        mask, offsets = mask_4d(self.W, self.N, len(self.cands), levels, self.run.past, self.run.dtype, self.run.device)
        tokens = [t for level in self.window for t in level] + [t for c, _ in self.cands for t in c]
        top = 1 + (levels - 1) * self.W
        self.top = top
        self.cand0 = 1 + levels * self.W
        rows = [0] + list(range(top, top + self.W)) + list(range(self.cand0, self.cand0 + len(self.cands) * (self.N - 1)))
        return Proposal(tokens, offsets, mask, rows)

    def verify(self, am, proposal):
        # am is indexed like proposal.logit_rows: [current, top window level (W), candidates]
        W, m = self.W, self.N - 1
        self.top_out = am[1:1 + W]
        best, best_k, self.matched = -1, 0, []
        for ci, (cont, _) in enumerate(self.cands):
            base = 1 + W + ci * m
            k, pred = 0, am[0]
            while k < m and cont[k] == pred:
                pred = am[base + k]
                k += 1
            self.matched.append(k)
            if k > best_k:
                best, best_k = ci, k
        self.chosen = best
        if best < 0:
            return Verdict([am[0]], [0], ["step"])
        cont, origin = self.cands[best]
        base = 1 + W + best * m
        src = {"window": "pool", "prompt": "prompt_pool", "output": "output_pool"}[origin]
        fed_base = self.cand0 + best * m
        return Verdict(list(cont[:best_k]) + [am[base + best_k - 1]], [0] + list(range(fed_base, fed_base + best_k)),
                       ["step"] + [src] * best_k)

    def verify_sampled(self, logits, proposal, sampler):
        # logits rows as proposal.logit_rows: [current, top window level (W), candidates]
        W, m = self.W, self.N - 1
        self.top_out = logits[1:1 + W].argmax(-1).tolist()  # the window keeps its greedy (Jacobi) update
        cands = [list(c) for c, _ in self.cands]

        def dist(c, d):  # candidate c's token d-1 predicts depth d; the current token predicts depth 0
            return sampler.probs(logits[0 if d == 0 else 1 + W + c * m + d - 1])

        tokens, best, self.sample_rec = verify_tree(cands, dist, sampler)
        self.matched = [_common_prefix(c, tokens) for c in cands]
        self.chosen = best
        a = len(tokens) - 1  # accepted candidate tokens; the last token was drawn
        if best < 0:
            return Verdict(tokens, [0], ["step"])
        src = {"window": "pool", "prompt": "prompt_pool", "output": "output_pool"}[self.cands[best][1]]
        fed_base = self.cand0 + best * m
        return Verdict(tokens, [0] + list(range(fed_base, fed_base + a)), ["step"] + [src] * a)

    def after_commit(self, verdict, committed, step):
        ops: list[list] = []
        harvested = []
        window = self.window
        if len(window) < self.N - 1:  # filling: the top level's argmax becomes a new level
            self.window = window + [list(self.top_out)]
        else:  # full: harvest one n-gram per column, then slide one level
            for j in range(self.W):
                gram = [level[j] for level in window] + [self.top_out[j]]
                harvested.append(gram)
                ops += self.pool.add(gram, "window")
            self.window = window[1:] + [list(self.top_out)]
        if self.p["harvest_output"]:
            seq, N = self.run.all_ids, self.N
            for end in range(len(seq) - len(committed), len(seq)):
                if end - N + 1 >= 0:
                    ops += self.pool.add(seq[end - N + 1:end + 1], "output")
        if self.run.record:
            step.lookahead = LookaheadRecord(
                window=[list(l) for l in window], harvested=harvested,
                candidates=[list(c) for c, _ in self.cands], matched=self.matched,
                origins=[o for _, o in self.cands], chosen=self.chosen, pool_ops=ops)


class PromptLookup(Method):
    """Prompt lookup decoding: the draft is what followed the last earlier occurrence of the
    trailing n-gram (longest n first) in prompt + output.

    Example: seq = [5, 1, 2, 3, 9, 1, 2], max_ngram = 2 -> trailing (1, 2) occurred at index 1,
    so the draft is [3, 9, 1, ...] (up to k tokens).
    """

    name = "pld"

    def propose(self):
        seq = self.run.all_ids
        budget = self.run.max_new_tokens - len(self.run.output)  # accepted draft tokens + the bonus
        self.draft, self.ngram, self.source = [], 0, -1
        k = min(self.p["k"], budget - 1)
        if k > 0:
            for ng in range(min(self.p["max_ngram"], len(seq) - 1), 0, -1):
                pat = seq[-ng:]
                for i in range(len(seq) - ng - 1, -1, -1):
                    if seq[i + ng - 1] == pat[-1] and seq[i:i + ng] == pat:
                        self.draft, self.ngram, self.source = seq[i + ng:i + ng + k], ng, i + ng
                        break
                if self.draft:
                    break
        return Proposal(self.draft)

    def verify(self, am, proposal):
        a = 0
        while a < len(self.draft) and self.draft[a] == am[a]:
            a += 1
        self.matched = a
        return Verdict(am[:a + 1], list(range(a + 1)), ["step"] + ["pld"] * a)

    def verify_sampled(self, logits, proposal, sampler):
        # fed: [current, draft...]; the logits at fed position d predict the token at depth d
        cands = [self.draft] if self.draft else []
        tokens, _, self.sample_rec = verify_tree(cands, lambda c, d: sampler.probs(logits[d]), sampler)
        a = self.matched = len(tokens) - 1
        return Verdict(tokens, list(range(a + 1)), ["step"] + ["pld"] * a)

    def after_commit(self, verdict, committed, step):
        if self.run.record:
            step.pld = PldRecord(list(self.draft), self.matched, self.ngram, self.source)


METHOD_CLASSES = {m.name: m for m in (AR, Jacobi, Lookahead, PromptLookup)}


def _common_prefix(a: list[int], b: list[int]) -> int:
    n = 0
    while n < len(a) and n < len(b) and a[n] == b[n]:
        n += 1
    return n


# ---- the loop ----------------------------------------------------------------------------------
class Run:
    """One decoding run. Iterate it to get each Step as it is committed; ``trace`` holds the record."""

    def __init__(self, lm, prompt_ids: list[int], method: str, params: dict[str, Any] | None = None,
                 max_new_tokens: int = 128, record: bool = True, prompt_text: str = "", chat: bool = False):
        self.params = resolve_params(method, params)
        if isinstance(max_new_tokens, bool) or not isinstance(max_new_tokens, int) or not 1 <= max_new_tokens <= MAX_NEW_TOKENS_CAP:
            raise ConfigError(f"max_new_tokens must be an integer between 1 and {MAX_NEW_TOKENS_CAP}, got {max_new_tokens!r}")
        if not prompt_ids:
            raise ConfigError("the prompt is empty")
        vocab = lm.model.get_input_embeddings().num_embeddings
        if any((not isinstance(t, int)) or t < 0 or t >= vocab for t in prompt_ids):
            raise ConfigError(f"prompt ids must be integers in [0, {vocab})")
        limit = getattr(lm.model.config, "max_position_embeddings", None)
        if limit and len(prompt_ids) + max_new_tokens > limit:
            raise ConfigError(f"prompt ({len(prompt_ids)} tokens) + max_new_tokens exceeds the model's context of {limit}")
        self.lm, self.method_name = lm, method
        self.cache_kw = cache_kw(type(lm.model))
        self.prompt_ids = [int(t) for t in prompt_ids]
        self.max_new_tokens, self.record = max_new_tokens, record
        self.eos = set(lm.eos_token_ids)
        self.device = lm.model.device
        self.dtype = next(lm.model.parameters()).dtype
        self.sampler = Sampler.from_params(self.params, self.device)  # None: greedy
        self.output: list[int] = []
        self.done = False
        self._stopped = False
        self._started = False
        self.trace = Trace(method=method, params=self.params, model_id=lm.model_id, device=str(lm.device),
                           dtype=str(lm.dtype), prompt_ids=list(self.prompt_ids), prompt_text=prompt_text,
                           chat=chat, max_new_tokens=max_new_tokens, eos_token_ids=sorted(self.eos), recorded=record)

    # state the methods read
    @property
    def cur(self) -> int:
        return self.output[-1]

    @property
    def all_ids(self) -> list[int]:
        return self.prompt_ids + self.output

    @property
    def past(self) -> int:
        return len(self.prompt_ids) + len(self.output) - 1

    def stop(self) -> None:
        """End the run early (e.g. the user pressed Stop); the trace stays valid."""
        self._stopped = True

    def __iter__(self) -> Iterator[Step]:
        if self._started:
            raise RuntimeError("a Run can be iterated once")
        self._started = True
        return self._loop()

    def decode(self) -> Trace:
        for _ in self:
            pass
        return self.trace

    def _sync(self) -> None:
        if self.device.type == "cuda":
            torch.cuda.synchronize()

    def _commit(self, tokens: list[int]) -> list[int]:
        """Append tokens, cut at the first EOS and at max_new_tokens; returns what was appended."""
        room = self.max_new_tokens - len(self.output)
        out = []
        for t in tokens[:room]:
            out.append(t)
            if t in self.eos:
                self.done = True
                self.trace.stop_reason = "eos"
                break
        self.output += out
        if not self.done and len(self.output) >= self.max_new_tokens:
            self.done = True
            self.trace.stop_reason = "max_new_tokens"
        return out

    @torch.inference_mode()
    def _loop(self) -> Iterator[Step]:
        from transformers import DynamicCache

        lm, trace = self.lm, self.trace
        model = lm.model
        t_start = time.perf_counter()
        # prefill: the prompt, and the first new token from its last position
        self.cache = DynamicCache(config=model.config)
        ids = torch.tensor([self.prompt_ids], device=self.device)
        logits = model(input_ids=ids, use_cache=True, logits_to_keep=1, **{self.cache_kw: self.cache}).logits
        first = int(logits[0, -1].argmax()) if self.sampler is None else self.sampler.draw(self.sampler.probs(logits[0, -1]))
        self._sync()
        trace.prefill_seconds = time.perf_counter() - t_start
        self._commit([first])
        method = METHOD_CLASSES[self.method_name](self, self.params)
        paused = 0.0
        try:
            while not self.done and not self._stopped:
                t0 = time.perf_counter()
                # 1. propose
                prop = method.propose()
                fed = [self.cur] + prop.tokens
                past = self.past
                # 2. one forward
                kw: dict[str, Any] = {self.cache_kw: self.cache}
                if prop.mask is not None:
                    kw["attention_mask"] = prop.mask
                    kw["position_ids"] = (prop.offsets + past).unsqueeze(0)
                if prop.logit_rows is not None:
                    kw["logits_to_keep"] = torch.tensor(prop.logit_rows, device=self.device)
                tf = time.perf_counter()
                logits = model(input_ids=torch.tensor([fed], device=self.device), use_cache=True, **kw).logits
                if self.sampler is None:
                    am = logits[0].argmax(-1).tolist()
                    self._sync()
                    forward_s = time.perf_counter() - tf
                    # 3. verify: greedy, against the argmax chain
                    verdict = method.verify(am, prop)
                else:
                    self._sync()
                    forward_s = time.perf_counter() - tf
                    # 3. verify: sampling, candidates accepted with probability p (verify_tree)
                    verdict = method.verify_sampled(logits[0], prop, self.sampler)
                # 4. commit: accepted tokens join the output; only their KV stays cached
                committed = self._commit(verdict.tokens)
                keep_fed(self.cache, past, verdict.keep)
                step = Step(index=len(trace.steps), fed=len(fed), tokens=committed, seconds=0.0, forward_seconds=forward_s)
                method.after_commit(verdict, committed, step)
                if self.sampler is not None and self.record:
                    step.sampling = method.sample_rec
                # 5. record
                step.seconds = time.perf_counter() - t0
                trace.steps.append(step)
                ty = time.perf_counter()
                try:
                    yield step
                finally:  # the consumer's time (a UI drawing the step, a pause before Stop) is not decoding
                    paused += time.perf_counter() - ty
        finally:
            trace.seconds = time.perf_counter() - t_start - paused
            if not self.done:
                trace.stop_reason = "stopped"
            method.finish()
            trace.output_ids = list(self.output)
            trace.output_pieces = lm.pieces(self.output, self.prompt_ids) if self.record else []
            if self.record:
                if not trace.prompt_pieces:
                    trace.prompt_pieces = lm.pieces(self.prompt_ids)
                known = set(self.prompt_ids) | set(self.output)
                trace.vocab = {str(t): lm.tokenizer.decode([t]) for t in sorted(trace.record_ids() - known)}
            self.cache = None


def decode(lm, prompt_ids: list[int], method: str = "ar", params: dict[str, Any] | None = None,
           max_new_tokens: int = 128, record: bool = True, **kw) -> Trace:
    """Run to the end and return the trace."""
    return Run(lm, prompt_ids, method, params, max_new_tokens, record, **kw).decode()
