"""Batched greedy Jacobi for trajectory collection: several prompts' blocks in one forward.

On a CPU a forward over 64 tokens costs about 6.8 AR steps where four 16-token forwards cost
4 x 2.7 (DESIGN.md), so collecting CLLM trajectories for ``lanes`` prompts side by side is cheaper
per item than one prompt at a time. Each lane follows exactly the single-prompt loop of
``decoding.decode(lm, ids, "jacobi", {"n", "seed"})`` (DESIGN.md, "Jacobi"):

1. prefill the prompt (its own forward), the first token = argmax at its last position;
2. a block = [current token] + n-1 guesses drawn from the prompt (``random.Random(seed)``);
3. every iteration feeds the unconverged part of the block; the new guesses are the argmax at the
   previous positions; the longest prefix of guesses equal to the argmax chain is committed, plus
   the model's own token after it (cut at EOS and max_new_tokens);
4. the block closes when all its positions are committed; its tokens are the fixed point.

All lanes share one KV cache of batch ``lanes``: rows are padded, and each row's valid cache
slots are tracked by a boolean mask instead of cropping (crop is per batch). A lane's new tokens
go at the end of the cache; fed slots that no row keeps are cropped at once, and the slots of
guesses that one row did not keep (while another did) stay masked until they add up to
``COMPACT_AT`` in the longest row, when every row's valid slots are moved to the front. Positions are each lane's own
(its number of valid slots), so RoPE sees the same positions as the single-prompt loop.
A finished lane is refilled with the next prompt (prefilled alone, then written into its row).

The items are those ``cllm.data.items_from_trace`` makes of the single-prompt trace: the same ids,
states and fixed points (fp32: up to float ties between a batched and an unbatched product).
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import Any, Iterable, Iterator

COMPACT_AT = 48  # squeeze the cache when its longest row wastes this many slots


@dataclass
class Lane:
    """One prompt's greedy Jacobi run (the single-prompt loop's state)."""

    row: dict
    prompt_ids: list[int]
    n: int
    max_new_tokens: int
    eos: set[int]
    seed: int
    rng: random.Random = field(init=False)
    output: list[int] = field(default_factory=list)
    done: bool = False
    steps: int = 0
    block: list[int] = field(default_factory=list)
    c: int = 0  # block positions < c are committed; c is the current token
    offset: int = 0
    index: int = -1
    states: list[list[int]] = field(default_factory=list)  # this block's states (each iteration's input)
    blocks: list[dict] = field(default_factory=list)  # closed blocks: offset, states, fixed point

    def __post_init__(self):
        self.rng = random.Random(self.seed)

    @property
    def past(self) -> int:
        """Tokens whose KV is cached: the prompt and every output token but the current one."""
        return len(self.prompt_ids) + len(self.output) - 1

    def commit(self, tokens: list[int]) -> None:
        room = self.max_new_tokens - len(self.output)
        for t in tokens[:room]:
            self.output.append(t)
            if t in self.eos:
                self.done = True
                return
        if len(self.output) >= self.max_new_tokens:
            self.done = True

    def new_block(self) -> None:
        self.index += 1
        self.offset = len(self.output) - 1
        guesses = min(self.n - 1, self.max_new_tokens - len(self.output))
        self.block = [self.output[-1]] + [self.rng.choice(self.prompt_ids) for _ in range(guesses)]
        self.c, self.states = 0, []

    def fed(self) -> list[int]:
        """What this iteration feeds: the current token and the unconverged guesses."""
        return self.block[self.c:]

    def update(self, argmax: list[int]) -> int:
        """One Jacobi iteration given the argmax at each fed row; returns how many fed rows stay cached."""
        guesses = self.block[self.c + 1:]
        k = 0
        while k < len(guesses) and guesses[k] == argmax[k]:
            k += 1
        self.commit(guesses[:k] + [argmax[k]])
        before = self.block
        self.states.append(list(before))
        self.block = before[:self.c + 1] + argmax[:len(guesses)]  # the Jacobi update
        self.c += k + 1
        self.steps += 1
        if self.c >= len(self.block) or self.done:
            fp = self.output[self.offset:self.offset + len(self.block)]
            self.blocks.append({"block": self.index, "offset": self.offset, "fixed_point": fp,
                                "states": [s[:len(fp)] for s in self.states] + [self.block[:len(fp)]]})
            if not self.done:
                self.new_block()
        return k + 1

    def items(self, category: str, chat: bool, model: str) -> list[dict[str, Any]]:
        """The lane's items, as ``cllm.data.items_from_trace`` writes them."""
        keep = []
        for b in self.blocks:
            fp = b["fixed_point"]
            if len(fp) < 2:
                continue
            states = b["states"]
            if states[-1] != fp:
                states = states + [fp]
            keep.append({**b, "states": states})
        pid = str(self.row["id"])
        return [{"id": f"{pid}:{b['block']}", "prompt_id": pid, "category": category, "block": b["block"],
                 "n_blocks": len(keep), "offset": b["offset"], "prompt_len": len(self.prompt_ids), "n": self.n,
                 "seed": self.seed, "chat": chat, "model": model,
                 "prompt_ids": self.prompt_ids + self.output[:b["offset"]], "states": b["states"],
                 "fixed_point": b["fixed_point"], "answer_ids": list(self.output)} for b in keep]


class BatchedJacobi:
    """Greedy Jacobi over a stream of prompts, ``lanes`` at a time in one forward per iteration."""

    def __init__(self, lm, n: int = 16, max_new_tokens: int = 256, seed: int = 0, lanes: int = 4):
        import torch

        self.lm, self.n, self.max_new_tokens, self.seed, self.lanes = lm, n, max_new_tokens, seed, lanes
        self.eos = set(lm.eos_token_ids)
        self.device = lm.model.device
        self.dtype = next(lm.model.parameters()).dtype
        self.torch = torch
        from decoding.model import cache_kw

        self.kw = cache_kw(type(lm.model))
        self.cache = None
        self.valid = None  # [lanes, L] bool: which cache slots belong to each row
        self.rows: list[Lane | None] = [None] * lanes

    # --- the cache --------------------------------------------------------------------------
    def _layers(self):
        return self.cache.layers

    def _length(self) -> int:
        return 0 if self.valid is None else self.valid.shape[1]

    def _resize(self, length: int) -> None:
        """Pad (masked, at the end) or cut the cache to ``length`` slots."""
        torch = self.torch
        L = self._length()
        if length == L:
            return
        for layer in self._layers():
            for name in ("keys", "values"):
                t = getattr(layer, name)
                if length > L:
                    pad = t.new_zeros(t.shape[0], t.shape[1], length - L, t.shape[3])
                    t = torch.cat([t, pad], dim=2)
                else:
                    t = t[:, :, :length]
                setattr(layer, name, t.contiguous())
        if length > L:
            self.valid = torch.cat([self.valid, self.valid.new_zeros(self.lanes, length - L)], dim=1)
        else:
            self.valid = self.valid[:, :length]

    def _compact(self) -> None:
        """Move each row's valid slots to the front (in order) and drop the unused tail."""
        torch = self.torch
        counts = self.valid.sum(1)
        width = int(counts.max())
        # for each row: the indices of its valid slots, then (padding) any slot, masked
        order = torch.argsort((~self.valid).to(torch.int8), dim=1, stable=True)[:, :width]
        idx = order.to(self.device)
        for layer in self._layers():
            for name in ("keys", "values"):
                t = getattr(layer, name)
                g = idx[:, None, :, None].expand(t.shape[0], t.shape[1], width, t.shape[3])
                setattr(layer, name, torch.gather(t, 2, g).contiguous())
        self.valid = torch.arange(width)[None, :] < counts[:, None]

    def _admit(self, r: int, lane: Lane) -> None:
        """Prefill ``lane``'s prompt alone and write its KV into cache row ``r``."""
        from transformers import DynamicCache

        torch = self.torch
        model = self.lm.model
        own = DynamicCache(config=model.config)
        ids = torch.tensor([lane.prompt_ids], device=self.device)
        logits = model(input_ids=ids, use_cache=True, logits_to_keep=1, **{self.kw: own}).logits
        lane.commit([int(logits[0, -1].argmax())])
        self.rows[r] = lane
        if lane.done:
            return
        lane.new_block()
        p = len(lane.prompt_ids)
        if self.cache is None:  # the first lane sets the shapes: a cache of ``lanes`` rows
            self.cache = own
            for layer in self._layers():
                for name in ("keys", "values"):
                    t = getattr(layer, name)
                    setattr(layer, name, t.expand(self.lanes, -1, -1, -1).contiguous())
            self.valid = torch.zeros(self.lanes, p, dtype=torch.bool)
            self.valid[r] = True
            return
        if p > self._length():
            self._resize(p)
        for mine, layer in zip(own.layers, self._layers()):
            layer.keys[r, :, :p] = mine.keys[0]
            layer.values[r, :, :p] = mine.values[0]
        self.valid[r] = False
        self.valid[r, :p] = True

    # --- one iteration for every running lane -------------------------------------------------
    def _step(self) -> None:
        torch = self.torch
        live = [r for r, ln in enumerate(self.rows) if ln is not None and not ln.done]
        feds = {r: self.rows[r].fed() for r in live}
        F = max(len(f) for f in feds.values())
        L = self._length()
        B = self.lanes
        ids = torch.zeros(B, F, dtype=torch.long)
        pos = torch.zeros(B, F, dtype=torch.long)
        allow = torch.zeros(B, F, L + F, dtype=torch.bool)
        allow[:, :, L:] = torch.eye(F, dtype=torch.bool)  # padding rows see themselves (no NaN)
        causal = torch.tril(torch.ones(F, F, dtype=torch.bool))
        for r in live:
            f = feds[r]
            ids[r, :len(f)] = torch.tensor(f)
            pos[r] = self.rows[r].past + torch.arange(F)
            allow[r, :len(f), :L] = self.valid[r]
            allow[r, :len(f), L:L + len(f)] = causal[:len(f), :len(f)]
        mask = torch.zeros(B, 1, F, L + F, dtype=self.dtype)
        mask.masked_fill_(~allow[:, None], torch.finfo(self.dtype).min)
        out = self.lm.model(input_ids=ids.to(self.device), position_ids=pos.to(self.device),
                            attention_mask=mask.to(self.device), use_cache=True, **{self.kw: self.cache}).logits
        argmax = out.argmax(-1).tolist()
        keep = torch.zeros(B, F, dtype=torch.bool)
        for r in live:
            kept = self.rows[r].update(argmax[r][:len(feds[r])])
            keep[r, :kept] = True
        # the fed slots past the longest kept run are no row's: crop them; squeeze out the others
        # (the unkept guesses of the rows that kept fewer) once they add up to COMPACT_AT slots
        used = int(keep.sum(1).max())
        self.valid = torch.cat([self.valid, keep[:, :used]], dim=1)
        if used < F:
            self.cache.crop(-(F - used))
        if self._length() - int(self.valid.sum(1).max()) >= COMPACT_AT:
            self._compact()

    def run(self, lanes_in: Iterable[Lane]) -> Iterator[Lane]:
        """Decode every lane; yields each one when it is finished (not in input order)."""
        todo = iter(lanes_in)
        with self.torch.inference_mode():
            while True:
                for r in range(self.lanes):
                    while self.rows[r] is None or self.rows[r].done:
                        if self.rows[r] is not None:
                            yield self.rows[r]
                            self.rows[r] = None
                            if self.valid is not None:
                                self.valid[r] = False
                        nxt = next(todo, None)
                        if nxt is None:
                            break
                        self._admit(r, nxt)
                if all(ln is None for ln in self.rows):
                    return
                if any(ln is not None and not ln.done for ln in self.rows):
                    self._step()
        self.cache = None
