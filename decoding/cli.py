"""Command line: `python -m decoding generate | bench | merge | tune` (installed: `pdl-decode`).

Argparse only: the commands parse their options and call the libraries (decoding/bench.py for bench
and merge, decoding/perf/tune.py for tune, decoding/loop.py for generate).
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from . import bench, shard
from .bench import format_table
from .io import Parser as _Parser
from .io import UsageError, interleave, read_prompts
from .kernels import KERNELS
from .loop import MAX_NEW_TOKENS_CAP, Run, warm_up
from .methods import REGISTRY, SAMPLING_METHODS, ConfigError
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
    p.add_argument("--kernel", default="auto", choices=list(KERNELS),
                   help="the linear layers' product in decoding steps: fewrows (a C++ kernel built for this CPU on "
                        "first use that streams each weight once for 1-32 tokens, decoding/fewrows.py), skinny "
                        "(W @ x.T, decoding/kernels.py), onednn (skinny for 1-2 tokens, oneDNN's packed product for "
                        "3-32), stock (F.linear), "
                        "auto: what measures faster on this CPU (kept per machine) [auto]")
    p.add_argument("--step", default="eager", choices=["eager", "compiled"],
                   help="the decode step: compiled runs it through torch.compile over a static KV cache "
                        "(decoding/compiled.py; each fed size compiles once per start, tens of seconds) [eager]")
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
    p.add_argument("--skip-per-category", type=int, default=0, help="drop the first K prompts of each category "
                   "first (e.g. --skip-per-category 4 --per-category 4: prompts 5-8, unseen by a run on the first 4)")
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
    rows_in = read_prompts(a.prompts, a.per_category, a.categories, a.skip_per_category)
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
                      kernel=getattr(a, "kernel", "auto"), step=getattr(a, "step", "eager"), **split)


def _progress(frac: float, msg: str) -> None:
    print(f"[{frac:4.0%}] {msg}", file=sys.stderr, flush=True)


def method_params(method: str, a: argparse.Namespace) -> dict[str, Any]:
    """The params a parsed command line sets for ``method`` (flags of other methods are ignored), resolved."""
    return bench.method_params(method, vars(a))


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
              f"{s['tokens_per_s']:.1f} tokens/s, stop: {s['stop_reason']}"
              + (f" ({tr.compile_seconds:.1f} s compiling the decode step, left out)" if tr.compile_seconds else ""),
              file=sys.stderr)
    return 0


def cmd_bench(a) -> int:
    from tqdm import tqdm

    _check_max_new(a)
    methods = bench.parse_methods(a.methods)
    params = {m: bench.variant_params(m, vars(a)) for m in methods}
    rows_in = interleave(read_prompts(a.prompts, a.per_category, a.categories, a.skip_per_category))
    rank, world = shard.rank_world()  # under torchrun / accelerate launch: this rank's prompts, its own file
    rows_in, a.out = shard.take(rows_in, rank, world), shard.rank_path(a.out, rank, world)
    results = bench.resumed_rows(a.out, a.resume)
    lm = _load_model(a)
    warm_up(lm, a.chat)
    todo = bench.variants(methods, a.overhead)
    bar = tqdm(total=len(rows_in) * len(todo), desc="bench", unit="run", file=sys.stderr)
    out = open(a.out, "a" if a.resume else "w", encoding="utf-8") if a.out else None
    try:
        bench.run_bench(lm, rows_in, todo, params, a.max_new_tokens, a.chat, bench.sampling_params(vars(a)),
                        results, out, bar.update)
    finally:
        bar.close()
        if out:
            out.close()
    print(format_table(results))
    return 0


def cmd_merge(a) -> int:
    variants = bench.variants(bench.parse_methods(a.methods), a.overhead)
    ids = [r["id"] for r in read_prompts(a.prompts, a.per_category, a.categories, a.skip_per_category)]
    files = shard.rank_files(a.out)
    rows = shard.merge(files, {(i, m, rec) for i in ids for m, rec in variants}, a.out)
    print(f"merged {len(files)} rank files: {len(rows)} runs of {len(ids)} prompts -> {a.out}", file=sys.stderr)
    print(format_table(rows))
    return 0


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
