"""Command line: ``python -m cllm collect|train|eval|pair`` (see the package docstring)."""

from __future__ import annotations

import gzip
import json
import os
import sys
import time

from decoding import ConfigError
from decoding.io import Parser, UsageError, read_prompts

from .data import collect, read_items, select
from .evaluate import evaluate, pair, report
from .train import add_lora, save_model, train


def _model_args(q, default_dtype=None) -> None:
    q.add_argument("--model", default=None, help="base model: HF id in the local cache or a folder (default: the bundled SmolLM2-135M)")
    q.add_argument("--device", default=None, help="cuda, mps or cpu (default: the best available)")
    q.add_argument("--dtype", default=default_dtype, choices=["float32", "bfloat16", "float16"])


def _prompt_args(q) -> None:
    q.add_argument("--prompts", required=True, help="JSONL: Spec-Bench rows (turns[0], category), {id, prompt} rows or GSM8K {question, answer} rows")
    q.add_argument("--categories", default="", help="comma list of categories to keep")
    q.add_argument("--skip-per-category", type=int, default=0, help="drop the first K prompts of each category")
    q.add_argument("--per-category", type=int, default=0, help="then keep K prompts of each category (0: all)")
    q.add_argument("--chat", action="store_true", help="wrap each prompt as one user message in the chat template")
    q.add_argument("--n", type=int, default=16, help="Jacobi block size")
    q.add_argument("--max-new-tokens", type=int, default=64)
    q.add_argument("--seed", type=int, default=0, help="seed of the Jacobi initial guesses")


def _train_args(t) -> None:
    t.add_argument("--data", required=True, help="JSONL written by collect")
    t.add_argument("--out", required=True, help="folder for the CLLM (adapter or full model), metrics.jsonl, checkpoints")
    _model_args(t, "float32")
    t.add_argument("--epochs", type=float, default=1.0)
    t.add_argument("--lr", type=float, default=None, help="learning rate (default 2e-4 with LoRA, 1e-5 full)")
    t.add_argument("--ar-weight", type=float, default=10.0, help="w: weight of the AR loss")
    t.add_argument("--local", type=float, default=0.0, help="weight of the local consistency loss (0: off)")
    t.add_argument("--lora-r", type=int, default=8, help="LoRA rank (0: full fine-tuning)")
    t.add_argument("--lora-alpha", type=int, default=16)
    t.add_argument("--lora-targets", default="all", help="'all' or a comma list of module names")
    t.add_argument("--save-every", type=int, default=100, help="checkpoint to OUT/checkpoint every K steps (0: off)")
    t.add_argument("--max-minutes", type=float, default=0.0,
                   help="stop after this much time (0: no limit), with a checkpoint; run again with --resume to go on")
    t.add_argument("--resume", action="store_true",
                   help="continue from OUT/checkpoint/train_state.pt if there is one (same data and settings)")
    t.add_argument("--seed", type=int, default=0)
    t.add_argument("--eval-prompts", default="", help="held-out prompts (JSONL) for the learning curve: Jacobi "
                   "tokens/step and drift before training and after 10/25/50/100%% of the steps, into metrics.jsonl")
    t.add_argument("--eval-categories", default="", help="comma list of categories of --eval-prompts to keep")
    t.add_argument("--eval-per-category", type=int, default=0, help="keep K prompts of each category (0: all)")
    t.add_argument("--eval-n", type=int, default=16, help="Jacobi block size of the learning curve")
    t.add_argument("--eval-max-new-tokens", type=int, default=64)
    t.add_argument("--eval-chat", action="store_true", help="wrap each held-out prompt in the chat template")


def build_parser() -> Parser:
    p = Parser(prog="python -m cllm", description="Consistency LLMs: collect Jacobi trajectories, train, evaluate.")
    sub = p.add_subparsers(dest="command", required=True, parser_class=Parser)
    c = sub.add_parser("collect", help="greedy Jacobi over the prompts; one JSON line per block (resumable)")
    _prompt_args(c)
    _model_args(c)
    c.add_argument("--out", required=True, help="JSONL file to append to (prompts already in it are skipped)")
    c.add_argument("--max-minutes", type=float, default=0.0,
                   help="stop after the prompt that passes this much time (0: no limit); run again to resume")
    _train_args(sub.add_parser("train", help="consistency + AR training on collected trajectories"))
    e = sub.add_parser("eval", help="base vs CLLM on held-out prompts: Jacobi tokens/step, speedup, drift")
    _prompt_args(e)
    _model_args(e)
    e.add_argument("--cllm", required=True, help="CLLM folder (LoRA adapter or full model)")
    e.add_argument("--split", default="", help="label written in each row (e.g. in-domain, out-of-domain)")
    e.add_argument("--out", help="append one JSON line per prompt here (prompts already in it, with the same --split, "
                   "are not run again: a cut run resumes)")
    e.add_argument("--results", default="", help="comma list of result files to summarise instead of running")
    e.add_argument("--n-small", type=int, default=0, help="also Jacobi tokens/step at this smaller block size (0: off)")
    e.add_argument("--auto", action="store_true", help="also Jacobi with the cost-aware window (budget=auto) on both "
                   "models: the CLLM's tokens/s against the base's AR")
    e.add_argument("--auto-n", type=int, default=64, help="the block size of the budget=auto Jacobi (default 64: its "
                   "window slides along the block, and a longer block loses less at the block ends)")
    e.add_argument("--kernel", default="auto", help="the linear layers' product of both models (decoding.kernels; "
                   "default auto: what measures fastest here)")
    e.add_argument("--step", default="eager", choices=["eager", "compiled"], help="decode steps eager or compiled "
                   "(torch.compile over a static cache)")
    q = sub.add_parser("pair", help="decode one prompt with Jacobi by the base and by the CLLM; save both traces (the app's CLLM page)")
    _prompt_args(q)
    _model_args(q)
    q.add_argument("--cllm", required=True, help="CLLM folder (LoRA adapter or full model)")
    q.add_argument("--out-dir", required=True, help="writes base_jacobi.json and cllm_jacobi.json here")
    q.add_argument("--results", default="", help="comma list of `eval --out` files: pick the prompt by the page's "
                   "rule (median tokens/step gain among answers keeping >= 80%% of the base's tokens) and write "
                   "pairs.json (the rule, the choice, every prompt's figures) beside the traces")
    q.add_argument("--answers", default="", help="with --results: a `campaign score` answers file of this CLLM on "
                   "these problems (RUN/score_answers/*.json.gz): whether each answer loops is decided from it by "
                   "today's rule (loops of any period), not by the results' flags")
    _campaign_args(sub.add_parser("campaign", help="the resumable CLLM campaign: collect shards, train, learning curve (data/cllm)"))
    return p


def _campaign_args(g) -> None:
    g.add_argument("action", choices=["run", "status", "export", "guard", "score"], help="run: go on for --minutes; "
                   "status: where it stands; export: write --run's saved weights as an adapter folder (--out); guard: "
                   "drop a student's degenerate answers from its shards collected before the collapse guard (kept as "
                   "the negatives of recipe w_seq); score: a "
                   "kept point (--step) or an adapter (--adapter) on the --count held-out problems after the curve's, "
                   "or with --select on a selection set of GSM8K problems the run never trained on; batched "
                   "(minutes: tokens/step, accuracy, drift; appended to RUN/scores.jsonl)")
    g.add_argument("--out", default="", help="export: the adapter folder to write (e.g. assets/cllm/adapter)")
    g.add_argument("--int8", action="store_true", help="export: the weights in int8 with per-row scales (half the "
                   "bytes of fp16; the shipped adapter is written so)")
    g.add_argument("--scale", type=float, default=1.0, help="export: merge the update at this fraction (0-2; "
                   "lora_alpha x F: the weights interpolated between the base and the trained model, as WiSE-FT)")
    g.add_argument("--step", type=int, default=0, help="export, score: the adapter kept at this curve point (run "
                   "--keep-points) instead of the last saved state")
    g.add_argument("--adapter", default="", help="score: this adapter folder (e.g. assets/cllm/adapter) instead of --step")
    g.add_argument("--skip", type=int, default=-1, help="score: skip this many held-out problems (default: the curve's)")
    g.add_argument("--count", type=int, default=64, help="score: then take this many (default 64: cllm eval's held-out-64)")
    g.add_argument("--select", action="store_true", help="score: GSM8K problems the run never trained on (a selection "
                   "set: choose a point on these, then evaluate it on the held-out ones) instead of the held-out")
    g.add_argument("--keep-points", action="store_true", help="run: keep the adapter (int8) at each curve point in "
                   "RUN/points/ (machine-local), so that the best point can be exported (export --step N)")
    g.add_argument("--dir", default="data/cllm", help="the campaign folder (manifest, shards, run/; default data/cllm)")
    g.add_argument("--minutes", type=float, default=60.0, help="how long this run goes on (it stops cleanly, saved)")
    g.add_argument("--eval-every", type=int, default=512, help="a learning-curve point every K items trained")
    g.add_argument("--save-every", type=int, default=20, help="save the training state every K steps")
    g.add_argument("--collect-only", action="store_true", help="only collect shards (no training, no curve)")
    g.add_argument("--run", default="run", help="the training run's folder (default run); another name with --recipe "
                   "trains another recipe on the same shards, with its own state and learning curve")
    g.add_argument("--recipe", default="", help="comma list of training settings that differ from the manifest's, "
                   "e.g. lr=0.0002,w_ar=20 (kept in the run folder's recipe.json on first use)")
    g.add_argument("--from", dest="start", default="", metavar="RUN",
                   help="start --run from this run's saved state (weights, optimizer, data position, curve) "
                   "instead of from scratch, e.g. --run run-a2 --from run --recipe epochs=2,decay_steps=1187; "
                   "a path (data/cllm/run-gs) is another campaign's run: its data position is not carried over; "
                   "a kept curve point of another campaign (data/cllm-op5/run-op/points/step-03200): its weights and "
                   "step, AdamW's moments from zero")
    g.add_argument("--max-degenerate", type=float, default=None, metavar="SHARE",
                   help="an on-policy run stops when more than this share of the student's answers in a shard it "
                   "collected are degenerate (the collapse into repetition); default 0.25, 0 never stops")
    g.add_argument("--teacher", choices=["base", "student"], default=None,
                   help="a new campaign's trajectories: the base model's (default) or the student's as it stands when "
                   "each shard is collected (on-policy; one run per such campaign folder)")


def cmd_campaign(a) -> int:
    from .campaign import Settings, export, open_campaign, run, status_lines, use_recipe

    recipe = {}
    for part in filter(None, a.recipe.split(",")):
        k, sep, v = part.partition("=")
        if not sep:
            raise UsageError(f"--recipe takes key=value pairs, got {part!r}")
        k = k.strip()
        if isinstance(getattr(Settings(), k, None), str):  # a named choice (state_pick=stratified)
            recipe[k] = v.strip()
            continue
        try:
            recipe[k] = float(v) if any(ch in v for ch in ".e") else int(v)
        except ValueError:
            raise UsageError(f"--recipe: {k} must be a number, got {v!r}") from None
    if a.keep_points and a.action != "run":
        raise UsageError("--keep-points is an option of campaign run")
    if a.action == "score":
        return _campaign_score(a, recipe)
    if a.adapter or a.skip != -1 or a.count != 64 or a.select:
        raise UsageError("--adapter, --skip, --count and --select are options of campaign score")
    if a.action == "status":
        c = open_campaign(a.dir)
        if a.run != "run" or recipe:
            c = use_recipe(c, a.run, recipe)
        print("\n".join(status_lines(c)))
        print(f"  settings: {c.settings}")
        return 0
    if a.action == "guard":
        from .campaign import guard_shards

        c = open_campaign(a.dir)
        print(f"{guard_shards(c)} degenerate answers dropped from {a.dir}'s shards (now {c.items} items)")
        return 0
    if a.action == "export":
        if not a.out:
            raise UsageError("campaign export writes the adapter to --out FOLDER")
        if recipe or a.start:
            raise UsageError("campaign export takes --run only (its recipe is kept in the run's folder)")
        if a.step < 0 or (a.step and a.int8):
            raise UsageError("--step is a curve point's step (its kept adapter is int8 already: no --int8)")
        _threads()
        export(a.dir, a.run, a.out, say=_say, int8=a.int8, step=a.step, scale=a.scale)
        return 0
    if a.int8 or a.step or a.scale != 1.0:
        raise UsageError("--int8, --step and --scale are options of campaign export")
    if a.minutes <= 0 or a.eval_every < 1 or a.save_every < 1:
        raise UsageError("--minutes, --eval-every and --save-every must be positive")
    if a.max_degenerate is not None and not 0 <= a.max_degenerate <= 1:
        raise UsageError("--max-degenerate is a share between 0 and 1")
    c = open_campaign(a.dir, Settings(teacher=a.teacher or "base"), create=True)
    if a.teacher and a.teacher != c.settings.teacher:
        raise UsageError(f"{a.dir} is a campaign taught by {c.settings.teacher}: its shards cannot change teacher")
    _threads()
    if a.start and a.run == "run":
        raise UsageError("--from starts another run folder (--run run-NAME) from a saved run")
    run(a.dir, a.minutes, a.eval_every, a.save_every, a.collect_only, say=_say, run_name=a.run, recipe=recipe,
        start=a.start, keep_points=a.keep_points, **({} if a.max_degenerate is None else {"max_degenerate": a.max_degenerate}))
    return 0


def _campaign_score(a, recipe: dict) -> int:
    from .campaign import score

    if recipe or a.start or a.int8 or a.scale != 1.0:
        raise UsageError("campaign score takes --run, --step or --adapter, --skip or --select, and --count")
    _threads()
    if a.select and a.skip != -1:
        raise UsageError("--select takes its own problems: no --skip")
    score(a.dir, a.run, a.step, a.adapter, a.skip, a.count, say=_say, select=a.select)
    return 0


def _rows(a) -> list[dict]:
    rows = select(read_prompts(a.prompts, 0, a.categories), a.skip_per_category, a.per_category)
    if not rows:
        raise UsageError(f"no prompts selected from {a.prompts}")
    if not 1 <= a.n <= 256:
        raise UsageError("--n must be between 1 and 256")
    if not 1 <= a.max_new_tokens <= 4096:
        raise UsageError("--max-new-tokens must be between 1 and 4096")
    return rows


def _threads() -> None:
    import torch

    if os.environ.get("OMP_NUM_THREADS"):
        torch.set_num_threads(int(os.environ["OMP_NUM_THREADS"]))


def _say(m: str) -> None:
    print(m, file=sys.stderr)


def cmd_collect(a) -> int:
    from decoding.model import load_model

    rows = _rows(a)
    out_dir = os.path.dirname(os.path.abspath(a.out))
    if not os.path.isdir(out_dir):
        raise UsageError(f"no folder {out_dir} for --out")
    _threads()
    lm = load_model(a.model, a.device, a.dtype, progress=_say)
    t0 = time.perf_counter()
    s = collect(lm, rows, a.out, a.n, a.max_new_tokens, a.chat, a.seed, max_seconds=a.max_minutes * 60)
    per = f" ({s['seconds'] / s['prompts']:.1f} s/prompt, {s['seconds'] / max(1, s['items']):.1f} s/item)" if s["prompts"] else ""
    _say(f"collected {s['items']} items from {s['prompts']} prompts ({s['tokens']} tokens, {s['steps']} Jacobi steps) in "
         f"{time.perf_counter() - t0:.0f} s{per}; {s['skipped']} prompts were already in {a.out}"
         + (f"; stopped at the time limit, {s['left']} prompts left: run the same command again to resume" if s["stopped"] else ""))
    return 0


def _check_vocab(items: list[dict], vocab: int) -> None:
    for d in items:
        if max(d["prompt_ids"] + d["fixed_point"] + [t for s in d["states"] for t in s]) >= vocab:
            raise UsageError(f"item {d['id']} has token ids beyond the model's vocabulary ({vocab}): wrong --model?")


def cmd_train(a) -> int:
    from decoding.model import BUNDLED, load_model

    items = read_items(a.data)
    if a.epochs <= 0:
        raise UsageError("--epochs must be > 0")
    if a.lora_r < 0:
        raise UsageError("--lora-r must be >= 0")
    _threads()
    lm = load_model(a.model, a.device, a.dtype, progress=_say)
    _check_vocab(items, lm.model.get_input_embeddings().num_embeddings)
    lora = a.lora_r > 0
    model = add_lora(lm.model, a.lora_r, a.lora_alpha, targets=a.lora_targets) if lora else lm.model
    lr = a.lr if a.lr is not None else (2e-4 if lora else 1e-5)
    base = a.model or BUNDLED
    meta = {"base": base, "data": os.path.abspath(a.data), "items": len(items), "lora_r": a.lora_r,
            "lora_alpha": a.lora_alpha, "epochs": a.epochs, "lr": lr, "ar_weight": a.ar_weight, "local": a.local,
            "seed": a.seed, "device": str(lm.device), "dtype": lm.dtype, "command": "python -m cllm " + " ".join(sys.argv[1:])}

    def save(path):
        save_model(model, lm.tokenizer, path, base, lora, meta)

    curve = None
    if a.eval_prompts:
        from .evaluate import CurveEval

        ev = read_prompts(a.eval_prompts, a.eval_per_category, a.eval_categories)
        curve = CurveEval(lm.tokenizer, [lm.encode(r["prompt"], chat=a.eval_chat) for r in ev], a.eval_n,
                          a.eval_max_new_tokens, a.seed, lm.model_id, str(lm.device), lm.dtype)
        meta["eval_prompts"] = {"file": os.path.abspath(a.eval_prompts), "ids": [r["id"] for r in ev], "n": a.eval_n,
                                "max_new_tokens": a.eval_max_new_tokens, "chat": a.eval_chat}
    rows = train(model, items, a.out, a.epochs, lr, a.ar_weight, a.local, a.seed, save_every=a.save_every, save=save,
                 max_seconds=a.max_minutes * 60, resume=a.resume, evaluate=curve)
    from .train import load_state

    st = load_state(a.out) or {}
    total = max(1, int(round(a.epochs * len(items))))
    meta.update({"steps": st.get("step", len(rows)), "total_steps": total, "finished": bool(st.get("done", not rows or rows[-1]["step"] == total)),
                 "train_seconds": st.get("seconds", rows[-1]["seconds"] if rows else 0),
                 "train_tokens": st.get("tokens", rows[-1]["tokens"] if rows else 0)})
    save_model(model, lm.tokenizer, a.out, base, lora, meta)
    last = rows[-1] if rows else {}
    _say(f"trained {len(rows)} steps this run ({meta['steps']}/{total} in all, {meta['train_seconds']:.0f} s); last losses: "
         + ", ".join(f"{k} {last[k]:.4f}" for k in ("consistency", "ar", "local") if k in last)
         + f"; saved to {a.out}"
         + ("" if meta["finished"] else "; cut by --max-minutes: run the same command with --resume to go on"))
    return 0


def cmd_eval(a) -> int:
    from decoding.model import load_model

    if a.results:
        print(report(_results(a.results)))
        return 0
    rows = _rows(a)
    for r in rows:
        r["split"] = a.split
    done = _results(a.out) if a.out and os.path.isfile(a.out) else []
    seen = {(str(r["id"]), r.get("split", "")) for r in done}
    todo = [r for r in rows if (str(r["id"]), r["split"]) not in seen]
    if len(todo) < len(rows):
        _say(f"{a.out} already holds {len(rows) - len(todo)} of these prompts: {len(todo)} left")
    res = [r for r in done if (str(r["id"]), r.get("split", "")) in {(str(x["id"]), x["split"]) for x in rows}]
    if todo:
        _threads()
        base = load_model(a.model, a.device, a.dtype, progress=_say, kernel=a.kernel, step=a.step)
        cllm = load_model(a.cllm, a.device, a.dtype, progress=_say, kernel=a.kernel, step=a.step)
        out = open(a.out, "a", encoding="utf-8") if a.out else None
        try:
            res += evaluate(base, cllm, todo, a.n, a.max_new_tokens, a.chat, a.seed, out=out, n_small=a.n_small,
                            auto=a.auto_n if a.auto else 0)
        finally:
            if out:
                out.close()
    print(report(res))
    return 0


def _results(spec: str) -> list[dict]:
    """``eval`` result rows from the comma-separated files of ``spec`` (JSONL, or JSONL.gz as committed)."""
    res = []
    for p in spec.split(","):
        if not os.path.isfile(p):
            raise UsageError(f"no results file at {p}")
        with (gzip.open(p, "rt", encoding="utf-8") if p.endswith(".gz") else open(p, encoding="utf-8")) as f:
            res += [json.loads(line) for line in f if line.strip()]
    return res


def _loops(path: str, res: list[dict]) -> list[str]:
    """The ids of the results' prompts whose CLLM answer in the score answers file ``path`` is
    degenerate by today's rule (``cllm.evaluate.degenerate``); refused if it lacks one of them."""
    from .evaluate import degenerate

    try:
        with gzip.open(path, "rt", encoding="utf-8") as f:
            d = json.load(f)
        got = dict(zip(map(str, d["ids"]), d["answers"]))
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise UsageError(f"{path} is not a campaign score answers file ({e})") from e
    missing = [str(r["id"]) for r in res if str(r["id"]) not in got]
    if missing:
        raise UsageError(f"{path} has no answer for prompt{'s' if len(missing) > 1 else ''} {', '.join(missing[:5])}")
    return [str(r["id"]) for r in res if degenerate(got[str(r["id"])]) and not r["cllm"].get("degenerate")]


def cmd_pair(a) -> int:
    rows = _rows(a)
    if not os.path.isdir(a.out_dir):
        raise UsageError(f"no folder {a.out_dir}")
    models = {"base": a.model, "cllm": a.cllm}
    _threads()
    if not a.results:
        pair(rows[0], models, a.out_dir, a.n, a.max_new_tokens, a.chat, a.seed, a.device, a.dtype, _say)
        return 0
    from .evaluate import degenerate, pair_table

    res, by = _results(a.results), {x["id"]: x for x in rows}
    loops = _loops(a.answers, res) if a.answers else []
    while True:  # the chosen prompt's CLLM answer, decoded, must not loop (results written by an older rule may say so)
        table = pair_table(res, loops=loops)
        if str(table["chosen"]) not in by:
            raise UsageError(f"prompt {table['chosen']} (chosen from the results) is not among the selected prompts")
        r = by[str(table["chosen"])]
        _say(f"pair: prompt {r['id']} by the rule: {table['rule']}")
        paths = pair(r, models, a.out_dir, a.n, a.max_new_tokens, a.chat, a.seed, a.device, a.dtype, _say)
        with open(paths["cllm"], encoding="utf-8") as f:
            answer = json.load(f)["output_ids"]
        if not degenerate(answer) or str(r["id"]) in loops:  # (a prompt already left out came back: all loop)
            break
        _say(f"pair: prompt {r['id']}'s CLLM answer loops; the next by the rule")
        loops.append(str(r["id"]))
    table.update({"prompts_file": os.path.basename(a.prompts), "chat": a.chat, "n": a.n,
                  "max_new_tokens": a.max_new_tokens})
    table["texts"] = {t["id"]: by[t["id"]]["prompt"] for t in table["prompts"] if t["id"] in by}
    with open(os.path.join(a.out_dir, "pairs.json"), "w", encoding="utf-8") as f:
        json.dump(table, f, indent=1)
    return 0


def main(argv: list[str] | None = None) -> int:
    from decoding.model import ModelError

    try:
        a = build_parser().parse_args(argv)
        return {"collect": cmd_collect, "train": cmd_train, "eval": cmd_eval, "pair": cmd_pair,
                "campaign": cmd_campaign}[a.command](a)
    except (UsageError, ConfigError, ModelError, ValueError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130
