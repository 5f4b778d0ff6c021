"""The decoding loop: one shape for every method.

Every step of every method is:
  1. propose  - the method (decoding/methods/) returns a Proposal: the tokens to feed after the
                current token, their positions and mask, and its guesses as chains;
  2. forward  - one forward pass of [current token] + proposal over the KV cache;
  3. verify   - a shared verifier (decoding/verify.py) decides the tokens: the longest chain prefix
                that matches the model's argmax (or, sampling, is accepted by verify_tree) and the
                model's own token after it; it also decides each token's origin;
  4. commit   - the tokens join the output (cut at EOS / max_new_tokens); only the KV of fed
                tokens that are now part of the output stays in the cache;
  5. record   - the method learns from the step (``update``) and returns its record; a Step goes
                into the trace and to the caller.

The "current token" is the last committed token; its KV is not cached yet, so every forward feeds
it first and its argmax is always right (that is what makes every method exact under greedy).

    run = Run(lm, prompt_ids, "lookahead", {"W": 5, "N": 4, "G": 5}, max_new_tokens=64)
    for step in run:            # steps arrive as they are committed; `break` stops the run
        print(step.tokens)
    trace = run.trace
"""

from __future__ import annotations

import time
from dataclasses import replace
from typing import Any, Iterator

import torch

from .budget import is_auto
from .methods import REGISTRY, ConfigError, resolve_params
from .model import cache_kw
from .perf.costs import step_costs_for
from .sampling import Sampler
from .trace import Step, Trace
from .verify import Proposal, StepContext, Verdict, verify_greedy, verify_sampled

MAX_NEW_TOKENS_CAP = 4096
STATIC_SLACK = 64  # a compiled step's cache holds prompt + max_new_tokens + this many fed rows (past it: decoding.compiled.to_dynamic)


def keep_fed(cache, base: int, keep: list[int]) -> None:
    """Keep only the fed tokens at relative indices ``keep`` (sorted) after cache position ``base``."""
    total = cache.get_seq_length()
    n = len(keep)
    if keep != list(range(n)):  # not a prefix: move the kept entries down first (lookahead)
        idx = torch.tensor(keep) + base
        for layer in cache.layers:  # each layer's cache lives on its layer's device (a split model)
            i = idx.to(layer.keys.device)
            layer.keys[:, :, base:base + n] = layer.keys[:, :, i]
            layer.values[:, :, base:base + n] = layer.values[:, :, i]
    if total - base - n > 0:
        cache.crop(-(total - base - n))


def check_request(lm, prompt_ids: list[int], max_new_tokens: int) -> None:
    """ConfigError (one sentence) for a prompt or length the model cannot take."""
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


class Run:
    """One decoding run. Iterate it to get each Step as it is committed; ``trace`` holds the record."""

    def __init__(self, lm, prompt_ids: list[int], method: str, params: dict[str, Any] | None = None,
                 max_new_tokens: int = 128, record: bool = True, prompt_text: str = "", chat: bool = False,
                 step_costs=None):
        self.params = resolve_params(method, params)
        check_request(lm, prompt_ids, max_new_tokens)
        self.lm, self.method_name, self.spec = lm, method, REGISTRY[method]
        self.cache_kw = cache_kw(type(lm.model))
        self.prompt_ids = [int(t) for t in prompt_ids]
        self.max_new_tokens, self.record = max_new_tokens, record
        self.eos = set(lm.eos_token_ids)
        self.device = lm.model.device
        self.dtype = next(lm.model.parameters()).dtype
        self.sampler = Sampler.from_params(self.params, self.device)  # None: greedy
        # budget="auto": what a step costs here (decoding.budget.StepCosts; default: this model's
        # measured or shipped curve), calibrated online from this run's step times
        self.costs = None
        if is_auto(self.params):
            self.costs = step_costs if step_costs is not None else step_costs_for(lm)
        self.output: list[int] = []
        self.cache, self.stepper = None, None  # the KV cache; the compiled step serving this run (or None)
        self.compile_seconds = 0.0  # building compiled graphs during this run (left out of every timing)
        self.done = False
        self._stopped = False
        self._started = False
        self.trace = Trace(method=method, params=self.params, model_id=lm.model_id, device=str(lm.device),
                           dtype=str(lm.dtype), kernel=getattr(lm, "kernel", "stock"), prompt_ids=list(self.prompt_ids), prompt_text=prompt_text,
                           chat=chat, max_new_tokens=max_new_tokens, eos_token_ids=sorted(self.eos), recorded=record)

    def context(self) -> StepContext:
        """What a method sees of the run now (a snapshot: the method cannot change the run)."""
        return StepContext(list(self.prompt_ids), list(self.output), self.max_new_tokens, self.done,
                           self.dtype, self.device, self.costs)

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

    def _prefill(self) -> None:
        """The prompt, and the first new token from its last position."""
        from transformers import DynamicCache

        model = self.lm.model
        stepper = getattr(self.lm, "compiled", None)  # decoding.compiled.CompiledStep, or None
        if stepper is not None and not stepper.broken:
            self.cache = stepper.acquire(len(self.prompt_ids) + self.max_new_tokens + STATIC_SLACK, self.cache_kw)
            self.stepper = stepper if self.cache is not None else None
        if self.stepper is None:
            self.cache = DynamicCache(config=model.config)
        self.trace.step = "compiled" if self.stepper is not None else "eager"
        ids = torch.tensor([self.prompt_ids], device=self.device)
        logits = model(input_ids=ids, use_cache=True, logits_to_keep=1, **{self.cache_kw: self.cache}).logits
        first = int(logits[0, -1].argmax()) if self.sampler is None else self.sampler.draw(self.sampler.probs(logits[0, -1]))
        self._sync()
        self._commit([first])

    def _forward(self, prop: Proposal) -> tuple[torch.Tensor, float]:
        """Step 2: one forward of [current token] + the proposal; (logits rows, seconds)."""
        if self.stepper is not None and not self.stepper.fits(self.cache, 1 + len(prop.tokens), self.past):
            self.cache, self.stepper = self.stepper.to_dynamic(self.cache, self.past), None  # the rest eagerly
        if self.stepper is not None:
            t, built = time.perf_counter(), self.stepper.compile_seconds
            logits = self.stepper.forward(self.cache, [self.cur] + prop.tokens,
                                          prop.offsets if prop.mask is not None else None, prop.mask, self.past)
            self._sync()  # a CUDA replay returns before it ends
            if prop.logit_rows is not None:
                logits = logits[prop.logit_rows]
            built = self.stepper.compile_seconds - built  # a graph built in this step: not decoding time
            self.compile_seconds += built
            return logits, time.perf_counter() - t - built
        kw: dict[str, Any] = {self.cache_kw: self.cache}
        if prop.mask is not None:
            kw["attention_mask"] = prop.mask
            kw["position_ids"] = (prop.offsets + self.past).unsqueeze(0)
        if prop.logit_rows is not None:
            kw["logits_to_keep"] = torch.tensor(prop.logit_rows, device=self.device)
        t = time.perf_counter()
        logits = self.lm.model(input_ids=torch.tensor([[self.cur] + prop.tokens], device=self.device), use_cache=True, **kw).logits
        self._sync()
        return logits[0], time.perf_counter() - t

    def _verify(self, prop: Proposal, logits: torch.Tensor) -> tuple[Verdict, list[int]]:
        """Step 3: the tokens, from the argmax chain (greedy) or verify_tree (sampling)."""
        argmax = logits.argmax(-1).tolist()
        if self.sampler is None:
            return verify_greedy(prop, argmax), argmax
        return verify_sampled(prop, logits, self.sampler), argmax

    def _step(self, method) -> Step:
        """One step: propose, forward, verify, commit, record."""
        t0, built = time.perf_counter(), self.compile_seconds
        prop = method.propose(self.context())  # 1
        past = self.past
        logits, forward_s = self._forward(prop)  # 2
        verdict, argmax = self._verify(prop, logits)  # 3
        committed = self._commit(verdict.tokens)  # 4
        keep_fed(self.cache, past, verdict.keep)
        extra = {}
        if self.spec.topk_param:  # the method learns from each row's top-k (Token Recycling's matrix)
            extra["topk"] = logits.topk(min(self.params[self.spec.topk_param], logits.shape[-1]), -1).indices.tolist()
        rec = method.update(self.context(), prop, verdict, argmax, committed, **extra)  # 5
        step = Step(index=len(self.trace.steps), fed=1 + len(prop.tokens), tokens=committed, seconds=0.0,
                    forward_seconds=forward_s, origins=verdict.origins[:len(committed)])
        if self.record:
            step.record = rec
            step.sampling = verdict.sampling
            if prop.budget is not None:
                step.budget = replace(prop.budget, realized=len(committed))
        step.seconds = time.perf_counter() - t0 - (self.compile_seconds - built)
        if self.costs is not None:
            self.costs.observe(step.fed, step.seconds)
        return step

    @torch.inference_mode()
    def _loop(self) -> Iterator[Step]:
        trace, t_start = self.trace, time.perf_counter()
        self._prefill()
        trace.prefill_seconds = time.perf_counter() - t_start
        method = self.spec.cls(self.context(), self.params)
        for k, v in method.trace_fields().items():
            setattr(trace, k, v)
        paused = 0.0
        try:
            while not self.done and not self._stopped:
                step = self._step(method)
                trace.steps.append(step)
                ty = time.perf_counter()
                try:
                    yield step
                finally:  # the consumer's time (a UI drawing the step, a pause before Stop) is not decoding
                    paused += time.perf_counter() - ty
        finally:
            trace.seconds = time.perf_counter() - t_start - paused - self.compile_seconds
            trace.compile_seconds = self.compile_seconds
            if not self.done:
                trace.stop_reason = "stopped"
            method.finish(self.context())
            self._finish_trace()

    def _finish_trace(self) -> None:
        trace, lm = self.trace, self.lm
        trace.output_ids = list(self.output)
        trace.output_pieces = lm.pieces(self.output, self.prompt_ids) if self.record else []
        if self.record:
            if not trace.prompt_pieces:
                trace.prompt_pieces = lm.pieces(self.prompt_ids)
            known = set(self.prompt_ids) | set(self.output)
            trace.vocab = {str(t): lm.tokenizer.decode([t]) for t in sorted(trace.record_ids() - known)}
        if self.stepper is not None:
            self.stepper.release(self.cache)
        self.cache = None


def decode(lm, prompt_ids: list[int], method: str = "ar", params: dict[str, Any] | None = None,
           max_new_tokens: int = 128, record: bool = True, **kw) -> Trace:
    """Run to the end and return the trace."""
    return Run(lm, prompt_ids, method, params, max_new_tokens, record, **kw).decode()


def warm_up(lm, chat: bool = False) -> None:
    """A short AR decode before timing anything: the first forwards allocate, and would slow
    whichever run comes first."""
    decode(lm, lm.encode("Hello there, how are you?", chat=chat), "ar", {}, 8, record=False)
