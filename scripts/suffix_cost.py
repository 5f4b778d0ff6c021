"""Suffix drafting's CPU cost, without a model: microseconds per committed token to update the suffix
trie, and per step to find the matches and build the best one's draft tree (decoding/methods/suffix.py's
``best_draft``; the fallback's matrix walk is not counted).

The text: ``--tokens`` random token ids (vocabulary ``--vocab``) in which ``--copy`` of the
segments repeat an earlier span (so matches exist, as in real prompts and outputs). Compare the
figures with a decoding step's time (docs/benchmarks.md; the bundled model's AR step is ~32 ms on
the lab's CPU): issue 22 targets drafting under 2% of a step. Run it on an idle machine:

    python scripts/suffix_cost.py --tokens 2000
"""

from __future__ import annotations

import argparse
import random
import time

from decoding.methods import resolve_params
from decoding.methods.suffix import SuffixTrie, best_draft


def text(n: int, vocab: int, copy: float, seed: int) -> list[int]:
    """n tokens: segments of 8-32 tokens, each fresh random ids or (with probability ``copy``) a copy of an earlier span."""
    rng = random.Random(seed)
    out: list[int] = []
    while len(out) < n:
        k = rng.randint(8, 32)
        if out and rng.random() < copy:
            i = rng.randrange(len(out))
            out += out[i:i + k]
        else:
            out += [rng.randrange(vocab) for _ in range(k)]
    return out[:n]


def measure(seq: list[int], p: dict) -> dict[str, float]:
    """(us per token to extend the trie, us per draft: the match and the tree) over ``seq``."""
    trie = SuffixTrie(p["max_match"] + p["max_spec"])
    t_ext = t_draft = 0.0
    drafted = 0
    for tok in seq:
        t0 = time.perf_counter()
        trie.extend(tok)
        t1 = time.perf_counter()
        drafted += len(best_draft(trie, trie.active, p, len(seq))[2])
        t_draft += time.perf_counter() - t1
        t_ext += t1 - t0
    n = len(seq)
    return {"update_us": 1e6 * t_ext / n, "draft_us": 1e6 * t_draft / n, "nodes": len(trie.count),
            "draft_tokens": drafted / n}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tokens", type=int, default=2000)
    ap.add_argument("--vocab", type=int, default=49152)
    ap.add_argument("--copy", type=float, default=0.5, help="share of segments copied from earlier text")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--max-spec", type=int, default=None)
    ap.add_argument("--alpha", type=int, default=None)
    a = ap.parse_args()
    given = {k: v for k, v in (("max_spec", a.max_spec), ("alpha", a.alpha)) if v is not None}
    p = resolve_params("suffix", given)
    r = measure(text(a.tokens, a.vocab, a.copy, a.seed), p)
    print(f"suffix trie, depth {p['max_match'] + p['max_spec']}, {a.tokens} tokens ({a.copy:.0%} copied spans): "
          f"{r['nodes']} nodes")
    print(f"update: {r['update_us']:.1f} us per token; match + draft: {r['draft_us']:.1f} us per step "
          f"({r['draft_tokens']:.1f} draft tokens on average)")


if __name__ == "__main__":
    main()
