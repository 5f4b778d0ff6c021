"""The heart of the suite: every method's greedy output equals transformers' greedy generate,
token for token, on tiny random Llama- and Qwen2-class models (several seeds)."""

from __future__ import annotations

import random

import pytest

from decoding.loop import decode
from tiny import generate_greedy, tiny_lm

SETTINGS = [
    ("ar", {}),
    ("jacobi", {"n": 2}),
    ("jacobi", {"n": 4}),
    ("jacobi", {"n": 16}),
    ("jacobi", {"n": 16, "budget": "auto"}),  # cost-aware: this machine's costs
    ("lookahead", {"W": 3, "N": 3, "G": 3}),
    ("lookahead", {"W": 5, "N": 4, "G": 5}),
    ("lookahead", {"W": 7, "N": 5, "G": 7}),
    ("lookahead", {"W": 15, "N": 5, "G": 15}),
    ("lookahead", {"W": 5, "N": 4, "G": 5, "seed_pool_prompt": False, "harvest_output": False}),
    ("lookahead", {"W": 3, "N": 2, "G": 2}),
    ("lookahead", {"W": 4, "N": 3, "G": 0}),
    ("pld", {}),
    ("pld", {"k": 3, "max_ngram": 1}),
    ("lookahead", {"W": 5, "N": 4, "G": 5, "budget": "auto"}),  # cost-aware: this machine's costs
    ("pld", {"budget": "auto"}),
    ("tr", {}),  # Token Recycling: the paper-sized static tree (78 nodes)
    ("tr", {"successors": 2, "depth": 3, "branch": 2, "width": 3, "seed_prompt": False}),
    ("tr", {"successors": 1, "depth": 16, "branch": 1, "width": 1}),  # one chain: a causal sequence, no tree mask
    ("tr", {"budget": "auto"}),
    ("suffix", {}),  # suffix drafting: frequency-scored trees from the longest match, Token Recycling's fallback
    ("suffix", {"fallback": False, "alpha": 4, "max_spec": 64, "min_prob": 0, "min_match": 1}),  # wide trees
    ("suffix", {"fallback": False, "max_match": 1, "max_spec": 1}),  # one token from a one-token match
    ("suffix", {"cross_run": True}),  # earlier runs' outputs matched too
    ("suffix", {"budget": "auto"}),
]
MODELS = [("llama", 0), ("llama", 1), ("qwen2", 0), ("qwen2", 1)]


@pytest.fixture(scope="module")
def models():
    return {key: tiny_lm(*key) for key in MODELS}


def _prompt(seed: int, length: int, vocab: int = 96) -> list[int]:
    rng = random.Random(seed)
    # a repetitive prompt gives prompt lookup and the pool something to verify
    base = [rng.randrange(vocab) for _ in range(max(1, length // 3))]
    return (base * 4)[:length] if length > 3 else base[:length]


@pytest.mark.parametrize("key", MODELS, ids=lambda k: f"{k[0]}{k[1]}")
@pytest.mark.parametrize("method,params", SETTINGS, ids=lambda x: str(x) if isinstance(x, str) else "-".join(f"{k}{v}" for k, v in x.items()))
def test_matches_generate(models, key, method, params):
    lm = models[key]
    for plen, K in ((1, 21), (9, 30), (45, 37)):  # one-token prompt; K not a multiple of n; prompt longer than W
        prompt = _prompt(plen * 7 + key[1], plen)
        ref = generate_greedy(lm, prompt, K)
        out = decode(lm, prompt, method, params, K)
        assert out.output_ids == ref, (plen, K)
        assert len(out.output_ids) == K
        assert out.stop_reason == "max_new_tokens"


@pytest.mark.parametrize("method,params", [s for s in SETTINGS if s[0] != "ar"], ids=lambda x: str(x) if isinstance(x, str) else "-".join(f"{k}{v}" for k, v in x.items()))
def test_eos_mid_step(method, params):
    """EOS inside a Jacobi block or an accepted n-gram: output stops right after it, like generate."""
    plain = tiny_lm("llama", 3)
    prompt = _prompt(11, 12)
    free = generate_greedy(plain, prompt, 40)
    # make a token that first appears late in the greedy output the EOS token
    eos = next(t for i, t in enumerate(free) if i >= 9 and t not in free[:i])
    lm = tiny_lm("llama", 3, eos=eos)
    ref = generate_greedy(lm, prompt, 40)
    assert ref[-1] == eos and len(ref) < 40
    out = decode(lm, prompt, method, params, 40)
    assert out.output_ids == ref
    assert out.stop_reason == "eos"


def test_fast_methods_really_skip_steps():
    """A prompt that repeats makes the model repeat: the parallel methods must take fewer steps."""
    lm = tiny_lm("llama", 0)
    prompt = _prompt(5, 60)
    ar = decode(lm, prompt, "ar", {}, 48)
    assert ar.n_steps == 47 and ar.tokens_per_step == 1.0
    for method, params in [("lookahead", {"W": 5, "N": 4, "G": 5}), ("pld", {})]:
        tr = decode(lm, prompt, method, params, 48)
        assert tr.output_ids == ar.output_ids
        assert tr.n_steps < ar.n_steps, method


def test_max_new_tokens_one_is_prefill_only():
    lm = tiny_lm("qwen2", 0)
    for method in ("ar", "jacobi", "lookahead", "pld"):
        tr = decode(lm, [1, 2, 3], method, None, 1)
        assert tr.output_ids == generate_greedy(lm, [1, 2, 3], 1) and tr.n_steps == 0
