"""A compiled decode step (issue 21, item 2): ``torch.compile`` over a static KV cache.

The eager step loses about 14 ms of a 34 ms CPU step outside the linear products (the profile in
docs/benchmarks.md: the dynamic cache's concatenations, some 600 small operators and their
dispatch). Compiling the whole forward fuses the small operators into a few C++ loops (inductor's
CPU code generation) and writes the KV into a preallocated cache instead of concatenating it. The
linear products stay this model's kernel (decoding.kernels), traced into the graph.

A compiled graph has fixed shapes, so a step's fed rows are padded up to one of ``FED_SIZES`` and
the cache is one of ``CACHE_SIZES`` long: one graph per (fed size, cache size) used, compiled the
first time a run needs it (tens of seconds on a small CPU; ``progress`` says so) and kept on disk
by inductor's own cache (``TORCHINDUCTOR_CACHE_DIR``, under this lab's cache folder), so a second
start loads it instead. Every step passes an explicit 4D mask over the whole cache: the real rows
see the valid cache and their own (tree or causal) block, never a padding row or a stale entry;
padding rows see only themselves. Their KV lands after the real rows' and is cut by ``keep_fed``
like any rejected guess.

One static cache per cache size serves one run at a time (a lock); a second concurrent run, a
prompt longer than the largest size and a model split over devices run the eager step; a step
feeding more than the largest fed size runs eagerly over the static cache, and a run whose next
step would pass the cache's end goes on eagerly over a copy of it (``to_dynamic``). The eager and
the compiled step agree up to float rounding (the compiled step sums in another order, so a near-tie
can break the other way, as between kernels). The caches stay allocated for the next run (the
bundled model: 46 KB per position, 12 MB for 256 positions, 189 MB for 4096).

Grouped KV heads (the bundled model: 9 query heads over 3 KV heads): transformers' sdpa attention,
given a mask inside a compiled graph, repeats the cache's keys and values for every query head
(``repeat_kv``: a copy of the whole cache per layer and step, 5 ms of a 31 ms step here), and so
does its eager forward of a step that feeds several tokens; models on the CPU run with
``gqa_sdpa``, which asks SDPA for the grouped heads instead (``enable_gqa``; the same values, bit for
bit in eager on 2- to 16-token steps) and is transformers' own sdpa everywhere else.

On a CUDA device the graphs are also captured as CUDA graphs (gpt-fast's approach: inductor's
``mode="reduce-overhead"``, one captured graph per fed and cache size), so a step is one replay
instead of hundreds of kernel launches: a small model's GPU step is launch-bound, not
bandwidth-bound. The static cache is allocated eagerly (``init_cache``) so its tensors keep their
addresses across replays (transformers marks them static), each call starts a new replay step
(``torch.compiler.cudagraph_mark_step_begin``) and its logits are copied out of the graph's
memory, which the next replay overwrites. ``scripts/gpu_check`` measures it against the eager step.

Guards: before each call of a compiled function dynamo checks its guards (every parameter's and
cache tensor's size, stride and dtype, the grad mode ...), about 2 ms of a 27 ms step here. Once a
(fed size, cache size) graph has run in this process under full guards, the next calls of it skip
all but the guards that tell the graphs apart (``torch.compiler.set_stance(skip_guard_eval_unsafe=
True)``: "unsafe" where a call would need a graph not built yet, which the fed and cache sizes
rule out here). Anything else those guards would catch resets the trust: a repacked weight
(``acquire``), a call outside inference mode, and a model with adapters that can be switched off
(PEFT) never takes the shortcut.
"""

from __future__ import annotations

import os
import threading
import time
from typing import Any, Callable

import torch

FED_SIZES = (1, 2, 4, 8, 16, 32, 64)
CACHE_SIZES = (256, 384, 512, 768, 1024, 1536, 2048, 3072, 4096)  # 1.5x apart: attention reads the whole cache
STEPS = ("eager", "compiled")


class CompileError(RuntimeError):
    """The compiled step cannot run here (no C++ compiler, an unsupported model), in one sentence."""


def fed_size(q: int) -> int | None:
    """The padded fed size for ``q`` rows (None: more than the largest, run eagerly)."""
    return next((s for s in FED_SIZES if s >= q), None)


def cache_size(need: int) -> int | None:
    """The static cache length for ``need`` positions (None: longer than the largest)."""
    return next((s for s in CACHE_SIZES if s >= need), None)


def step_mask(mask: torch.Tensor | None, q: int, past: int, size: int, length: int, dtype) -> torch.Tensor:
    """The [1, 1, size, length] float mask of a padded step: the real rows' mask (``mask``
    [1, 1, q, past + q], or causal when None) with the rest of the cache blocked; a padding row
    sees only its own column."""
    low = torch.finfo(dtype).min
    out = torch.full((size, length), low, dtype=dtype)
    if mask is None:
        out[:q, :past + q] = 0.0
        out[:q, past:past + q].masked_fill_(torch.ones(q, q, dtype=torch.bool).triu(1), low)
    else:
        out[:q, :past + q] = mask[0, 0].to(device="cpu", dtype=dtype)
    pad = torch.arange(q, size)
    out[pad, past + pad] = 0.0
    return out.view(1, 1, size, length)


GQA_SDPA = "pdl_gqa_sdpa"  # the attention implementation the compiled step gives its model


def gqa_sdpa(module, query, key, value, attention_mask, dropout: float = 0.0, scaling=None, is_causal=None, **kwargs):
    """transformers' sdpa attention, except on the CPU with a mask over grouped KV heads, in a
    compiled graph or for a step that feeds several tokens: there SDPA takes the groups itself
    (``enable_gqa``) instead of a repeated copy of the cache (see the module docstring). A one-token
    eager step keeps transformers' path (its queries packed over the KV heads: no copy either)."""
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    if ((torch.compiler.is_compiling() or query.shape[2] > 1) and attention_mask is not None and query.device.type == "cpu"
            and getattr(module, "num_key_value_groups", 1) > 1 and not dropout
            and kwargs.get("position_bias") is None and kwargs.get("softcap") is None):
        out = torch.nn.functional.scaled_dot_product_attention(query, key, value, attn_mask=attention_mask,
                                                               scale=scaling, enable_gqa=True)
        return out.transpose(1, 2).contiguous(), None
    return sdpa_attention_forward(module, query, key, value, attention_mask, dropout=dropout, scaling=scaling,
                                  is_causal=is_causal, **kwargs)


def use_gqa_sdpa(model) -> None:
    """Run ``model`` with ``gqa_sdpa`` where it runs transformers' sdpa (decoding.model does so for
    every model it loads on the CPU; the compiled step for its own)."""
    from transformers import AttentionInterface
    from transformers.masking_utils import AttentionMaskInterface, sdpa_mask

    if getattr(model.config, "_attn_implementation", None) != "sdpa":
        return
    AttentionInterface.register(GQA_SDPA, gqa_sdpa)
    AttentionMaskInterface.register(GQA_SDPA, sdpa_mask)  # the masks transformers makes for sdpa
    try:
        model.set_attn_implementation(GQA_SDPA)
    except (ValueError, AttributeError, ImportError):
        pass  # a transformers that refuses it: the compiled step repeats the KV heads, as before


class CompiledStep:
    """The compiled forward of one model, with its static caches (see the module docstring)."""

    def __init__(self, model, progress: Callable[[str], None] | None = None):
        from .paths import cache_dir

        # inductor's code cache in the lab's cache folder (unless the user set one): a second start loads it
        os.environ.setdefault("TORCHINDUCTOR_CACHE_DIR", str(cache_dir() / "inductor"))
        self.model, self.progress = model, progress
        self.cache_kw = "past_key_values"  # forward's name for the cache (the run says, acquire)
        self.caches: dict[int, Any] = {}
        self.locks: dict[int, threading.Lock] = {}
        self.compiled: set[tuple[int, int]] = set()  # (fed size, cache size) graphs built in this process
        self.trusted: set[tuple[int, int]] = set()  # graphs that ran under full guards since the last repack
        self.can_trust = not hasattr(model, "disable_adapter")  # PEFT adapters switch without a shape change
        self.compile_seconds = 0.0  # spent building graphs (each first call, its one execution included)
        self.broken = ""  # why compiling failed (then every step runs eagerly over the static cache)
        # one graph per (fed size, cache size): dynamo's default limit (8 graphs per function) would
        # silently run the rest eagerly
        limit = len(FED_SIZES) * len(CACHE_SIZES) + 8
        torch._dynamo.config.recompile_limit = max(torch._dynamo.config.recompile_limit, limit)
        use_gqa_sdpa(model)
        self.cuda = next(model.parameters()).device.type == "cuda"
        self.fn = torch.compile(self._forward, dynamic=False, mode="reduce-overhead" if self.cuda else None)

    def _forward(self, cache, ids, positions, mask):
        return self.model(input_ids=ids, position_ids=positions, attention_mask=mask, use_cache=True,
                          **{self.cache_kw: cache}).logits

    def acquire(self, need: int, cache_kw: str = "past_key_values"):
        """A reset static cache for a run that needs ``need`` positions, or None (run eagerly);
        ``cache_kw``: the model forward's name for its cache (decoding.model.cache_kw)."""
        from transformers import StaticCache

        self.cache_kw = cache_kw
        size = cache_size(need)
        if size is None:
            return None
        lock = self.locks.setdefault(size, threading.Lock())
        if not lock.acquire(blocking=False):
            return None
        from .kernels import refresh_packs

        if refresh_packs(self.model):
            self.trusted.clear()  # new panels: full guards again before any shortcut
        cache = self.caches.get(size)
        if cache is None:
            cache = self.caches[size] = StaticCache(config=self.model.config, max_cache_len=size)
            if self.cuda:  # allocated here, not inside a captured graph's memory pool
                init_cache(cache, self.model)
        held = int(cache.get_seq_length())
        if held:  # the last run's entries: the next writes go over them
            cache.crop(-held)
        return cache

    def prepare(self, need: int, sizes: tuple[int, ...] = FED_SIZES[:5], cache_kw: str = "past_key_values") -> float:
        """Build (or load from disk) the graphs of these fed sizes for runs needing ``need``
        positions, before anything is timed or shown; the seconds it took."""
        t = time.perf_counter()
        cache = self.acquire(need, cache_kw)
        if cache is None:
            return 0.0
        try:
            with torch.inference_mode():
                for size in sizes:
                    self.forward(cache, [0] * size, None, None, 0)
                    cache.crop(-int(cache.get_seq_length()))
        finally:
            self.release(cache)
        return time.perf_counter() - t

    def fits(self, cache, q: int, past: int) -> bool:
        """Whether a step feeding ``q`` rows at ``past`` fits the static cache (padding included)."""
        return past + (fed_size(q) or q) <= cache.layers[0].max_cache_len

    def to_dynamic(self, cache, past: int):
        """The first ``past`` positions of ``cache`` as a DynamicCache (the run goes on eagerly: a
        step that does not fit), and the static cache released."""
        from transformers import DynamicCache

        dyn = DynamicCache(config=self.model.config)
        for i, layer in enumerate(cache.layers):
            dyn.update(layer.keys[:, :, :past].clone(), layer.values[:, :, :past].clone(), i)
        self.release(cache)
        return dyn

    def release(self, cache) -> None:
        """The run is over: its cache serves the next one."""
        for size, c in self.caches.items():
            if c is cache and self.locks[size].locked():
                self.locks[size].release()

    def forward(self, cache, tokens: list[int], offsets: torch.Tensor | None, mask: torch.Tensor | None,
                past: int) -> torch.Tensor:
        """Logits [len(tokens), vocab] of one step over ``cache`` (``past`` positions valid):
        compiled when its rows fit a fed size, else eagerly over the same cache."""
        q, length = len(tokens), cache.layers[0].max_cache_len
        size = fed_size(q) or q
        if past + size > length:
            raise RuntimeError(f"a step feeding {q} tokens at position {past} passes the compiled step's "
                               f"{length}-token cache; run it with the eager step")
        device = self.model.device
        dtype = next(self.model.parameters()).dtype
        ids = torch.zeros((1, size), dtype=torch.long)
        ids[0, :q] = torch.tensor(tokens)
        pos = torch.arange(size) + past
        if offsets is not None:
            pos[:q] = offsets.cpu() + past
        pos[q:] = pos[:q].max()  # padding rows: a position the model knows (they see only themselves)
        args = (cache, ids.to(device), pos.unsqueeze(0).to(device), step_mask(mask, q, past, size, length, dtype).to(device))
        if size not in FED_SIZES or self.broken:
            return self._forward(*args)[0, :q]
        key = (size, length)
        if key not in self.compiled and self.progress is not None:
            self.progress(f"compiling the decode step for {size} fed tokens over a {length}-token cache "
                          "(once per start; inductor keeps its code on disk)")
        if self.cuda:  # a new replay step: the last replay's outputs were copied out
            torch.compiler.cudagraph_mark_step_begin()
        if key in self.trusted and torch.is_inference_mode_enabled():
            try:
                with torch.compiler.set_stance("default", skip_guard_eval_unsafe=True):
                    return self._out(self.fn(*args), q)
            except Exception:  # noqa: BLE001 (full guards below decide, and fall back to eager if it fails again)
                self.trusted.discard(key)
        t = time.perf_counter()
        held = int(cache.get_seq_length())
        try:
            logits = self.fn(*args)
        except Exception as e:  # noqa: BLE001 (a compiler failure of any kind: the eager step takes over)
            self.broken = f"{type(e).__name__}: {str(e).strip().splitlines()[0] if str(e).strip() else ''}"[:300]
            if self.progress is not None:
                self.progress(f"the compiled step failed ({self.broken}); decoding goes on with the eager step")
            if int(cache.get_seq_length()) != held:  # a failure after the cache was written: undo it
                cache.crop(held - int(cache.get_seq_length()))
            return self._forward(*args)[0, :q]
        if key not in self.compiled:  # that call compiled (or loaded) the graph: time the step on its own
            self.compiled.add(key)
            cache.crop(held - int(cache.get_seq_length()))  # the same rows again write the same KV
            self.compile_seconds += time.perf_counter() - t
            if self.cuda:
                torch.compiler.cudagraph_mark_step_begin()
            logits = self.fn(*args)
        if self.can_trust and torch.is_inference_mode_enabled():
            self.trusted.add(key)
        return self._out(logits, q)

    def _out(self, logits: torch.Tensor, q: int) -> torch.Tensor:
        """The real rows' logits; on CUDA a copy (a captured graph's output is overwritten by its next replay)."""
        return logits[0, :q].clone() if self.cuda else logits[0, :q]


def init_cache(cache, model) -> None:
    """Allocate a static cache's layers now (transformers allocates them on the first update, which
    inside a captured CUDA graph would place them in the graph's memory pool)."""
    cfg = model.config
    heads = getattr(cfg, "num_key_value_heads", None) or cfg.num_attention_heads
    head_dim = getattr(cfg, "head_dim", None) or cfg.hidden_size // cfg.num_attention_heads
    p = next(model.parameters())
    cache.early_initialization(1, heads, head_dim, p.dtype, p.device)


def compile_possible() -> str | None:
    """Why a compiled step cannot run on this machine (None: it can): inductor's CPU code needs a
    C++ compiler."""
    import shutil

    cxx = os.environ.get("CXX") or "g++"
    if shutil.which(cxx) is None and shutil.which("c++") is None:
        return f"no C++ compiler ({cxx}) on PATH: torch.compile's CPU code needs one"
    return None
