"""Make the example traces every app page opens on (assets/example_<method>.json).

Every method of the registry decodes the same prompt with the bundled model (greedy, chat mode,
the registry's default settings), so the Compare page can set them side by side; one more lookahead
run uses the cost-aware budget (example_lookahead_auto.json). Run from the repo root:

    python scripts/make_example_traces.py [--max-new-tokens 80] [--out assets]
    python scripts/make_example_traces.py --check   # regenerate beside the shipped ones and compare
    python scripts/make_example_traces.py --only suffix   # one example (a new method's)

Greedy decoding is deterministic, so the token ids are reproducible; the times are this machine's.
``--check`` writes nothing to assets/: it decodes every example again and says, per file, whether
the output, each step's tokens and origins and (fixed budgets) each step's record equal the shipped
file's, loaded through the schema's upgrade of older versions (a budget=auto run's choices follow
this machine's step times, so only its output is compared). Exit status 1 if any differs.
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from dataclasses import asdict

from decoding.kernels import KERNELS
from decoding.model import load_model
from decoding.loop import Run
from decoding.methods import REGISTRY
from decoding.trace import Trace

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
    ap.add_argument("--kernel", default="skinny", choices=list(KERNELS),
                    help="the linear layers' product (skinny, as every shipped example; auto measures, and on a busy "
                         "machine may pick stock)")
    ap.add_argument("--only", default="", help="comma list of examples to make (default: all)")
    ap.add_argument("--check", action="store_true", help="regenerate into a temporary folder and compare with --out's files")
    a = ap.parse_args()
    shipped = a.out
    if a.check:
        a.out = tempfile.mkdtemp(prefix="examples-")
    lm = load_model(None, device="cpu", progress=print, kernel=a.kernel)
    chat = not a.no_chat
    ids = lm.encode(a.prompt, chat=chat)
    os.makedirs(a.out, exist_ok=True)
    only = [x for x in a.only.split(",") if x]
    unknown = set(only) - set(EXAMPLES)
    if unknown:
        ap.error(f"no example {', '.join(sorted(unknown))} (there are {', '.join(EXAMPLES)})")
    for name, (method, params) in EXAMPLES.items():
        if only and name not in only:
            continue
        t0 = time.perf_counter()
        trace = Run(lm, ids, method, params, a.max_new_tokens, prompt_text=a.prompt, chat=chat).decode()
        path = os.path.join(a.out, f"example_{name}.json")
        trace.save(path)
        s = trace.summary()
        print(f"{name:15s} {s['new_tokens']} tokens, {s['steps']} steps, {s['tokens_per_step']:.2f} tokens/step, "
              f"{time.perf_counter() - t0:.1f} s -> {path} ({os.path.getsize(path) // 1024} KiB)")
    if a.check:
        raise SystemExit(check(shipped, a.out))


def differences(old: Trace, new: Trace) -> list[str]:
    """What differs between a shipped example and its regeneration (empty: the same decode)."""
    out = []
    if old.output_ids != new.output_ids:
        out.append("output")
    if new.params.get("budget") == "auto":
        return out
    if len(old.steps) != len(new.steps):
        return out + [f"{len(old.steps)} steps, now {len(new.steps)}"]
    for a, b in zip(old.steps, new.steps):
        if (a.tokens, a.origins) != (b.tokens, b.origins):
            out.append(f"step {a.index}'s tokens or origins")
        ra, rb = asdict(a.record) if a.record else {}, asdict(b.record) if b.record else {}
        if any(ra.get(k) != v for k, v in rb.items() if v is not None or k in ra):  # fields added since load as None
            out.append(f"step {a.index}'s record")
    return out[:5]


def check(shipped: str, fresh: str) -> int:
    bad = 0
    for name in [n for n in EXAMPLES if os.path.exists(os.path.join(fresh, f"example_{n}.json"))]:
        old_p, new_p = os.path.join(shipped, f"example_{name}.json"), os.path.join(fresh, f"example_{name}.json")
        if not os.path.exists(old_p):
            print(f"{name:15s} not shipped yet (new)")
            continue
        diff = differences(Trace.load(old_p), Trace.load(new_p))
        bad += bool(diff)
        print(f"{name:15s} {'identical decode' if not diff else 'DIFFERS: ' + '; '.join(diff)}")
    return 1 if bad else 0


if __name__ == "__main__":
    main()
