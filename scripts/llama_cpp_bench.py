"""Our decoding against llama.cpp on the same weights, prompts and threads (issue 21's targets).

llama.cpp runs through llama-cpp-python: an optional, benchmark-only dependency that this script
says is missing and skips without (``pip install llama-cpp-python`` builds llama.cpp from source;
about 15 minutes on 2 cores). It runs the bundled model's weights dequantized to an F32 GGUF
(decoding/perf/gguf_f32.py: the values transformers loads from the same file) with the same
thread count as torch; both sides get the same prompt token ids (our tokenizer, chat template
applied) and decode greedily.

Per prompt, back to back (the order alternating from prompt to prompt): llama.cpp's AR, llama.cpp's
prompt lookup (llama-cpp-python's ``LlamaPromptLookupDecoding``, ``--draft`` tokens), our AR and
each of ``--methods`` on ``--step`` (eager or compiled; compiling is left out of our timings).
Prints tokens/s per run and the medians per prompt of: our AR over llama.cpp's AR; each method
over its own AR (ours over our AR, llama.cpp's prompt lookup over llama.cpp's AR); our AR step
and llama.cpp's decode per token against the time to read the weights once with torch; and how
many of llama.cpp's outputs equal our AR's token for token (F32 both; sums in another order can
break a near-tie the other way).

    python scripts/llama_cpp_bench.py --prompts ../shared/benchmarks/spec_bench/question.jsonl \\
        --per-category 1 --chat --max-new-tokens 128 --step compiled

Speed is a ratio of runs in this process: quote it with the machine's load average, which it prints.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

from decoding.bench import parse_methods, variant_params
from decoding.io import read_prompts
from decoding.loop import decode
from decoding.model import load_model


def llama_or_none():
    """The llama_cpp module, or None (said) where llama-cpp-python is not installed."""
    try:
        import llama_cpp
    except ImportError as e:
        print(f"llama-cpp-python is not installed ({e}): it is an optional, benchmark-only dependency of this "
              "script (pip install llama-cpp-python builds llama.cpp from source, ~15 min on 2 cores). Skipped.")
        return None
    return llama_cpp


def open_llama(llama_cpp, path, threads: int, n_ctx: int, draft: int = 0):
    """A llama.cpp context on ``path``; with ``draft`` its prompt lookup drafts that many tokens."""
    extra = {}
    if draft:
        from llama_cpp.llama_speculative import LlamaPromptLookupDecoding

        extra["draft_model"] = LlamaPromptLookupDecoding(num_pred_tokens=draft)
        # verifying a draft reads every row's logits; llama-cpp-python 0.3.36 turns logits_all on for a
        # draft model but sizes its logits buffer by the argument (prompts past n_batch then fail)
        extra["logits_all"] = True
    return llama_cpp.Llama(model_path=str(path), n_ctx=n_ctx, n_threads=threads, n_threads_batch=threads,
                           n_batch=512, verbose=False, **extra)


def llama_greedy(llama_cpp, llm, ids: list[int], max_new: int, eos: set[int]) -> tuple[list[int], float, float]:
    """llama.cpp's greedy decode of ``ids``: (tokens, seconds with the prefill, seconds per decoded
    token from llama.cpp's own counters, or NaN where it has none)."""
    llm.reset()  # no prefix of an earlier run is reused: the prompt is evaluated as ours is
    ctx = getattr(getattr(llm, "_ctx", None), "ctx", None)
    if ctx is not None:
        llama_cpp.llama_perf_context_reset(ctx)
    out: list[int] = []
    t = time.perf_counter()
    for tok in llm.generate(list(ids), top_k=1, top_p=1.0, min_p=0.0, temp=0.0, repeat_penalty=1.0, reset=True):
        out.append(int(tok))
        if tok in eos or len(out) >= max_new:
            break
    seconds = time.perf_counter() - t
    per_token = float("nan")
    if ctx is not None:
        perf = llama_cpp.llama_perf_context(ctx)
        per_token = perf.t_eval_ms / 1000 / perf.n_eval if perf.n_eval else per_token
    return out, seconds, per_token


def _median(xs) -> float:
    xs = [x for x in xs if x == x]
    return statistics.median(xs) if xs else float("nan")


def run_prompt(i, ids, llamas, lm, methods, params, a, eos, rows) -> str:
    """One prompt: llama.cpp's AR and prompt lookup, our methods; appends to ``rows``; a line."""
    llama_cpp, ar_llm, pld_llm = llamas
    ours: dict[str, object] = {}
    theirs: dict[str, tuple] = {}

    def run_theirs():
        theirs["ar"] = llama_greedy(llama_cpp, ar_llm, ids, a.max_new_tokens, eos)
        theirs["pld"] = llama_greedy(llama_cpp, pld_llm, ids, a.max_new_tokens, eos)

    def run_ours():
        for m in methods:
            ours[m] = decode(lm, ids, m.split(":")[0], params[m], a.max_new_tokens, record=False)

    for part in ((run_theirs, run_ours) if i % 2 == 0 else (run_ours, run_theirs)):
        part()
    row = {"llama_ar": len(theirs["ar"][0]) / theirs["ar"][1], "llama_pld": len(theirs["pld"][0]) / theirs["pld"][1],
           "llama_token_s": theirs["ar"][2], "same": theirs["ar"][0] == ours["ar"].output_ids,
           "pld_same": theirs["pld"][0] == theirs["ar"][0],
           "ar_step_s": _median([s.seconds for s in ours["ar"].steps])}
    row.update({m: t.tokens_per_s for m, t in ours.items()})
    rows.append(row)
    return (f"llama.cpp AR {row['llama_ar']:.1f} pld {row['llama_pld']:.1f} | ours "
            + " ".join(f"{m} {row[m]:.1f}" for m in methods) + " tokens/s"
            + ("" if row["same"] else " (llama.cpp's tokens differ from our AR's)"))


def summary(rows, methods, read_s) -> None:
    n = len(rows)
    print(f"\n{n} prompts, medians per prompt")
    print(f"our AR / llama.cpp AR (tokens/s): {_median([r['ar'] / r['llama_ar'] for r in rows]):.3f}")
    print(f"llama.cpp prompt lookup / llama.cpp AR: {_median([r['llama_pld'] / r['llama_ar'] for r in rows]):.3f}")
    for m in methods:
        if m != "ar":
            print(f"{m} / our AR: {_median([r[m] / r['ar'] for r in rows]):.3f}")
    step, theirs = _median([r["ar_step_s"] for r in rows]), _median([r["llama_token_s"] for r in rows])
    print(f"our AR step {step * 1e3:.1f} ms, llama.cpp decode {theirs * 1e3:.1f} ms per token "
          f"(ratio {step / theirs:.2f}); reading the weights once with torch {read_s * 1e3:.1f} ms "
          f"(our step {step / read_s:.2f}x, llama.cpp's {theirs / read_s:.2f}x)")
    print(f"llama.cpp AR tokens equal to our AR's: {sum(r['same'] for r in rows)} of {n}; "
          f"its prompt lookup equal to its AR: {sum(r['pld_same'] for r in rows)} of {n}")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--prompts", required=True)
    ap.add_argument("--per-category", type=int, default=1)
    ap.add_argument("--chat", action="store_true")
    ap.add_argument("--max-new-tokens", type=int, default=128)
    ap.add_argument("--methods", default="ar,pld:auto,tr:auto,lookahead:auto,suffix:auto")
    ap.add_argument("--step", default="eager", choices=["eager", "compiled"])
    ap.add_argument("--draft", type=int, default=10, help="llama.cpp prompt lookup's draft length [10]")
    a = ap.parse_args(argv)
    llama_cpp = llama_or_none()
    if llama_cpp is None:
        return 0
    import torch

    from decoding.kernels import weight_read_seconds
    from decoding.perf.gguf_f32 import bundled_f32

    threads = torch.get_num_threads()
    methods = parse_methods(a.methods)
    methods = methods if "ar" in methods else ["ar", *methods]
    lm = load_model(None, progress=print, step=a.step)
    path = bundled_f32(print)
    n_ctx = 4096
    llamas = (llama_cpp, open_llama(llama_cpp, path, threads, n_ctx), open_llama(llama_cpp, path, threads, n_ctx, a.draft))
    params = {m: variant_params(m, {}) for m in methods}
    prompts = [lm.encode(r["prompt"], chat=a.chat) for r in read_prompts(a.prompts, a.per_category)]
    eos = set(lm.eos_token_ids)
    print(f"{len(prompts)} prompts, {threads} threads, our kernel {lm.kernel}, step {lm.step}, llama.cpp on {path.name}; "
          "warming up (an untimed pass over the first prompt) ...", flush=True)
    run_prompt(0, prompts[0], llamas, lm, methods, params, a, eos, [])
    rows: list[dict] = []
    for i, ids in enumerate(prompts):
        print(f"{i:>3} " + run_prompt(i, ids, llamas, lm, methods, params, a, eos, rows), flush=True)
    summary(rows, methods, weight_read_seconds(lm.model))
    if hasattr(os, "getloadavg"):
        print("load average after the run: %.2f %.2f %.2f" % os.getloadavg())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
