"""The sampling distribution and the random draws of one run (temperature > 0).

p = softmax of the logits after transformers' own warpers, in generate's order (temperature,
top-k, top-p); every draw comes from one seeded torch.Generator, so a run is reproducible. How the
draws decide a step's tokens is ``decoding.verify.verify_tree``.
"""

from __future__ import annotations

from typing import Any

import torch


class Sampler:
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
