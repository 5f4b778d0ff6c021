"""Command line: `python -m decoding generate ...`, `python -m decoding bench ...` and `python -m decoding tune ...`."""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from collections import defaultdict
from typing import Any

from .io import Parser as _Parser
from .io import UsageError, interleave, read_prompts, read_rows
from .loop import MAX_NEW_TOKENS_CAP, Run, warm_up
from .methods import REGISTRY, SAMPLING_METHODS, ConfigError, resolve_params
from . import shard
from .perf import tune


def method_flags() -> dict[str, tuple]:
    """Parameter name -> (its Param, the methods that take it): one flag per name, from the registry."""
    out: dict[str, tuple] = {}
    for m, spec in REGISTRY.items():
        for prm in spec.params:
            first, methods = out.get(prm.name, (prm, ()))
            out[prm.name] = (first, methods + (m,))
    return out


def add_method_args(p: argparse.ArgumentParser) -> None:
    """The registry's method parameters as flags (unset: the method's default)."""
    g = p.add_argument_group("method options (defaults and bounds: decoding/methods/, shown in brackets)")
    for name, (prm, methods) in method_flags().items():
        who = " / ".join(methods)
        if prm.is_choice:
            g.add_argument(prm.flag, dest=name, choices=prm.choices, default=None,
                           help=f"{who}: {prm.help} [{prm.default}]")
        elif prm.is_bool:
            g.add_argument(prm.flag, dest=name, action="store_const", const=not prm.default, default=None,
                           help=f"{who}: {'do not ' if prm.default else ''}{prm.help}")
        else:
            g.add_argument(prm.flag, dest=name, type=int, default=None, metavar=name.upper() if len(name) > 1 else name,
                           help=f"{who}: {prm.help} [{prm.default}; {prm.lo}..{prm.hi}]")


def _add_model_args(p: argparse.ArgumentParser, max_new_tokens: int = 128) -> None:
    """The model, where it runs, the chat template and the output length."""
    p.add_argument("--model", default=None, help="HF model id in the local cache or a local folder (default: the bundled SmolLM2-135M)")
    p.add_argument("--device", default=None, help="cuda, mps or cpu (default: the best available)")
    p.add_argument("--dtype", default=None, choices=["float32", "bfloat16", "float16"])
    p.add_argument("--device-map", default=None,
                   help="split the model's layers with accelerate: auto, balanced, sequential, or a JSON {module: device} "
                        "(devices: 0, cuda:1, cpu, disk) or a JSON file (default: the whole model on --device)")
    p.add_argument("--max-memory", default=None, help="with --device-map: the most each device holds, e.g. 0=70GiB,1=70GiB,cpu=200GiB")
    p.add_argument("--offload-folder", default=None, help="with --device-map: where layers mapped to 'disk' are kept")
    p.add_argument("--kernel", default="auto", choices=["auto", "skinny", "stock"],
                   help="the linear layers' product in decoding steps: skinny (W @ x.T, decoding/kernels.py), "
                        "stock (F.linear), auto: skinny where it measures faster, i.e. on an x86 CPU with MKL [auto]")
    p.add_argument("--chat", action="store_true", help="wrap each prompt as one user message in the model's chat template")
    p.add_argument("--max-new-tokens", type=int, default=max_new_tokens)


def _add_decode_args(p: argparse.ArgumentParser) -> None:
    """The method parameters and the sampling options."""
    add_method_args(p)
    s = p.add_argument_group(f"sampling ({', '.join(SAMPLING_METHODS)}; temperature 0 = greedy, the default)")
    s.add_argument("--temperature", type=float, default=0.0, help="> 0 samples; the output is distributed as AR sampling")
    s.add_argument("--top-k", type=int, default=0, help="keep the k most likely tokens (0: off)")
    s.add_argument("--top-p", type=float, default=1.0, help="keep the smallest set of tokens with this much probability (1: off)")
    s.add_argument("--sample-seed", type=int, default=0, help="seed of the sampling generator (runs are reproducible)")


def _add_prompts_args(p: argparse.ArgumentParser, per_category: int) -> None:
    p.add_argument("--prompts", required=True, help="JSONL: Spec-Bench rows (turns[0], category) or {id, prompt} rows")
    p.add_argument("--per-category", type=int, default=per_category, help="take the first K prompts of each category (0: all)")
    p.add_argument("--categories", default="", help="comma list of categories to keep")


def build_parser() -> argparse.ArgumentParser:
    p = _Parser(prog="python -m decoding", description="Exact parallel decoding (AR, Jacobi, lookahead, prompt lookup) with traces.")
    sub = p.add_subparsers(dest="command", required=True, parser_class=_Parser)
    g = sub.add_parser("generate", help="decode one prompt, stream the committed chunks, optionally save the trace")
    g.add_argument("--method", choices=tuple(REGISTRY), default="lookahead")
    g.add_argument("--prompt", required=True)
    _add_model_args(g)
    _add_decode_args(g)
    g.add_argument("--trace", help="write the trace JSON here")
    g.add_argument("--json", action="store_true", help="print a JSON summary instead of the text")
    b = sub.add_parser("bench", help="run methods over a prompts file and print a table per method and category")
    _add_prompts_args(b, per_category=0)
    b.add_argument("--methods", default="ar,jacobi,lookahead,pld",
                   help=f"comma list of {', '.join(REGISTRY)} and 'generate' (transformers' model.generate greedy)")
    _add_model_args(b)
    _add_decode_args(b)
    b.add_argument("--out", help="write one JSON line per (prompt, method) here")
    b.add_argument("--overhead", action="store_true", help="also run each method with recording off and report the recording overhead")
    b.add_argument("--resume", action="store_true", help="append to --out, skipping the (prompt, method) runs it already holds")
    mg = sub.add_parser("merge", help="join the per-rank files of a bench run under torchrun / accelerate launch (out.rank*.jsonl), "
                                      "checking that every (prompt, method) run is there exactly once")
    _add_prompts_args(mg, per_category=0)
    mg.add_argument("--methods", default="ar,jacobi,lookahead,pld", help="the --methods the bench ran with")
    mg.add_argument("--overhead", action="store_true", help="the bench ran with --overhead")
    mg.add_argument("--out", required=True, help="the bench's --out: reads OUT's .rankN files, writes OUT")
    t = sub.add_parser("tune", help="rank the settings of each method's tuning grid by predicted and measured speedup on this device")
    _add_prompts_args(t, per_category=1)
    t.add_argument("--methods", default="jacobi,lookahead",
                   help=f"comma list of {', '.join(m for m, s in REGISTRY.items() if s.grid)}")
    _add_model_args(t, max_new_tokens=64)
    t.add_argument("--remeasure", action="store_true", help="measure the step-cost curve again even if it is cached")
    t.add_argument("--out", help="write the runs and the ranking as JSON here")
    return p


def cmd_tune(a) -> int:
    from .perf.measure import load_or_measure

    _check_max_new(a)
    methods = [m for m in a.methods.split(",") if m]
    tunable = [m for m, spec in REGISTRY.items() if spec.grid]
    for m in methods:
        if m not in tunable:
            raise UsageError(f"tune knows {', '.join(tunable)}, not {m!r}")
    rows_in = read_prompts(a.prompts, a.per_category, a.categories)
    lm = _load_model(a)
    curve = load_or_measure(lm, progress=_progress, force=a.remeasure)
    warm_up(lm, a.chat)
    prompts = [{"id": r["id"], "category": r["category"], "ids": lm.encode(r["prompt"], chat=a.chat)} for r in rows_in]
    rows = tune.run_grid(lm, prompts, tune.settings_grid(methods), a.max_new_tokens, progress=_progress)
    ranked = tune.rank(rows, curve, by_category=True) + tune.rank(rows, curve)
    print(tune.format_ranking(ranked, curve))
    result = tune.tune_result(curve, ranked, a.max_new_tokens, a.chat, len(prompts))
    tune.save_tune_result(result, curve)
    if a.out:
        with open(a.out, "w", encoding="utf-8") as f:
            json.dump(result | {"runs": rows}, f)
    return 0


def _load_model(a):
    from .model import load_model

    split = {k: getattr(a, k) for k in ("device_map", "max_memory", "offload_folder") if getattr(a, k, None)}
    device = a.device or (None if split else shard.local_device())  # one GPU per rank under a launcher
    return load_model(a.model, device, a.dtype, progress=lambda m: print(m, file=sys.stderr),
                      kernel=getattr(a, "kernel", "auto"), **split)


def _progress(frac: float, msg: str) -> None:
    print(f"[{frac:4.0%}] {msg}", file=sys.stderr, flush=True)


def method_params(method: str, a: argparse.Namespace) -> dict[str, Any]:
    """The params a parsed command line sets for ``method`` (flags of other methods are ignored), resolved."""
    names = {prm.name for prm in REGISTRY[method].params} if method in REGISTRY else set()
    out = {k: getattr(a, k) for k in names if getattr(a, k, None) is not None}
    out.update(sampling_args(a))
    return resolve_params(method, out)


def sampling_args(a: argparse.Namespace) -> dict[str, Any]:
    """The sampling options as params (empty when greedy, or for a parser without them)."""
    if not getattr(a, "temperature", 0):
        return {}
    return {"temperature": a.temperature, "top_k": a.top_k, "top_p": a.top_p, "sample_seed": a.sample_seed}


def _check_max_new(a) -> None:
    if not 1 <= a.max_new_tokens <= MAX_NEW_TOKENS_CAP:
        raise UsageError(f"--max-new-tokens must be between 1 and {MAX_NEW_TOKENS_CAP}")


def cmd_generate(a) -> int:
    _check_max_new(a)
    params = method_params(a.method, a)
    if not a.prompt.strip():
        raise UsageError("the prompt is empty")
    lm = _load_model(a)
    ids = lm.encode(a.prompt, chat=a.chat)
    run = Run(lm, ids, a.method, params, a.max_new_tokens, prompt_text=a.prompt, chat=a.chat)
    first = True
    for step in run:
        if not a.json:
            if first:  # the prefill's token
                print(lm.tokenizer.decode(run.output[: len(run.output) - len(step.tokens)]), end="", flush=True)
                first = False
            print(lm.tokenizer.decode(step.tokens), end="", flush=True)
    tr = run.trace
    if a.trace:
        tr.save(a.trace)
    if a.json:
        print(json.dumps(tr.summary() | {"model": tr.model_id, "device": tr.device, "text": tr.text}, ensure_ascii=False))
    else:
        s = tr.summary()
        print(f"\n\n[{s['method']}] {s['new_tokens']} tokens in {s['steps']} steps: {s['tokens_per_step']:.2f} tokens/step, "
              f"{s['tokens_per_s']:.1f} tokens/s, stop: {s['stop_reason']}", file=sys.stderr)
    return 0


def _generate_baseline(lm, ids: list[int], max_new: int, sampling: dict[str, Any] | None = None) -> tuple[list[int], float]:
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


def cmd_bench(a) -> int:
    from tqdm import tqdm

    _check_max_new(a)
    methods = _bench_methods(a.methods)
    params = {m: _variant_params(m, a) for m in methods}
    rows_in = interleave(read_prompts(a.prompts, a.per_category, a.categories))
    rank, world = shard.rank_world()  # under torchrun / accelerate launch: this rank's prompts, its own file
    rows_in, a.out = shard.take(rows_in, rank, world), shard.rank_path(a.out, rank, world)
    results = _resumed_rows(a)
    done = {(r["id"], r["method"], r["record"]) for r in results}
    lm = _load_model(a)
    warm_up(lm, a.chat)
    variants = [(m, True) for m in methods] + ([(m, False) for m in methods if m != "generate"] if a.overhead else [])
    bar = tqdm(total=len(rows_in) * len(variants), desc="bench", unit="run", file=sys.stderr)
    out = open(a.out, "a" if a.resume else "w", encoding="utf-8") if a.out else None
    try:
        for r in rows_in:
            todo = [(m, record) for m, record in variants if (r["id"], m, record) not in done]
            bar.update(len(variants) - len(todo))
            fresh = _bench_prompt(lm, r, todo, params, a, results, bar.update)
            results += fresh
            if out:  # written per prompt, once AR's tokens are known
                out.writelines(json.dumps(row) + "\n" for row in fresh)
                out.flush()
    finally:
        bar.close()
        if out:
            out.close()
    print(format_table(results))
    return 0


def cmd_merge(a) -> int:
    methods = _bench_methods(a.methods)
    variants = [(m, True) for m in methods] + ([(m, False) for m in methods if m != "generate"] if a.overhead else [])
    ids = [r["id"] for r in read_prompts(a.prompts, a.per_category, a.categories)]
    files = shard.rank_files(a.out)
    rows = shard.merge(files, {(i, m, rec) for i in ids for m, rec in variants}, a.out)
    print(f"merged {len(files)} rank files: {len(rows)} runs of {len(ids)} prompts -> {a.out}", file=sys.stderr)
    print(format_table(rows))
    return 0


def _bench_methods(arg: str) -> list[str]:
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


def _variant_params(label: str, a) -> dict[str, Any]:
    """The resolved params of a --methods entry: the command line's, then the variant's own."""
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
    return resolve_params(base, {**method_params(base, a), **over})


def _resumed_rows(a) -> list[dict]:
    """The rows --resume continues from (none without --resume)."""
    if not a.resume:
        return []
    if not a.out:
        raise UsageError("--resume needs --out (the file to continue)")
    return read_rows(a.out) if os.path.isfile(a.out) else []


def _bench_prompt(lm, r: dict, todo: list[tuple[str, bool]], params: dict, a, results: list[dict], tick) -> list[dict]:
    """Run each (method, record) of ``todo`` on prompt ``r``: the new rows, each marked whether it
    matches AR's tokens (AR's row of this prompt may come from ``results``, read back by --resume)."""
    ids = lm.encode(r["prompt"], chat=a.chat)
    sampling = sampling_args(a)
    ref = next((x["output_ids"] for x in results if x["id"] == r["id"] and x["method"] == "ar" and x["record"]), None)
    fresh = []
    for m, record in todo:
        row = _bench_run(lm, ids, m.split(":")[0], params[m], a.max_new_tokens, record, sampling)
        if m == "ar" and record:
            ref = row["output_ids"]
        fresh.append({"id": r["id"], "category": r["category"], "method": m, "params": params[m], "record": record,
                      "sampled": bool(sampling), "prompt_tokens": len(ids), **row})
        tick(1)
    for row in fresh:
        # sampled runs draw different (equally distributed) text: token equality says nothing
        row["matches_ar"] = None if ref is None or sampling else row["output_ids"] == ref
        row["dtype"], row["kernel"] = str(lm.dtype), getattr(lm, "kernel", "stock")
        if row["matches_ar"] is not None:  # how many tokens match, where the first divergence is, AR's logit gap there
            from .exactness import compare_to_ar

            row.update(compare_to_ar(lm, ids, row["output_ids"], ref, str(lm.dtype)))
    return fresh


def _bench_run(lm, ids: list[int], m: str, params: dict, max_new: int, record: bool, sampling: dict) -> dict:
    """One bench run of method ``m`` (or transformers' "generate"): its tokens, counts and times."""
    if m == "generate":
        new, secs = _generate_baseline(lm, ids, max_new, sampling)
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


def main(argv: list[str] | None = None) -> int:
    from .model import ModelError

    parser = build_parser()
    try:
        a = parser.parse_args(argv)
        return {"generate": cmd_generate, "bench": cmd_bench, "tune": cmd_tune, "merge": cmd_merge}[a.command](a)
    except (UsageError, ConfigError, ModelError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    except ValueError as e:  # e.g. an empty prompt
        print(f"error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130
