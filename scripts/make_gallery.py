"""Make the what-if gallery (assets/gallery/): pre-recorded runs a lecture loads at once instead of
decoding live, the same prompts under the settings a class asks about.

Two prompts (the app's "Code: primes" and "Math: word problem", chat mode, greedy, the bundled
model, the skinny kernel as every shipped trace) x lookahead at the lab's default (W=5, N=4, G=5),
a small window (W=2, N=3, G=2), the paper's settings (W=15, N=5, G=15, window-only pool), with the
cost-aware budget, and Jacobi with n = 8, 16 and 32; and suffix drafting on the edit workload's
first prompt (a file rewritten with a small change: text that repeats; 192 new tokens, to reach the
file's text). The CLLM vs base pair on one prompt is the CLLM page's (assets/cllm), copied in
(run the script again after `python -m cllm pair` makes a new one). Written: one trace per run and
index.json (label, method, settings, prompt, tokens per step), which the sidebar's gallery lists.
Run from the repo root:

    python scripts/make_gallery.py [--max-new-tokens 64] [--out assets/gallery] [--only NAME,...]

Greedy decoding is deterministic: the tokens and steps are reproducible; the times are this
machine's at the moment (the index says when and the load).
"""

from __future__ import annotations

import argparse
import json
import os
import time

from decoding.loop import Run
from decoding.methods import REGISTRY
from decoding.model import load_model
from decoding.trace import Trace

PROMPTS = {  # slug -> (label, prompt): the app's example prompts of these labels
    "primes": ("Code: primes", "Write a Python function is_prime(n) that checks whether n is a prime number, "
                               "then use it to print all the primes below 50."),
    "train": ("Math: word problem", "A train leaves at 3:15 pm and travels 180 km at 60 km/h. Then it waits 20 "
                                    "minutes and travels another 90 km at 45 km/h. When does it arrive? Explain step "
                                    "by step."),
}
LA = REGISTRY["lookahead"].defaults
SETTINGS = {  # slug -> (label, method, params)
    "lookahead": ("Lookahead, the lab's default (W=5, N=4, G=5)", "lookahead", dict(LA)),
    "lookahead_small": ("Lookahead, a small window (W=2, N=3, G=2)", "lookahead", LA | {"W": 2, "N": 3, "G": 2}),
    "lookahead_paper": ("Lookahead, the paper's settings (W=15, N=5, G=15, window-only pool)", "lookahead",
                        LA | {"W": 15, "N": 5, "G": 15, "seed_pool_prompt": False, "harvest_output": False}),
    "lookahead_auto": ("Lookahead with the cost-aware budget (budget=auto)", "lookahead", LA | {"budget": "auto"}),
    "jacobi_8": ("Jacobi, n = 8", "jacobi", REGISTRY["jacobi"].defaults | {"n": 8}),
    "jacobi_16": ("Jacobi, n = 16", "jacobi", REGISTRY["jacobi"].defaults | {"n": 16}),
    "jacobi_32": ("Jacobi, n = 32", "jacobi", REGISTRY["jacobi"].defaults | {"n": 32}),
}


EDIT_TOKENS = 192  # the edit's run: long enough to reach the file's text, where the copying starts
EDITS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "benchmarks", "edits", "question.jsonl")


def edit_prompt() -> str:
    """The edit workload's first prompt (benchmarks/edits): a file to rewrite with a small change."""
    with open(EDITS, encoding="utf-8") as f:
        return json.loads(f.readline())["turns"][0]


ASSETS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "assets")
PAIR = (("cllm_pair_base", "base_jacobi.json", "Jacobi n = 16, the base model"),
        ("cllm_pair_cllm", "cllm_jacobi.json", "Jacobi n = 16, the shipped CLLM (assets/cllm/adapter)"))


def runs() -> list[tuple[str, str, str, str, str, dict]]:
    """(name, prompt label, prompt, setting label, method, params) of every gallery run: every
    setting on both prompts, and suffix drafting on an edit of a file, where text repeats (the
    Lecture's suffix walk)."""
    out = [(f"{p}_{s}", pl, prompt, sl, m, params)
           for p, (pl, prompt) in PROMPTS.items() for s, (sl, m, params) in SETTINGS.items()]
    return out + [("edit_suffix", "Edit: rate_limiter.py (benchmarks/edits)", edit_prompt(),
                   "Suffix drafting, the lab's default", "suffix", dict(REGISTRY["suffix"].defaults))]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--max-new-tokens", type=int, default=64)
    ap.add_argument("--out", default=os.path.join("assets", "gallery"))
    ap.add_argument("--only", default="", help="comma list of runs to (re)make (default: all); the index keeps the others")
    a = ap.parse_args()
    todo = runs()
    only = [x for x in a.only.split(",") if x]
    unknown = set(only) - {r[0] for r in todo}
    if unknown:
        ap.error(f"no run {', '.join(sorted(unknown))} (there are {', '.join(r[0] for r in todo)})")
    lm = load_model(None, device="cpu", progress=print, kernel="skinny")
    os.makedirs(a.out, exist_ok=True)
    index_path = os.path.join(a.out, "index.json")
    try:
        with open(index_path, encoding="utf-8") as f:
            index = {e["file"]: e for e in json.load(f)["runs"]}
    except (OSError, ValueError, KeyError):
        index = {}
    for name, plabel, prompt, slabel, method, params in todo:
        if only and name not in only:
            continue
        t0 = time.perf_counter()
        ids = lm.encode(prompt, chat=True)
        tokens = EDIT_TOKENS if name.startswith("edit_") else a.max_new_tokens
        trace = Run(lm, ids, method, params, tokens, prompt_text=prompt, chat=True).decode()
        path = os.path.join(a.out, f"{name}.json")
        trace.save(path)
        index[f"{name}.json"] = {"file": f"{name}.json", "prompt": plabel, "setting": slabel, "method": method,
                                 "params": trace.params, "tokens": len(trace.output_ids), "steps": trace.n_steps,
                                 "tokens_per_step": round(trace.tokens_per_step, 3)}
        print(f"{name:28s} {len(trace.output_ids)} tokens, {trace.n_steps} steps, {trace.tokens_per_step:.2f} tokens/step, "
              f"{time.perf_counter() - t0:.1f} s -> {path} ({os.path.getsize(path) // 1024} KiB)")
    for name, src, setting in PAIR:  # the CLLM page's pair: copied, the same prompt on both models
        trace = Trace.load(os.path.join(ASSETS, "cllm", src))
        trace.save(os.path.join(a.out, f"{name}.json"))
        index[f"{name}.json"] = {"file": f"{name}.json", "prompt": "GSM8K-style problem (the CLLM page's)",
                                 "setting": setting, "method": trace.method, "params": trace.params,
                                 "tokens": len(trace.output_ids), "steps": trace.n_steps,
                                 "tokens_per_step": round(trace.tokens_per_step, 3)}
    order = [f"{r[0]}.json" for r in todo] + [f"{name}.json" for name, _, _ in PAIR]
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else None
    with open(index_path, "w", encoding="utf-8") as f:
        json.dump({"made": time.strftime("%Y-%m-%d %H:%M"), "load_avg": load, "max_new_tokens": a.max_new_tokens,
                   "edit_max_new_tokens": EDIT_TOKENS,
                   "command": "python scripts/make_gallery.py" + (f" --only {a.only}" if a.only else ""),
                   "runs": [index[k] for k in order if k in index]}, f, indent=1)
    print(f"-> {index_path}")


if __name__ == "__main__":
    main()
