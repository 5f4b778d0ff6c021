"""The bench library behind `python -m decoding bench` / `merge` (decoding/cli.py is its argparse):
which methods and variants to run, each (prompt, method) run and its row, transformers' own
``generate`` as a baseline, and the table of tokens/step, tokens/s and speedups per method and
category. Scripts (scripts/bench_report.py, kernel_report.py, bench_asset.py) use it directly.

A --methods entry is a method, 'generate', or a variant 'method:auto' / 'method:fixed' (its step
budget) or 'method:key=value:...' (any of its parameters), e.g. lookahead:auto:G=15.
"""

from __future__ import annotations

import json
import os
import statistics
import time
from collections import defaultdict
from typing import Any, Callable, TextIO

from .exactness import compare_to_ar
from .io import UsageError, read_rows
from .loop import Run
from .methods import REGISTRY, resolve_params


def method_params(method: str, given: dict[str, Any]) -> dict[str, Any]:
    """The params that ``given`` (options by name, None: unset) sets for ``method`` (options of other
    methods are ignored), with the sampling options, resolved."""
    names = {prm.name for prm in REGISTRY[method].params} if method in REGISTRY else set()
    out = {k: given[k] for k in names if given.get(k) is not None}
    out.update(sampling_params(given))
    return resolve_params(method, out)


def sampling_params(given: dict[str, Any]) -> dict[str, Any]:
    """The sampling options as params (empty when greedy, or where ``given`` has none)."""
    if not given.get("temperature", 0):
        return {}
    return {k: given[k] for k in ("temperature", "top_k", "top_p", "sample_seed")}


def generate_baseline(lm, ids: list[int], max_new: int, sampling: dict[str, Any] | None = None) -> tuple[list[int], float]:
    """transformers' own ``model.generate`` (greedy, or sampling with the same warpers): the new tokens and seconds."""
    import torch

    x = torch.tensor([ids], device=lm.model.device)
    eos = lm.eos_token_ids or None
    if sampling:  # generate(do_sample) with the same warpers; seeded through torch's global generator
        torch.manual_seed(sampling["sample_seed"])
        kw = dict(do_sample=True, temperature=sampling["temperature"], top_k=sampling["top_k"], top_p=sampling["top_p"])
    else:
        kw = dict(do_sample=False, temperature=None, top_p=None, top_k=None)
    with torch.inference_mode():
        t0 = time.perf_counter()
        out = lm.model.generate(x, attention_mask=torch.ones_like(x), max_new_tokens=max_new,
                                eos_token_id=eos, pad_token_id=(eos or [0])[0], **kw)
        if x.device.type == "cuda":
            torch.cuda.synchronize()
        secs = time.perf_counter() - t0
    new = out[0, len(ids):].tolist()
    return new, secs



def parse_methods(arg: str) -> list[str]:
    """The --methods entries: a method, 'generate', or a variant 'method:auto' / 'method:fixed'
    (its step budget) or 'method:key=value:...' (any of its parameters), e.g. lookahead:auto:G=15."""
    methods = [m for m in arg.split(",") if m]
    for m in methods:
        base = m.split(":")[0]
        if base not in (*REGISTRY, "generate") or (base == "generate" and m != base):
            raise UsageError(f"unknown method {m!r} in --methods (choose from {', '.join(REGISTRY)}, generate; "
                             "a variant as method:auto or method:key=value)")
    if len(set(methods)) != len(methods):
        raise UsageError("--methods lists a method twice")
    return methods


def variant_params(label: str, given: dict[str, Any]) -> dict[str, Any]:
    """The resolved params of a --methods entry: ``given`` (the command line's options), then the variant's own."""
    base, *extra = label.split(":")
    if base == "generate":
        return {}
    over: dict[str, Any] = {}
    for e in extra:
        k, eq, v = e.partition("=")
        if not eq and e in ("auto", "fixed"):
            k, v = "budget", e
        elif not eq:
            raise UsageError(f"--methods: {e!r} in {label!r} is not key=value, auto or fixed")
        over[k] = int(v) if v.lstrip("-").isdigit() else {"true": True, "false": False}.get(v, v)
    return resolve_params(base, {**method_params(base, given), **over})


def variants(methods: list[str], overhead: bool) -> list[tuple[str, bool]]:
    """(method, record) runs per prompt: each method recording, and with ``overhead`` each again without."""
    return [(m, True) for m in methods] + ([(m, False) for m in methods if m != "generate"] if overhead else [])


def resumed_rows(path: str | None, resume: bool) -> list[dict]:
    """The rows a resumed bench continues from (none without ``resume``)."""
    if not resume:
        return []
    if not path:
        raise UsageError("--resume needs --out (the file to continue)")
    return read_rows(path) if os.path.isfile(path) else []


def run_bench(lm, rows_in: list[dict], todo: list[tuple[str, bool]], params: dict, max_new: int, chat: bool,
              sampling: dict, results: list[dict], out: TextIO | None, tick: Callable[[int], Any]) -> list[dict]:
    """Every (method, record) of ``todo`` on every prompt not already in ``results``; the rows are
    appended to ``results`` (returned) and written to ``out`` per prompt, once AR's tokens are known."""
    done = {(r["id"], r["method"], r["record"]) for r in results}
    for r in rows_in:
        left = [(m, record) for m, record in todo if (r["id"], m, record) not in done]
        tick(len(todo) - len(left))
        fresh = bench_prompt(lm, r, left, params, max_new, chat, sampling, results, tick)
        results += fresh
        if out:
            out.writelines(json.dumps(row) + "\n" for row in fresh)
            out.flush()
    return results


def bench_prompt(lm, r: dict, todo: list[tuple[str, bool]], params: dict, max_new: int, chat: bool, sampling: dict,
                 results: list[dict], tick) -> list[dict]:
    """Run each (method, record) of ``todo`` on prompt ``r``: the new rows, each marked whether it
    matches AR's tokens (AR's row of this prompt may come from ``results``, read back by --resume)."""
    ids = lm.encode(r["prompt"], chat=chat)
    ref = next((x["output_ids"] for x in results if x["id"] == r["id"] and x["method"] == "ar" and x["record"]), None)
    fresh = []
    for m, record in todo:
        row = bench_run(lm, ids, m.split(":")[0], params[m], max_new, record, sampling)
        if m == "ar" and record:
            ref = row["output_ids"]
        fresh.append({"id": r["id"], "category": r["category"], "method": m, "params": params[m], "record": record,
                      "sampled": bool(sampling), "prompt_tokens": len(ids), **row})
        tick(1)
    for row in fresh:
        # sampled runs draw different (equally distributed) text: token equality says nothing
        row["matches_ar"] = None if ref is None or sampling else row["output_ids"] == ref
        row["dtype"], row["kernel"], row["step"] = str(lm.dtype), getattr(lm, "kernel", "stock"), getattr(lm, "step", "eager")
        if row["matches_ar"] is not None:  # how many tokens match, where the first divergence is, AR's logit gap there
            row.update(compare_to_ar(lm, ids, row["output_ids"], ref, str(lm.dtype)))
    return fresh


def bench_run(lm, ids: list[int], m: str, params: dict, max_new: int, record: bool, sampling: dict) -> dict:
    """One bench run of method ``m`` (or transformers' "generate"): its tokens, counts and times."""
    if m == "generate":
        new, secs = generate_baseline(lm, ids, max_new, sampling)
        steps = max(len(new) - 1, 0)
        row = {"steps": steps, "tokens_per_step": (len(new) - 1) / steps if steps else 0.0,
               "prefill_seconds": None, "forward_seconds": None, "fed": None}
    else:
        tr = Run(lm, ids, m, params, max_new, record=record).decode()
        new, secs = tr.output_ids, tr.seconds
        row = {"steps": tr.n_steps, "tokens_per_step": tr.tokens_per_step, "prefill_seconds": tr.prefill_seconds,
               "forward_seconds": tr.forward_seconds, "fed": [s.fed for s in tr.steps]}
        if tr.steps and all(s.budget for s in tr.steps):  # budget=auto: its own calibrated step costs
            row["step_costs"] = [s.budget.cost for s in tr.steps]
    return {"output_ids": new, **row, "seconds": secs, "tokens_per_s": len(new) / secs if secs > 0 else 0.0}


def summarize(results: list[dict]) -> list[dict]:
    """Per (method, category) and per method overall: tokens/step, tokens/s, speedups, overhead."""
    by: dict[tuple[str, str], list[dict]] = defaultdict(list)
    for r in results:
        key_m = r["method"] if r["record"] else r["method"] + "/norec"
        by[(key_m, r["category"])].append(r)
        by[(key_m, "ALL")].append(r)
    ar = {(r["id"]): r for r in results if r["method"] == "ar" and r["record"]}
    gen = {(r["id"]): r for r in results if r["method"] == "generate"}
    norec = {(r["id"], r["method"]): r for r in results if not r["record"]}
    table = []
    for (m, cat), rs in sorted(by.items(), key=lambda kv: (kv[0][1] == "ALL", kv[0][1], kv[0][0])):
        steps = sum(r["steps"] for r in rs)
        step_toks = sum(max(len(r["output_ids"]) - 1, 0) for r in rs)
        toks, secs = sum(len(r["output_ids"]) for r in rs), sum(r["seconds"] for r in rs)
        row = {"method": m, "category": cat, "prompts": len(rs), "tokens_per_step": step_toks / steps if steps else 0.0,
               "tokens_per_s": toks / secs if secs else 0.0}
        for name, base in (("vs_ar", ar), ("vs_generate", gen)):
            ratios = [r["tokens_per_s"] / base[r["id"]]["tokens_per_s"] for r in rs if r["id"] in base and base[r["id"]]["tokens_per_s"]]
            row[name] = statistics.median(ratios) if ratios else None
        over = [r["seconds"] / norec[(r["id"], r["method"])]["seconds"] - 1 for r in rs if r["record"] and (r["id"], r["method"]) in norec]
        row["record_overhead"] = statistics.median(over) if over else None
        # exact: the same tokens as our AR loop on the same prompt (rows read back from a file included)
        # (None where no run of the group has an AR twin: never "exact" without a comparison)
        compared = [r for r in rs if r["id"] in ar]
        row["exact"] = None if any(r.get("sampled") for r in rs) or not compared else all(
            r["output_ids"] == ar[r["id"]]["output_ids"] for r in compared)
        row["runs_matching_ar"] = None if row["exact"] is None else sum(r["output_ids"] == ar[r["id"]]["output_ids"] for r in compared)
        row["runs_compared"] = None if row["exact"] is None else len(compared)
        table.append(row)
    return table


def exact_label(r: dict, none: str = "-") -> str:
    """A summary row's 'exact' cell: yes, NO (k of n runs), or ``none`` where nothing was compared."""
    if r.get("exact") is None:
        return none
    return "yes" if r["exact"] else f"NO ({r['runs_matching_ar']} of {r['runs_compared']} runs)"


def format_table(results: list[dict]) -> str:
    table = summarize(results)
    head = f"{'method':<15}{'category':<16}{'n':>4}{'tok/step':>10}{'tok/s':>9}{'vs ar':>8}{'vs gen':>8}{'rec.ovh':>9}  exact"
    lines = [head, "-" * len(head)]
    f = lambda v, fmt: "-" if v is None else format(v, fmt)
    for r in table:
        lines.append(f"{r['method']:<15}{r['category']:<16}{r['prompts']:>4}{r['tokens_per_step']:>10.3f}{r['tokens_per_s']:>9.2f}"
                     f"{f(r['vs_ar'], '.3f'):>8}{f(r['vs_generate'], '.3f'):>8}{f(r['record_overhead'], '+.1%'):>9}  {exact_label(r)}")
    lines.append("(vs ar / vs gen: median per-prompt ratio of tokens/s; rec.ovh: median extra time with recording on)")
    if any(r.get("sampled") for r in results):
        lines.append("(sampled runs: 'exact' does not apply; each method draws its own text, with AR sampling's distribution)")
    return "\n".join(lines)
