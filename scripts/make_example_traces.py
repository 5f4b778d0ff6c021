"""Make the example traces every app page opens on (assets/example_<method>.json).

Every method of the registry decodes the same prompt with the bundled model (greedy, chat mode,
the registry's default settings), so the Compare page can set them side by side; one more lookahead
run uses the cost-aware budget (example_lookahead_auto.json). Run from the repo root:

    python scripts/make_example_traces.py [--max-new-tokens 80] [--out assets]

Greedy decoding is deterministic, so the token ids are reproducible; the times are this machine's.
"""

from __future__ import annotations

import argparse
import os
import time

from decoding.model import load_model
from decoding.loop import Run
from decoding.methods import REGISTRY

PROMPT = ("Write a Python function is_prime(n) that checks whether n is a prime number, "
          "then use it to print all the primes below 50.")
# file name -> (method, params): one example per method with its registry defaults, and one
# cost-aware (budget=auto) lookahead run, whose choices depend on this machine's step times
EXAMPLES = {m: (m, dict(REGISTRY[m].defaults)) for m in REGISTRY} | {
    "lookahead_auto": ("lookahead", REGISTRY["lookahead"].defaults | {"budget": "auto"}),
}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--max-new-tokens", type=int, default=80)
    ap.add_argument("--out", default="assets")
    ap.add_argument("--prompt", default=PROMPT)
    ap.add_argument("--no-chat", action="store_true")
    a = ap.parse_args()
    lm = load_model(None, device="cpu", progress=print)
    chat = not a.no_chat
    ids = lm.encode(a.prompt, chat=chat)
    os.makedirs(a.out, exist_ok=True)
    for name, (method, params) in EXAMPLES.items():
        t0 = time.perf_counter()
        trace = Run(lm, ids, method, params, a.max_new_tokens, prompt_text=a.prompt, chat=chat).decode()
        path = os.path.join(a.out, f"example_{name}.json")
        trace.save(path)
        s = trace.summary()
        print(f"{name:15s} {s['new_tokens']} tokens, {s['steps']} steps, {s['tokens_per_step']:.2f} tokens/step, "
              f"{time.perf_counter() - t0:.1f} s -> {path} ({os.path.getsize(path) // 1024} KiB)")


if __name__ == "__main__":
    main()
