"""The CLLM campaign: trajectories and training as many short resumable runs whose results are
committed to the repository, so the next session (on any machine) goes on where this one stopped.

Layout of the campaign folder (``data/cllm`` by default; everything but ``partial/`` is committed):

    manifest.json           settings (model, source file, n, max_new_tokens, chat, seed, shard size)
                            and one entry per finished shard: prompt ids, items, tokens, sha256
    shards/shard-00000.jsonl.gz
                            the items (``cllm.data`` format) of ``shard_prompts`` consecutive source
                            prompts, written whole when the shard is finished (gzip, mtime 0)
    partial/                the shard being collected (append-only, resumable; not committed)
    run/state.pt            the training state: LoRA weights (fp32), AdamW moments (bf16, to keep the
                            file small), scheduler, RNG states, data position, counters
    run/metrics.jsonl       one row per optimizer step (losses, lr, items seen, seconds)
    run/curve.jsonl         the learning curve: one row per evaluation on held-out problems
    run/base_eval.json      the base model's answers and figures on those problems (computed once)
    run/base_eval-S-C.json  the same on the C problems after the first S (``score``)
    run/adapter/            the current adapter (fp16), loadable by ``decoding.model.load_model``
    run/points/step-NNNNN/  with ``run(keep_points=True)``: the adapter (int8) at each curve point, so
                            that the best point, not only the last, can be evaluated and shipped
                            (``export(step=N)``; machine-local, not committed)
    run/scores.jsonl        ``score``: a kept point (or any adapter) on the problems beyond the curve's

The data order is fixed by the manifest: shard after shard, each shard's items in a permutation
seeded by (seed, shard); the position is (shard, index), so a resumed run sees exactly the items an
uncut run would. Training needs the next item: when it has trained on every collected item,
``run`` collects the next shard.
"""

from __future__ import annotations

import gzip
import hashlib
import json
import math
import os
import random
import re
import signal
import sys
import time
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any, Callable

from decoding.io import UsageError
from decoding.lora_int8 import (SCALE, WEIGHTS, dequantize_rows, quantize_rows,  # noqa: F401 (re-exported)
                                 read_int8_weights as read_portable_weights, remove_weights,
                                 write_int8_weights as write_portable_weights)

from .data import _done_prompts, check_item
from .evaluate import final_number
from .losses import STATE_PICKS, answer_ar_loss

MANIFEST = "manifest.json"
SHARDS = "shards"
NEGATIVES = "negatives.jsonl.gz"  # the student's loop answers the collapse guard dropped (prompt, answer): w_seq's negatives
PARTIAL = "partial"
RUN = "run"
PORTABLE = "checkpoint"  # run/checkpoint/: the committed, machine-independent training checkpoint
PORTABLE_WEIGHTS = WEIGHTS  # run/checkpoint/lora_int8.safetensors.gz (and parts): decoding.lora_int8
POINTS = "points"  # run/points/step-NNNNN/: the adapter kept at each curve point (``run(keep_points=True)``)


@dataclass
class Settings:
    """What the campaign's data and training are made with (kept in the manifest; fixed once set)."""

    source: str = "../shared/benchmarks/gsm8k/train.jsonl"
    heldout: str = "../shared/benchmarks/spec_bench/question.jsonl"
    heldout_category: str = "math_reasoning"
    curve_prompts: int = 16  # the first K held-out problems make the learning curve
    chat: bool = True
    n: int = 16
    max_new_tokens: int = 256
    seed: int = 0
    shard_prompts: int = 32
    lanes: int = 4
    teacher: str = "base"  # whose Jacobi trajectories a shard holds: "base" (the adapter off) or "student" (the run's
    # adapter on, as it stands when the shard is collected: on-policy, the trajectories the CLLM itself will decode)
    # training
    lora_r: int = 16
    lora_alpha: int = 32
    lr: float = 5e-4
    warmup: int = 20
    w_ar: float = 10.0
    items_per_step: int = 4
    states_per_item: int = 4
    grad_clip: float = 1.0
    epochs: int = 1  # passes over the collected shards before the next shard is collected
    decay_steps: int = 0  # 0: a constant learning rate after the warm-up; else cosine to LR_FLOOR x lr at this step
    cons_window: int = 0  # 0: the consistency loss over every position from a state's first wrong one; else only this many
    state_pick: str = "random"  # the states trained per item: "random" (uniform) or "stratified" (one per noise level)
    w_gt: float = 0.0  # > 0: also the AR loss on the source's own answers (GSM8K's solutions), this weight
    gt_per_step: int = 0  # with w_gt: 0 = a collected prompt's answer on its first block (once per prompt and pass);
    # G > 0 = G answers a step from the whole source, in one seeded order (the dataset's answers, not only the collected prompts')
    w_ul: float = 0.0  # > 0: also token-level unlikelihood of earlier answer tokens on each fixed point (against loops), this weight
    w_seq: float = 0.0  # > 0: also sequence-level unlikelihood on one of the campaign's negatives a step (the student's
    # own loop answers the collapse guard dropped: NEGATIVES), this weight
    w_kl: float = 0.0  # > 0: also KL(base || student) on each fixed point's positions (the adapter off: the base), this weight


TEACHERS = ("base", "student")

LR_FLOOR = 0.1  # the decayed learning rate's end, as a share of lr


def lr_factor(st: Settings, step: int) -> float:
    """The learning rate at optimizer step ``step`` (0-based) as a share of ``st.lr``: a linear
    warm-up over ``warmup`` steps, then 1 (``decay_steps`` 0) or a cosine from 1 at step ``warmup``
    to LR_FLOOR at ``decay_steps``, LR_FLOOR after it.

    >>> st = Settings(warmup=10, decay_steps=110)
    >>> [round(lr_factor(st, s), 3) for s in (0, 9, 60, 110, 500)]
    [0.1, 1.0, 0.55, 0.1, 0.1]
    """
    if step + 1 < st.warmup:
        return (step + 1) / st.warmup
    if st.decay_steps <= 0:
        return 1.0
    t = min(1.0, max(0.0, (step - st.warmup) / max(1, st.decay_steps - st.warmup)))
    return LR_FLOOR + (1 - LR_FLOOR) * 0.5 * (1 + math.cos(math.pi * t))


@dataclass
class Campaign:
    root: Path
    settings: Settings
    model: str = "bundled"
    shards: list[dict] = field(default_factory=list)
    run: str = RUN  # the training run's folder: "run", or another recipe's (``use_recipe``)
    manifest_settings: Settings | None = None  # a recipe's campaign: the manifest's own (what save_manifest writes)

    @property
    def items(self) -> int:
        return sum(s["items"] for s in self.shards)

    @property
    def run_dir(self) -> Path:
        return self.root / self.run


RECIPE = "recipe.json"  # in a run's folder: its training settings that differ from the manifest's
ORIGIN = "origin.json"  # in a run's folder started from another run's state (``start_from``): where it started


def use_recipe(c: Campaign, run: str, changes: dict[str, Any] | None = None) -> Campaign:
    """Train in the run folder ``run`` with the manifest's training settings changed by
    ``changes`` (TRAIN_KEYS only): a recipe compared on the same shards, its own state, metrics and
    learning curve. The changes are kept in the folder's recipe.json on first use; a later use must
    give none or the same."""
    if not re.fullmatch(r"run[A-Za-z0-9_.-]*", run):
        raise UsageError(f"a run folder's name starts with 'run' and has letters, digits, _ . - only, got {run!r}")
    changes = dict(changes or {})
    bad = set(changes) - set(TRAIN_KEYS)
    if bad:
        raise UsageError(f"a recipe changes training settings only ({', '.join(TRAIN_KEYS)}), not {', '.join(sorted(bad))}")
    kept_p = c.root / run / RECIPE
    kept = json.loads(kept_p.read_text()) if kept_p.is_file() else None
    if kept is not None and changes and changes != kept:
        raise UsageError(f"{kept_p} holds another recipe ({kept}); this run asked for {changes}")
    recipe = kept if kept is not None else changes
    types = {k: type(getattr(c.settings, k)) for k in recipe}
    settings = replace(c.settings, **{k: types[k](v) for k, v in recipe.items()})
    if settings.state_pick not in STATE_PICKS:
        raise UsageError(f"state_pick is one of {', '.join(STATE_PICKS)}, got {settings.state_pick!r}")
    if kept is None and recipe:
        kept_p.parent.mkdir(parents=True, exist_ok=True)
        kept_p.write_text(json.dumps(recipe) + "\n")
    return Campaign(c.root, settings, c.model, c.shards, run, c.manifest_settings or c.settings)


def open_campaign(root: str, settings: Settings | None = None, create: bool = False) -> Campaign:
    """The campaign in ``root`` (its manifest), or a new one with ``settings`` when ``create``."""
    p = Path(root) / MANIFEST
    if p.is_file():
        m = json.loads(p.read_text())
        known = {k: v for k, v in m["settings"].items() if k in Settings.__dataclass_fields__}
        return Campaign(Path(root), Settings(**known), m.get("model", "bundled"), m.get("shards", []))
    if not create:
        raise UsageError(f"no campaign in {root} (no {MANIFEST}): start one with `python -m cllm campaign run --dir {root}`")
    c = Campaign(Path(root), settings or Settings())
    if c.settings.teacher not in TEACHERS:
        raise UsageError(f"teacher is one of {', '.join(TEACHERS)}, got {c.settings.teacher!r}")
    save_manifest(c)
    return c


def save_manifest(c: Campaign) -> None:
    c.root.mkdir(parents=True, exist_ok=True)
    tmp = c.root / (MANIFEST + ".tmp")
    settings = c.manifest_settings or c.settings  # never a recipe's changes
    tmp.write_text(json.dumps({"model": c.model, "settings": asdict(settings), "shards": c.shards}, indent=1) + "\n")
    os.replace(tmp, c.root / MANIFEST)


def _source_rows(path: str) -> list[dict]:
    from decoding.io import read_prompts

    return read_prompts(path)


def source_answers(path: str) -> dict[str, str]:
    """The source's own answers by prompt id (GSM8K's {question, answer} rows: the id is the line
    number, as ``read_prompts`` gives it), calculator annotations (``<<48/2=24>>``) removed; a source
    without answers is a UsageError (the ``w_gt`` recipe needs them)."""
    from decoding.io import jsonl

    out = {}
    for ln, d in jsonl(path):
        if isinstance(d, dict) and isinstance(d.get("answer"), str):
            out[str(d.get("id", ln))] = re.sub(r"<<[^>]*>>", "", d["answer"]).strip()
    if not out:
        raise UsageError(f"w_gt: the source {path} has no answers (GSM8K rows {{question, answer}})")
    return out


def shard_rows(c: Campaign, k: int) -> list[dict]:
    """The source prompts of shard ``k``."""
    rows = _source_rows(c.settings.source)
    s = c.settings.shard_prompts
    return rows[k * s:(k + 1) * s]


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def read_shard(c: Campaign, k: int) -> list[dict]:
    """The items of finished shard ``k``; UsageError if its file is missing or not the manifest's."""
    e = c.shards[k]
    p = c.root / e["file"]
    if not p.is_file():
        raise UsageError(f"shard file {p} is missing")
    if _sha(p) != e["sha256"]:
        raise UsageError(f"shard file {p} does not match its checksum in {MANIFEST}")
    with gzip.open(p, "rt", encoding="utf-8") as f:
        items = [json.loads(line) for line in f if line.strip()]
    for d in items:
        err = check_item(d)
        if err:
            raise UsageError(f"{p}: item {d.get('id')!r} is not a CLLM item: {err}")
    return items


def collect_shard(c: Campaign, lm, say: Callable[[str], None] = print, stop: Callable[[], bool] = lambda: False,
                  teacher: str | dict = "base") -> dict | None:
    """Collect the next shard with batched Jacobi (``cllm.batch``) on ``lm`` as it is; its manifest
    entry (``teacher`` says whose trajectories: "base" or the student's run and step) when it is
    finished; a student's degenerate answers (``cllm.evaluate.degenerate``: a repetition loop) give
    no items (the entry counts them; training on its own loops would teach them), None when
    ``stop()`` cut it (the partial file keeps every prompt done so far) or the source has no
    prompts left."""
    from .batch import BatchedJacobi, Lane
    from .evaluate import degenerate

    st, k = c.settings, len(c.shards)
    rows = shard_rows(c, k)
    if not rows:
        say("the source has no prompts left")
        return None
    part = c.root / PARTIAL / f"shard-{k:05d}.jsonl"
    part.parent.mkdir(parents=True, exist_ok=True)
    done = _done_prompts(str(part))
    todo = [r for r in rows if r["id"] not in done]
    t0 = time.perf_counter()
    eos = set(lm.eos_token_ids)
    lanes = (Lane(r, lm.encode(r["prompt"], chat=st.chat), st.n, st.max_new_tokens, eos, st.seed) for r in todo)
    bj = BatchedJacobi(lm, st.n, st.max_new_tokens, st.seed, st.lanes)
    order = [r["id"] for r in todo]
    ready: dict[str, Any] = {}
    stats = {"tokens": 0, "steps": 0, "items": 0}
    with open(part, "a", encoding="utf-8") as f:
        for ln in bj.run(lanes):
            ready[ln.row["id"]] = ln
            stats["tokens"] += len(ln.output) - 1
            stats["steps"] += ln.steps
            while order and order[0] in ready:  # write in source order: a resumed shard equals an uncut one
                w = ready.pop(order.pop(0))
                got = w.items(w.row["category"], st.chat, lm.model_id)
                if teacher != "base" and degenerate(w.output):  # a student's repetition loop: the collapse guard
                    got = []
                    add_negatives(c, [{"prompt_id": str(w.row["id"]), "prompt_ids": w.prompt_ids, "answer_ids": list(w.output)}])
                f.write("".join(json.dumps(d) + "\n" for d in got))
                stats["items"] += len(got)
                f.flush()
                done.add(w.row["id"])
            if stop():
                break
    secs = time.perf_counter() - t0
    if len(done) < len(rows):
        say(f"shard {k}: {len(done)}/{len(rows)} prompts collected ({secs:.0f} s this run); run again to go on")
        return None
    lines = part.read_text(encoding="utf-8").splitlines(keepends=True)
    out = _write_shard(c, k, lines)
    entry = _shard_entry(k, rows, [json.loads(x) for x in lines], out, teacher)
    c.shards.append(entry)
    save_manifest(c)
    part.unlink()
    say(f"shard {k}: {len(rows)} prompts, {entry['items']} items -> {out}; this run collected {len(todo)} prompts, "
        f"{stats['items']} items, {stats['tokens']} tokens in {stats['steps']} steps "
        f"({secs:.0f} s, {secs / max(1, stats['items']):.2f} s/item)")
    return entry


def _shard_entry(k: int, rows: list[dict], items: list[dict], out: Path, teacher: str | dict) -> dict:
    """A finished shard's manifest entry (a student's shard counts the degenerate answers it dropped)."""
    dropped = len({r["id"] for r in rows} - {d["prompt_id"] for d in items})
    return {"shard": k, "file": f"{SHARDS}/{out.name}", "prompt_ids": [r["id"] for r in rows], "items": len(items),
            **({"dropped_degenerate": dropped} if teacher != "base" else {}),
            "answer_tokens": sum(len(d["fixed_point"]) for d in items),
            "sha256": _sha(out), "bytes": out.stat().st_size, "collected": time.strftime("%Y-%m-%d"), "teacher": teacher}


def read_negatives(c: Campaign) -> list[dict]:
    """The campaign's negatives (``NEGATIVES``): the student's loop answers, one per prompt, in the
    order they were added; [] where there are none."""
    p = c.root / NEGATIVES
    if not p.is_file():
        return []
    with gzip.open(p, "rt", encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


def add_negatives(c: Campaign, rows: list[dict]) -> int:
    """Appends loop answers ({prompt_id, prompt_ids, answer_ids}) to ``NEGATIVES``, once per prompt
    (a prompt already there is left: a resumed collection or a second guard adds nothing); the
    number added."""
    have = read_negatives(c)
    ids = {r["prompt_id"] for r in have}
    new = [r for r in rows if r["prompt_id"] not in ids and not ids.add(r["prompt_id"])]
    if new:
        c.root.mkdir(parents=True, exist_ok=True)
        _write_gz(c.root / NEGATIVES, [json.dumps(r) + "\n" for r in have + new])
    return len(new)


def _write_shard(c: Campaign, k: int, lines: list[str]) -> Path:
    """Shard ``k``'s file from its JSON lines (deterministic gzip: the same lines, the same bytes)."""
    (c.root / SHARDS).mkdir(parents=True, exist_ok=True)
    return _write_gz(c.root / SHARDS / f"shard-{k:05d}.jsonl.gz", lines)


def _write_gz(out: Path, lines: list[str]) -> Path:
    """``lines`` gzipped to ``out`` deterministically (no time or name in the header: the same lines, the same bytes)."""
    with open(out, "wb") as raw, gzip.GzipFile(fileobj=raw, mode="wb", mtime=0, filename="") as gz:
        gz.write("".join(lines).encode("utf-8"))
    return out


def guard_shards(c: Campaign) -> int:
    """Apply the collapse guard of ``collect_shard`` to a student's shards collected before it
    existed: the items of its degenerate answers removed, the file and manifest entry rewritten
    (idempotent). The number of answers dropped."""
    from .evaluate import degenerate

    total = 0
    for k, e in enumerate(c.shards):
        if e.get("teacher", "base") == "base":
            continue
        items = read_shard(c, k)
        loops = [degenerate(d["answer_ids"]) for d in items]
        keep = [d for d, bad in zip(items, loops) if not bad]
        add_negatives(c, [{"prompt_id": d["prompt_id"], "prompt_ids": d["prompt_ids"][:d["prompt_len"]],
                           "answer_ids": d["answer_ids"]} for d, bad in zip(items, loops) if bad and d["block"] == 0])
        dropped = len({d["prompt_id"] for d in items} - {d["prompt_id"] for d in keep})
        if dropped:
            out = _write_shard(c, k, [json.dumps(d) + "\n" for d in keep])
            e.update(items=len(keep), answer_tokens=sum(len(d["fixed_point"]) for d in keep), sha256=_sha(out),
                     bytes=out.stat().st_size, dropped_degenerate=e.get("dropped_degenerate", 0) + dropped)
            total += dropped
    if total:  # nothing dropped: the manifest is left as it is
        save_manifest(c)
    return total


# --- the learning curve ---------------------------------------------------------------------------

def gt_order(st: Settings, answers: dict[str, str] | None = None) -> list[dict]:
    """The source's answered problems in the order ``gt_per_step`` takes them (``Trainer._gt_pairs``):
    one permutation seeded by the settings' seed, cycled through from step 0. ``answers``: the
    source's (``source_answers``), where the caller has read them already."""
    answers = answers if answers is not None else source_answers(st.source)
    rows = [r for r in _source_rows(st.source) if r["id"] in answers]
    random.Random(st.seed * 1_000_003 + 97).shuffle(rows)
    return rows


def unseen_rows(c: Campaign, count: int, max_step: int) -> list[dict]:
    """A selection set: ``count`` problems of the campaign's source that training up to step
    ``max_step`` never saw, the last ones of ``gt_order`` (taken last) that are in no shard of any
    campaign folder beside this one (they all read the source from its start), checked against the
    places steps 0..``max_step`` took (``gt_per_step`` of this run, at least 2: every recipe's so far).
    Choosing a point on these leaves the held-out problems held out. (id, prompt, reference number)"""
    st = c.settings
    answers = source_answers(st.source)
    in_shards = {str(i) for d in campaign_folders(str(c.root.parent)) + [c.root]
                 for sh in json.loads((d / MANIFEST).read_text()).get("shards", []) for i in sh["prompt_ids"]}
    order = gt_order(st, answers)
    taken = {r["id"] for r in order[:(max_step + 1) * max(2, st.gt_per_step)]}
    tail = [r for r in order if r["id"] not in in_shards and final_number(answers[r["id"]]) is not None][-count:]
    if len(tail) < count or any(r["id"] in taken for r in tail):
        raise UsageError(f"{st.source} has no {count} problems left that {max_step + 1} steps of ground-truth "
                         "answers and the shards never used: score the held-out problems instead")
    return [{**r, "reference": final_number(answers[r["id"]])} for r in tail]


def heldout_rows(c: Campaign, skip: int = 0, count: int = 0) -> list[dict]:
    """The held-out problems of the learning curve (id, prompt, reference number); with ``skip`` /
    ``count``, the ``count`` problems after the first ``skip`` of the held-out category instead
    (``score``: the evaluation's problems beyond the curve's)."""
    st = c.settings
    rows = []
    with open(st.heldout, encoding="utf-8") as f:
        for line in f:
            d = json.loads(line)
            if d.get("category") != st.heldout_category:
                continue
            ref = (d.get("reference") or [""])[0]
            rows.append({"id": str(d["question_id"]), "category": d["category"], "prompt": d["turns"][0],
                         "reference": final_number(ref)})
    return rows[skip:skip + (count or st.curve_prompts)]


def jacobi_lanes(lm, prompts: list[list[int]], st: Settings,
                 tick: Callable[[], Any] | None = None) -> list[tuple[list[int], int, int]]:
    """Per prompt: the greedy answer of ``lm`` by batched Jacobi (its greedy AR answer), the tokens
    its steps committed and its steps. ``tick()``: called as each prompt is finished (progress)."""
    from .batch import BatchedJacobi, Lane

    eos = set(lm.eos_token_ids)
    lanes = [Lane({"id": str(i)}, p, st.n, st.max_new_tokens, eos, st.seed) for i, p in enumerate(prompts)]
    for _ in BatchedJacobi(lm, st.n, st.max_new_tokens, st.seed, st.lanes).run(lanes):
        if tick:
            tick()
    return [(ln.output, len(ln.output) - 1, ln.steps) for ln in lanes]


def jacobi_answers(lm, prompts: list[list[int]], st: Settings) -> tuple[list[list[int]], int, int]:
    """Greedy answers of ``lm`` by batched Jacobi (they are its greedy AR answers), with the tokens
    committed by steps and the steps (their ratio: Jacobi tokens/step)."""
    got = jacobi_lanes(lm, prompts, st)
    return [a for a, _, _ in got], sum(t for _, t, _ in got), sum(s for _, _, s in got)


def clean_rates(answers: list[list[int]], lanes: list[list[int]], base_lanes: list[list[int]]) -> dict[str, Any]:
    """Jacobi tokens/step without the degenerate answers (a repetition loop is the easiest text to
    fast-forward, so a model that loops more shows a higher tokens/step that is no gain): the model's
    on its non-degenerate answers, the base's on the same problems, and how many problems that is.
    ``lanes`` / ``base_lanes``: per problem [tokens, steps]."""
    from .evaluate import degenerate

    keep = [i for i, a in enumerate(answers) if not degenerate(a)]
    rate = lambda ls: round(sum(ls[i][0] for i in keep) / max(1, sum(ls[i][1] for i in keep)), 4)
    return {"clean_prompts": len(keep), "clean_jacobi_tokens_per_step": rate(lanes),
            "clean_base_jacobi_tokens_per_step": rate(base_lanes)}


def cached_base(path: Path, rows: list[dict]) -> dict[str, Any] | None:
    """The base model's side of a curve point kept in ``path``, if it is for these problems (else None:
    ``curve_point`` computes it again)."""
    base = json.loads(path.read_text()) if path.is_file() else None
    return base if base and base.get("ids") == [r["id"] for r in rows] and "lanes" in base else None


def curve_point(c: Campaign, lm, base_off: Callable[[], Any], rows: list[dict], untrained: bool = False,
                base_lm=None, base_name: str = "base_eval.json", tick: Callable[[], Any] | None = None) -> dict[str, Any]:
    """One learning-curve point of the model in ``lm`` (a LoRA model; ``base_off()`` a context
    that switches the adapter off, or ``base_lm`` the base model itself beside a merged ``lm``):
    Jacobi tokens/step, answer accuracy, identical share with the base's answers, the base's
    perplexity of the answers (vs of its own), degenerate share. The base's side is computed once
    and kept in run/``base_name``; ``untrained``: the model is the base (a fresh adapter is zero), so
    its figures are the base's. ``tick``: ``jacobi_lanes``'s progress."""
    from .evaluate import answer_nll, degenerate, drift

    st = c.settings
    blm = base_lm or lm
    prompts = [lm.encode(r["prompt"], chat=st.chat) for r in rows]
    base_file = c.root / RUN / base_name  # the base model's side: the same for every recipe
    base = cached_base(base_file, rows)
    if base is None:
        with base_off():
            got = jacobi_lanes(blm, prompts, st, tick)
            answers = [a for a, _, _ in got]
            nll = [answer_nll(blm, p, a) for p, a in zip(prompts, answers)]
        base = {"ids": [r["id"] for r in rows], "answers": answers, "nll": nll, "tokens": sum(t for _, t, _ in got),
                "steps": sum(s for _, _, s in got), "lanes": [[t, s] for _, t, s in got]}
        base_file.parent.mkdir(parents=True, exist_ok=True)
        base_file.write_text(json.dumps(base) + "\n")
    if untrained:
        answers, lanes, nll = base["answers"], base["lanes"], [tuple(x) for x in base["nll"]]
    else:
        got = jacobi_lanes(lm, prompts, st, tick)
        answers, lanes = [a for a, _, _ in got], [[t, s] for _, t, s in got]
        with base_off():
            nll = [answer_nll(blm, p, a) for p, a in zip(prompts, answers)]
    ppl = lambda pairs: math.exp(sum(x for x, _ in pairs) / max(1, sum(k for _, k in pairs)))
    correct = lambda ans: sum(final_number(lm.tokenizer.decode(a, skip_special_tokens=True)) == r["reference"]
                              for a, r in zip(ans, rows)) / len(rows)
    d = [drift(b, a) for b, a in zip(base["answers"], answers)]
    toks, steps = sum(t for t, _ in lanes), sum(s for _, s in lanes)
    return {"prompts": len(rows), "jacobi_tokens_per_step": round(toks / max(1, steps), 4),
            "base_jacobi_tokens_per_step": round(base["tokens"] / max(1, base["steps"]), 4),
            "accuracy": round(correct(answers), 4), "base_accuracy": round(correct(base["answers"]), 4),
            "identical_share": round(sum(x["identical_share"] for x in d) / len(d), 4),
            "base_ppl_cllm": round(ppl(nll), 4), "base_ppl_base": round(ppl([tuple(x) for x in base["nll"]]), 4),
            "degenerate_share": round(sum(degenerate(a) for a in answers) / len(rows), 4),
            "base_degenerate_share": round(sum(degenerate(a) for a in base["answers"]) / len(rows), 4),
            # which problems loop: the student's and the base's (whether it inherits the base's loops or makes its own)
            "degenerate_ids": [r["id"] for r, a in zip(rows, answers) if degenerate(a)],
            "base_degenerate_ids": [r["id"] for r, a in zip(rows, base["answers"]) if degenerate(a)],
            # the loop rule (``cllm.evaluate.DEGENERATE_MAX_PERIOD``) and the old one's count (periods <= 16)
            "degenerate_periods": "any", **short_loops(rows, answers, base["answers"]),
            **clean_rates(answers, lanes, base["lanes"]), "answers": answers}


def short_loops(rows: list[dict], answers: list[list[int]], base_answers: list[list[int]]) -> dict[str, Any]:
    """The degenerate shares and ids by the rule before 2026-12-06 (periods 1..16: it missed loops
    of a sentence or paragraph), to compare a point with the rows written before."""
    from .evaluate import SHORT_PERIOD, degenerate

    ids = lambda ans: [r["id"] for r, a in zip(rows, ans) if degenerate(a, max_period=SHORT_PERIOD)]
    return {"degenerate_share_p16": round(len(ids(answers)) / len(rows), 4), "degenerate_ids_p16": ids(answers),
            "base_degenerate_share_p16": round(len(ids(base_answers)) / len(rows), 4),
            "base_degenerate_ids_p16": ids(base_answers)}


def read_curve(root: str, run: str = RUN) -> list[dict]:
    """The learning-curve rows of a campaign folder's run (empty if none)."""
    p = Path(root) / run / "curve.jsonl"
    if not p.is_file():
        return []
    return [json.loads(x) for x in p.read_text().splitlines() if x.strip()]


def campaign_folders(data: str) -> list[Path]:
    """The campaign folders under ``data``: ``cllm`` (the main one) first, then every ``cllm-*``
    with a manifest (another campaign: e.g. ``cllm-op``, taught by its student), by name."""
    d = Path(data)
    others = sorted(p for p in d.glob("cllm-*") if (p / MANIFEST).is_file())
    return ([d / "cllm"] if (d / "cllm" / MANIFEST).is_file() else []) + others


def list_runs(root: str) -> list[dict[str, Any]]:
    """The campaign folder's training runs that have a learning curve: the main run first, then the
    recipe runs by name, each with its recipe (the training settings it changed), the run it started
    from (``start_from``; "" for none) and its curve's last point."""
    base = Path(root)
    names = sorted(p.name for p in base.glob("run*") if p.is_dir() and re.fullmatch(r"run[A-Za-z0-9_.-]*", p.name))
    out = []
    for name in sorted(names, key=lambda n: (n != RUN, n)):
        curve = read_curve(root, name)
        if not curve:
            continue
        read = lambda f: json.loads((base / name / f).read_text()) if (base / name / f).is_file() else {}
        try:
            recipe, origin = read(RECIPE), read(ORIGIN)
        except ValueError:
            recipe, origin = {}, {}
        out.append({"run": name, "recipe": recipe if isinstance(recipe, dict) else {},
                    "from": origin.get("from", "") if isinstance(origin, dict) else "", "last": curve[-1]})
    return out


def status_lines(c: Campaign) -> list[str]:
    """What ``campaign status`` prints: the campaign (teacher, shards, items), each shard (items, whose
    trajectories, the degenerate answers a student's shard dropped: the collapse shows there first),
    the run's saved position and its last curve points (with the figures without degenerate answers)."""
    pct = lambda x: f"{x:.0%}" if isinstance(x, (int, float)) else "-"
    out = [f"{c.root}: {len(c.shards)} shards, {c.items:,} items, trajectories of the {c.settings.teacher}"
           f"{' (on-policy)' if c.settings.teacher == 'student' else ''}; run {c.run}"]
    for e in c.shards:
        t = e.get("teacher", "base")
        who = f"student {t.get('run')} at step {t.get('step')}" if isinstance(t, dict) else "base"
        drop = f", {e.get('dropped_degenerate', 0)} of {c.settings.shard_prompts} answers degenerate (dropped)" \
            if isinstance(t, dict) else ""
        out.append(f"  shard {e['shard']}: {e['items']} items, {e.get('answer_tokens', 0):,} answer tokens, {who}{drop}")
    meta = c.run_dir / PORTABLE / "state.json"
    if meta.is_file():
        m = json.loads(meta.read_text())
        out.append(f"  saved: step {m.get('step')}, {m.get('items_seen', 0):,} items trained, data position "
                   f"{m.get('pos')} ({m.get('saved', '')})")
    kept = kept_points(c.run_dir)
    if kept:
        out.append(f"  adapters kept at curve steps {', '.join(map(str, kept))} (campaign export --step N)")
    for p in read_curve(str(c.root), c.run)[-5:]:
        clean = (f"; without degenerate {p['clean_jacobi_tokens_per_step']:.3f} (base {p.get('clean_base_jacobi_tokens_per_step', 0):.3f})"
                 f" on {p['clean_prompts']}" if p.get("clean_prompts") else "")
        out.append(f"  curve step {p.get('step')} ({p.get('items_seen', 0):,} items): Jacobi "
                   f"{p.get('jacobi_tokens_per_step', 0):.3f} tokens/step (base {p.get('base_jacobi_tokens_per_step', 0):.3f}){clean}; "
                   f"degenerate {pct(p.get('degenerate_share'))} (base {pct(p.get('base_degenerate_share'))}), "
                   f"accuracy {pct(p.get('accuracy'))} (base {pct(p.get('base_accuracy'))})")
    return out


# --- training -------------------------------------------------------------------------------------

def _tuples(x):
    """random.Random's state read back from JSON (lists -> the tuples setstate wants)."""
    return tuple(_tuples(v) for v in x) if isinstance(x, list) else x


TRAIN_KEYS = ("lora_r", "lora_alpha", "lr", "warmup", "w_ar", "items_per_step", "states_per_item", "grad_clip", "seed",
              "epochs", "decay_steps", "cons_window", "state_pick", "w_gt", "gt_per_step", "w_ul", "w_seq",
              "w_kl")
SHAPE_KEYS = ("lora_r", "lora_alpha")  # what a run started from another's weights (``start_from``) must share


class Trainer:
    """LoRA consistency training over the campaign's shards in manifest order (the cheap step:
    ``losses.item_losses_cached``), ``items_per_step`` items per AdamW step (gradients summed,
    each item's loss divided by that count). Warm-up, then a constant learning rate (the data grows
    from run to run, so no schedule can know its end) or, with ``decay_steps``, a cosine decay
    (``lr_factor``) for a recipe that knows its end; ``epochs`` passes over the collected shards,
    each shard's items in a permutation seeded by (seed, shard, pass), before the next shard is
    collected (a shard collected after the last pass is trained on once, in that pass)."""

    def __init__(self, c: Campaign, lm):
        import torch

        from .train import add_lora

        st = c.settings
        self.c, self.lm, self.st = c, lm, st
        torch.manual_seed(st.seed)
        self.model = add_lora(lm.model, st.lora_r, st.lora_alpha)
        self.named = {k: p for k, p in self.model.named_parameters() if p.requires_grad}
        self.params = list(self.named.values())
        self.opt = torch.optim.AdamW(self.params, lr=st.lr, weight_decay=0.0)
        self.sched = torch.optim.lr_scheduler.LambdaLR(self.opt, lambda s: lr_factor(st, s))
        self.rng = random.Random(st.seed)
        self.step, self.items_seen, self.seconds, self.pos = 0, 0, 0.0, [0, 0]
        self.epoch = 0  # the pass over the shards (``epochs``)
        self.resumed_from = ""  # "state" (exact), "portable" (the committed checkpoint) or "" (a fresh start)
        self._shard: tuple[tuple[int, int], list[dict]] | None = None
        self._negatives: list[dict] | None = None
        self._answers: dict[str, str] | None = None  # the source's answers by prompt id (``w_gt``)
        self._gt_order: list[tuple[str, str]] | None = None  # (question, answer) of the source (``gt_per_step``)
        self.restore()

    @property
    def state_path(self) -> Path:
        return self.c.run_dir / "state.pt"

    @property
    def portable_dir(self) -> Path:
        """The committed checkpoint (``save``): the LoRA weights in int8 with a scale per row or
        column (``quantize_rows``), gzipped: 4.6 MB at r 16 on the bundled model, under the repo's
        5 MB a file (in bfloat16 they took 9.8; a larger rank is split, ``write_portable_weights``),
        and the position, for a checkout without state.pt."""
        return self.c.run_dir / PORTABLE

    def _check_config(self, config: dict, where: Path) -> None:
        default = lambda k: Settings.__dataclass_fields__[k].default  # a key added after the file was saved
        got = {k: config.get(k, default(k)) for k in TRAIN_KEYS}
        diff = {k: (got[k], getattr(self.st, k)) for k in TRAIN_KEYS if got[k] != getattr(self.st, k)}
        if diff:
            raise UsageError(f"{where} was trained with other settings: " + ", ".join(f"{k} {a} (now {b})" for k, (a, b) in diff.items()))

    def restore(self) -> None:
        """Resume from run/state.pt (exact: fp32 weights, AdamW moments, RNG states) or, on a machine
        without it, from the committed portable checkpoint (the weights rounded to bfloat16, AdamW's
        moments start again from zero, the data position and RNG states as saved)."""
        import torch

        if not self.state_path.is_file():
            self._restore_portable()
            return
        s = torch.load(self.state_path, weights_only=False)
        self._check_config(s["config"], self.state_path)
        with torch.no_grad():
            for k, v in s["params"].items():
                self.named[k].copy_(v)
        opt = s["opt"]
        for st in opt["state"].values():
            for k, v in st.items():
                if torch.is_tensor(v) and v.dtype == torch.bfloat16:
                    st[k] = v.float()
        self.opt.load_state_dict(opt)
        self.sched.load_state_dict(s["sched"])
        self.rng.setstate(s["rng"])
        torch.set_rng_state(s["torch_rng"])
        self.step, self.items_seen, self.seconds, self.pos = s["step"], s["items_seen"], s["seconds"], list(s["pos"])
        self.epoch = s.get("epoch", 0)
        self._set_lr()
        self.resumed_from = "state"

    def _set_lr(self) -> None:
        """The learning rate of the next step from the settings (a run started from another's state
        may have another lr or schedule)."""
        self.sched.base_lrs = [self.st.lr for _ in self.opt.param_groups]
        self.sched.last_epoch = self.step
        for g in self.opt.param_groups:
            g["lr"] = self.st.lr * lr_factor(self.st, self.step)

    def _restore_portable(self) -> None:
        import torch

        meta_p, w_p = self.portable_dir / "state.json", self.portable_dir / PORTABLE_WEIGHTS
        if not (meta_p.is_file() and w_p.is_file()):
            return
        meta = json.loads(meta_p.read_text(encoding="utf-8"))
        self._check_config(meta["config"], meta_p)
        weights = read_portable_weights(self.portable_dir)
        missing = set(self.named) - set(weights)
        if missing:
            raise UsageError(f"{self.portable_dir} lacks {len(missing)} of the model's LoRA tensors (another model or rank?)")
        with torch.no_grad():
            for k, p in self.named.items():
                p.copy_(dequantize_rows(weights[k], weights[k + SCALE]))
        self.rng.setstate(_tuples(meta["rng"]))
        torch.manual_seed(self.st.seed * 7919 + meta["step"])  # the torch RNG of state.pt is not kept
        self.step, self.items_seen, self.seconds, self.pos = meta["step"], meta["items_seen"], meta["seconds"], list(meta["pos"])
        self.epoch = meta.get("epoch", 0)
        self._set_lr()
        self.resumed_from = "portable"

    def _save_portable(self) -> None:
        d = self.portable_dir
        d.mkdir(parents=True, exist_ok=True)
        tensors = {}
        for k, v in self.named.items():
            q, scale = quantize_rows(v.detach())
            tensors[k], tensors[k + SCALE] = q, scale
        write_portable_weights(d, tensors)
        meta = {"config": {k: getattr(self.st, k) for k in TRAIN_KEYS}, "step": self.step, "items_seen": self.items_seen,
                "seconds": round(self.seconds, 2), "pos": list(self.pos), "epoch": self.epoch, "rng": self.rng.getstate(),
                "saved": time.strftime("%Y-%m-%d %H:%M")}
        (d / "state.tmp").write_text(json.dumps(meta), encoding="utf-8")
        os.replace(d / "state.tmp", d / "state.json")

    def save(self) -> None:
        """The state (atomically), the portable checkpoint and the loadable adapter."""
        import torch

        opt = self.opt.state_dict()
        small = {"state": {i: {k: (v.to(torch.bfloat16) if torch.is_tensor(v) and v.dim() else v) for k, v in st.items()}
                           for i, st in opt["state"].items()}, "param_groups": opt["param_groups"]}
        p = self.state_path
        p.parent.mkdir(parents=True, exist_ok=True)
        torch.save({"config": {k: getattr(self.st, k) for k in TRAIN_KEYS}, "step": self.step,
                    "items_seen": self.items_seen, "seconds": self.seconds, "pos": list(self.pos), "epoch": self.epoch,
                    "params": {k: v.detach().clone() for k, v in self.named.items()}, "opt": small,
                    "sched": self.sched.state_dict(), "rng": self.rng.getstate(), "torch_rng": torch.get_rng_state()},
                   p.with_suffix(".tmp"))
        os.replace(p.with_suffix(".tmp"), p)
        self._save_portable()
        self.write_adapter(self.c.run_dir / "adapter")

    def write_adapter(self, folder: Path, int8: bool = False) -> None:
        """The loadable adapter (fp16 LoRA weights, or int8 ones: ``save_model``) with its cllm.json: the campaign,
        run, recipe, position and settings, and the keys a ``cllm train`` folder has (items, steps,
        lr, ar_weight, local, lora_r, train_seconds) so that the CLLM page lists them alike."""
        from .train import save_model

        st = self.st
        recipe = {k: getattr(st, k) for k in TRAIN_KEYS
                  if self.c.manifest_settings is not None and getattr(st, k) != getattr(self.c.manifest_settings, k)}
        save_model(self.model, self.lm.tokenizer, str(folder), self.c.model, True,
                   {"base": self.c.model, "campaign": str(self.c.root), "run": self.c.run, "recipe": recipe,
                    "step": self.step, "items_seen": self.items_seen, "train_seconds": round(self.seconds, 1),
                    "items": self.items_seen, "steps": self.step, "lr": st.lr, "ar_weight": st.w_ar, "local": 0.0,
                    "lora_r": st.lora_r, "device": "cpu", "weights_from": self.resumed_from or "this process",
                    "settings": asdict(st), "weights": "int8" if int8 else "float16"}, int8=int8)

    def _items_of(self, k: int) -> list[dict]:
        if self._shard is None or self._shard[0] != (self.epoch, k):
            items = read_shard(self.c, k)
            random.Random(self.st.seed * 1_000_003 + k + 7_919 * self.epoch).shuffle(items)
            self._shard = ((self.epoch, k), items)
        return self._shard[1]

    def available(self) -> int:
        """Collected items not trained on yet: the rest of this pass and the passes to come."""
        k, i = self.pos
        rest = sum(s["items"] for s in self.c.shards[k:]) - i if k < len(self.c.shards) else 0
        return rest + max(0, self.st.epochs - 1 - self.epoch) * self.c.items

    def _take(self) -> dict:
        if self.pos[0] >= len(self.c.shards) and self.epoch + 1 < self.st.epochs:
            self.epoch, self.pos = self.epoch + 1, [0, 0]  # the next pass
        k, i = self.pos
        items = self._items_of(k)
        item = items[i]
        self.pos = [k + 1, 0] if i + 1 >= len(items) else [k, i + 1]
        return item

    def train_step(self) -> dict[str, Any]:
        """One AdamW step over the next ``items_per_step`` items; its metrics row."""
        import torch

        from .losses import item_losses_cached

        t0 = time.perf_counter()
        self.model.train()
        self.opt.zero_grad(set_to_none=True)
        m = self.st.items_per_step
        sums = ({"consistency": 0.0, "ar": 0.0, "total": 0.0} | ({"ul": 0.0} if self.st.w_ul else {})
                | ({"kl": 0.0} if self.st.w_kl else {}))
        tokens, gt = 0, []
        for _ in range(m):
            item = self._take()
            losses = item_losses_cached(self.model, item, self.rng, self.st.w_ar, self.st.states_per_item,
                                        self.st.cons_window, self.st.state_pick, self.st.w_ul, self.st.w_kl)
            if self.st.w_gt and not self.st.gt_per_step and item["block"] == 0:  # its answer, once per prompt and pass
                loss = self._gt_loss(item)
                losses["total"] = losses["total"] + self.st.w_gt * loss
                gt.append(float(loss.detach()))
            (losses["total"] / m).backward()
            for k in sums:
                sums[k] += float(losses[k].detach()) / m
            tokens += len(item["fixed_point"]) * (1 + min(self.st.states_per_item, len(item["states"])))
        if self.st.w_seq:
            sums["seq"] = self._seq_step()
            sums["total"] += self.st.w_seq * sums["seq"]
        for prompt, answer in self._gt_pairs() if self.st.w_gt and self.st.gt_per_step else []:
            loss = answer_ar_loss(self.model, prompt, answer)
            (self.st.w_gt * loss / self.st.gt_per_step).backward()
            gt.append(float(loss.detach()))
            sums["total"] += self.st.w_gt * gt[-1] / self.st.gt_per_step
        if self.st.grad_clip:
            torch.nn.utils.clip_grad_norm_(self.params, self.st.grad_clip)
        self.opt.step()
        self.sched.step()
        self.step += 1
        self.items_seen += m
        self.seconds += time.perf_counter() - t0
        if gt:  # the mean AR loss on the source's answers of this step
            sums["gt"] = sum(gt) / len(gt)
        row = {"step": self.step, "items_seen": self.items_seen, "epoch": self.epoch, **{k: round(v, 6) for k, v in sums.items()},
               "lr": self.sched.get_last_lr()[0], "block_tokens": tokens, "seconds": round(self.seconds, 2)}
        self.c.run_dir.mkdir(parents=True, exist_ok=True)
        with open(self.c.run_dir / "metrics.jsonl", "a", encoding="utf-8") as f:
            f.write(json.dumps(row) + "\n")
        return row

    def _seq_step(self) -> float:
        """``w_seq``: sequence-level unlikelihood on the campaign's negative number ``step`` (cycled),
        its gradient added; the loss."""
        from .losses import sequence_unlikelihood

        if self._negatives is None:
            self._negatives = read_negatives(self.c)
            if not self._negatives:
                raise UsageError(f"recipe w_seq needs negatives: {self.c.root / NEGATIVES} holds none (campaign guard or a "
                                 "student's collection writes the loop answers it drops there)")
        neg = self._negatives[self.step % len(self._negatives)]
        loss = sequence_unlikelihood(self.model, neg["prompt_ids"], neg["answer_ids"])
        (self.st.w_seq * loss).backward()
        return float(loss.detach())

    def _gt_loss(self, item: dict):
        """The AR loss on the source's answer to the prompt of ``item`` (``w_gt``; train_step asks on
        a prompt's first block only: once per prompt and pass)."""
        text = self._source_answers().get(item["prompt_id"])
        if text is None:
            raise UsageError(f"w_gt: the source {self.c.settings.source} has no answer for prompt {item['prompt_id']}")
        return answer_ar_loss(self.model, item["prompt_ids"][:item["prompt_len"]], self._answer_ids(text))

    def _source_answers(self) -> dict[str, str]:
        if self._answers is None:
            self._answers = source_answers(self.st.source)
        return self._answers

    def _answer_ids(self, text: str) -> list[int]:
        """An answer's tokens as the model writes them after the prompt: the text, then end of turn."""
        return [int(t) for t in self.lm.tokenizer(text, add_special_tokens=False)["input_ids"]] + self.lm.eos_token_ids[:1]

    def _gt_pairs(self) -> list[tuple[list[int], list[int]]]:
        """This step's ``gt_per_step`` (prompt ids, answer ids) from the whole source: places
        step * G .. step * G + G - 1 of one seeded order of its answered problems, cycling (so a
        resumed run takes the same ones, with no state of its own)."""
        st = self.st
        if self._gt_order is None:
            answers = self._source_answers()
            self._gt_order = [(r["prompt"], answers[r["id"]]) for r in gt_order(st, answers)]
        picks = [self._gt_order[(self.step * st.gt_per_step + j) % len(self._gt_order)] for j in range(st.gt_per_step)]
        return [(self.lm.encode(q, chat=st.chat), self._answer_ids(a)) for q, a in picks]

    def curve(self, rows: list[dict]) -> dict[str, Any]:
        """A learning-curve point now, appended to run/curve.jsonl."""
        self.model.eval()
        t0 = time.perf_counter()
        p = curve_point(self.c, self.lm, self.model.disable_adapter, rows, untrained=self.step == 0)
        p.pop("answers")  # the curve's 16: a row per point, kept small
        point = {"step": self.step, "items_seen": self.items_seen, "train_seconds": round(self.seconds, 1), **p,
                 "eval_seconds": round(time.perf_counter() - t0, 1), "date": time.strftime("%Y-%m-%d %H:%M")}
        self.c.run_dir.mkdir(parents=True, exist_ok=True)
        with open(self.c.run_dir / "curve.jsonl", "a", encoding="utf-8") as f:
            f.write(json.dumps(point) + "\n")
        return point


def start_from(c: Campaign, source: str, say: Callable[[str], None] = print) -> bool:
    """Start the run ``c.run`` from run ``source``'s saved state (its weights, AdamW moments, data
    position, metrics and learning curve, copied), so that a recipe that changes how training goes
    on (``epochs``, ``decay_steps``, lr, w_ar ...) continues a run without repeating its steps; the
    LoRA shape (SHAPE_KEYS) must be the same, or a larger rank at the same scale (``_growable``:
    the adapter grows, its output unchanged at the start). ``source`` with a "/" is a run folder of
    another campaign (e.g. data/cllm/run-gs): its weights, optimizer and curve go on here, and the
    data position starts at this campaign's first shard. True when it copied; False when the run already
    started from ``source`` (it resumes its own state); UsageError for anything else."""
    import torch

    src, dst = (Path(source) if "/" in source else c.root / source), c.run_dir
    foreign = src.resolve().parent != c.root.resolve()  # another campaign's run: its data position is not ours
    if src.resolve() == dst.resolve():
        raise UsageError(f"a run cannot start from itself ({source})")
    origin = dst / ORIGIN
    if (dst / "state.pt").is_file() or (dst / PORTABLE / "state.json").is_file():
        if origin.is_file() and json.loads(origin.read_text())["from"] == source:
            return False
        raise UsageError(f"{dst} already has its own training state: it cannot start from {source}")
    if src.parent.name == POINTS and (src / "cllm.json").is_file():
        return _start_from_point(c, source, src, say)
    state_p, meta_p = src / "state.pt", src / PORTABLE / "state.json"
    state = torch.load(state_p, weights_only=False) if state_p.is_file() else None
    meta = json.loads(meta_p.read_text()) if meta_p.is_file() else None
    if state is None and meta is None:
        raise UsageError(f"run {source} has no saved state ({state_p} or {meta_p})")
    saved = (state or meta)["config"]
    r_old, r_new = saved.get("lora_r"), c.settings.lora_r
    grow = _growable(saved, c.settings)
    bad = {k: (saved.get(k), getattr(c.settings, k)) for k in SHAPE_KEYS if saved.get(k) != getattr(c.settings, k)}
    if bad and not grow:
        raise UsageError(f"run {source} has another LoRA shape: " + ", ".join(f"{k} {a} (this recipe {b})" for k, (a, b) in bad.items())
                         + " (a larger rank with the same lora_alpha / lora_r continues it: the new rank's part starts at zero)")
    config = {k: getattr(c.settings, k) for k in TRAIN_KEYS}
    if foreign:
        state, meta = [None if x is None else {**x, "pos": [0, 0], "epoch": 0} for x in (state, meta)]
    (dst / PORTABLE).mkdir(parents=True, exist_ok=True)
    if state is not None:
        if grow:
            state = _grow_state(state, r_old, r_new, c.settings.seed)
        torch.save({**state, "config": config}, dst / "state.pt")
    if meta is not None:
        w = read_portable_weights(src / PORTABLE)
        write_portable_weights(dst / PORTABLE, _grow_portable(w, r_old, r_new, c.settings.seed) if grow else w)
        (dst / PORTABLE / "state.json").write_text(json.dumps({**meta, "config": config}), encoding="utf-8")
    for name in ("metrics.jsonl", "curve.jsonl"):
        if (src / name).is_file():
            (dst / name).write_bytes((src / name).read_bytes())
    step = (state or meta)["step"]
    origin.write_text(json.dumps({"from": source, "step": step, "items_seen": (state or meta)["items_seen"],
                                  **({"lora_r_from": r_old} if grow else {}),
                                  **({"campaign": str(src.parent)} if foreign else {})}) + "\n")
    say(f"run {c.run} starts from run {source} at step {step}")
    return True


def _start_from_point(c: Campaign, source: str, src: Path, say: Callable[[str], None]) -> bool:
    """``start_from`` a curve point's kept adapter (RUN/points/step-NNNNN, int8): its weights and
    step go on in another campaign's run as a portable checkpoint (AdamW's moments start again from
    zero, as on a machine without state.pt; the data position at this campaign's first shard), with
    the source run's metrics and curve up to that step. Its own campaign is refused: a point keeps
    no data position."""
    meta = json.loads((src / "cllm.json").read_text(encoding="utf-8"))
    run_dir = src.parent.parent
    if run_dir.parent.resolve() == c.root.resolve():
        raise UsageError(f"{source} is a point of this campaign's own run, and a kept point keeps no data position: "
                         "start a new campaign folder from it (--dir NEW --from it), or --from the run itself")
    saved = {"lora_r": meta.get("lora_r"), "lora_alpha": meta.get("settings", {}).get("lora_alpha")}
    bad = {k: (saved[k], getattr(c.settings, k)) for k in SHAPE_KEYS if saved.get(k) != getattr(c.settings, k)}
    if bad:
        raise UsageError(f"{source} has another LoRA shape: " + ", ".join(f"{k} {a} (this recipe {b})" for k, (a, b) in bad.items()))
    weights = read_portable_weights(src)
    if not weights:
        raise UsageError(f"{source} holds no int8 weights ({WEIGHTS})")
    # peft's saved names (…lora_A.weight) -> the trainer's parameter names (…lora_A.default.weight)
    named = {re.sub(r"\.(lora_[AB])\.weight", r".\1.default.weight", k): v for k, v in weights.items()}
    dst = c.run_dir
    write_portable_weights(dst / PORTABLE, named)
    step = int(meta["step"])
    state = {"config": {k: getattr(c.settings, k) for k in TRAIN_KEYS}, "step": step, "items_seen": int(meta["items_seen"]),
             "seconds": float(meta.get("train_seconds", 0.0)), "pos": [0, 0], "epoch": 0,
             "rng": random.Random(c.settings.seed * 7919 + step).getstate(), "saved": time.strftime("%Y-%m-%d %H:%M")}
    (dst / PORTABLE / "state.json").write_text(json.dumps(state), encoding="utf-8")
    for name in ("metrics.jsonl", "curve.jsonl"):
        (dst / name).write_text(_rows_upto(run_dir / name, step), encoding="utf-8")
    (dst / ORIGIN).write_text(json.dumps({"from": source, "step": step, "items_seen": state["items_seen"], "point": True,
                                          "campaign": str(run_dir.parent)}) + "\n")
    say(f"run {c.run} starts from {source} (the kept adapter of step {step}; AdamW's moments start from zero)")
    return True


def _growable(saved: dict, st: Settings) -> bool:
    """Whether a run saved with LoRA shape ``saved`` can go on at ``st``'s larger rank unchanged: the
    same lora_alpha / lora_r (the update's scale), so that the grown adapter starts as the saved one."""
    r, a = saved.get("lora_r"), saved.get("lora_alpha")
    return isinstance(r, int) and isinstance(a, int) and st.lora_r > r and a * st.lora_r == st.lora_alpha * r


def _grow(name: str, v, r_old: int, r_new: int, gen=None):
    """A LoRA tensor grown from rank r_old to r_new: A [r, in] gets new rows drawn as peft draws A
    (kaiming-uniform: +-1/sqrt(in); zeros without ``gen``: AdamW's moments), B [out, r] new columns
    of zeros, so B @ A is unchanged and the new rank's part starts at zero but learns (its A is not
    zero). Other tensors unchanged."""
    import torch

    if "lora_A" in name and v.dim() == 2 and v.shape[0] == r_old:
        extra = v.new_zeros(r_new - r_old, v.shape[1])
        if gen is not None:
            bound = 1 / math.sqrt(v.shape[1])
            extra = ((torch.rand(r_new - r_old, v.shape[1], generator=gen) * 2 - 1) * bound).to(v.dtype)
        return torch.cat([v, extra])
    if "lora_B" in name and v.dim() == 2 and v.shape[1] == r_old:
        return torch.cat([v, v.new_zeros(v.shape[0], r_new - r_old)], 1)
    return v


def _grow_state(state: dict, r_old: int, r_new: int, seed: int) -> dict:
    """state.pt grown to rank r_new (``_grow``); AdamW's moments of the new entries start at zero."""
    import torch

    gen = torch.Generator().manual_seed(seed)
    names = list(state["params"])
    params = {k: _grow(k, v, r_old, r_new, gen) for k, v in state["params"].items()}
    opt = {"state": {}, "param_groups": state["opt"]["param_groups"]}
    for i, st in state["opt"]["state"].items():
        opt["state"][i] = {k: _grow(names[i], v, r_old, r_new) if torch.is_tensor(v) else v for k, v in st.items()}
    return {**state, "params": params, "opt": opt}


def _grow_portable(w: dict, r_old: int, r_new: int, seed: int) -> dict:
    """The committed int8 checkpoint's tensors grown to rank r_new (dequantized, ``_grow``, quantized again)."""
    import torch

    gen = torch.Generator().manual_seed(seed)
    out = {}
    for k in [k for k in w if not k.endswith(SCALE)]:
        out[k], out[k + SCALE] = quantize_rows(_grow(k, dequantize_rows(w[k], w[k + SCALE]), r_old, r_new, gen))
    return out


def _metrics_upto(run_dir: Path, step: int) -> None:
    """Cut a run's metrics.jsonl back to the rows of the saved state (a killed run wrote more)."""
    p = run_dir / "metrics.jsonl"
    if p.is_file():
        keep = [x for x in p.read_text().splitlines(keepends=True) if x.strip() and json.loads(x)["step"] <= step]
        p.write_text("".join(keep))


def _trainer(c: Campaign, base, say):
    """The campaign's trainer on ``base`` (loaded if None) and the LoadedModel that decodes with it."""
    from decoding.model import LoadedModel, load_model

    if base is None:
        base = load_model(None if c.model == "bundled" else c.model, progress=say)
    tr = Trainer(c, base)
    _metrics_upto(c.run_dir, tr.step)
    lm = LoadedModel(tr.model, base.tokenizer, base.model_id, base.device, base.dtype,
                     kernel=getattr(base, "kernel", "stock"))
    return tr, lm


def point_dir(run_dir: Path, step: int) -> Path:
    """Where ``run(keep_points=True)`` keeps the adapter of the curve point at ``step``."""
    return run_dir / POINTS / f"step-{step:05d}"


def kept_points(run_dir: Path) -> list[int]:
    """The steps whose curve point's adapter is kept in ``run_dir`` (ascending)."""
    d = run_dir / POINTS
    return sorted(int(p.name[5:]) for p in d.glob("step-*") if p.name[5:].isdigit() and (p / "cllm.json").is_file()) \
        if d.is_dir() else []


def _lines(path: Path) -> list[str]:
    """The non-empty lines of a JSONL file (none if it is missing)."""
    return [x for x in path.read_text(encoding="utf-8").splitlines() if x.strip()] if path.is_file() else []


def _rows_upto(path: Path, step: int) -> str:
    """The JSONL rows of ``path`` (metrics or curve) with a ``step`` at most ``step``."""
    return "".join(x + "\n" for x in _lines(path) if json.loads(x).get("step", 0) <= step)


def export(root: str, run_name: str, out: str, say: Callable[[str], None] = print, base=None,
           int8: bool = False, step: int = 0, scale: float = 1.0) -> dict[str, Any]:
    """Write run ``run_name``'s saved weights as a loadable adapter folder ``out`` (what ``cllm eval``,
    ``cllm pair`` and the app load; ``assets/cllm/adapter`` ships one) with the run's metrics.jsonl
    (the training losses the CLLM page draws) and curve.jsonl. From the exact state (state.pt) where
    this machine has it, else from the committed int8 checkpoint; cllm.json says which. ``int8``:
    the weights in int8 with per-row scales (half of fp16's bytes; what is shipped is what is
    evaluated, so evaluate the int8 folder). ``step``: the adapter kept at that curve point
    (``run(keep_points=True)``; int8), its metrics and curve up to that step. ``scale``: the update
    merged at this fraction (lora_alpha x scale in adapter_config.json; the weights unchanged), i.e.
    the weights interpolated linearly between the base (0) and the trained model (1), as WiSE-FT
    (Wortsman et al., 2022) does between a model and its fine-tune; cllm.json records it. Trains
    nothing. Returns the adapter's cllm.json."""
    import shutil

    if not 0 < scale <= 2:
        raise UsageError(f"--scale is the fraction of the update merged, in (0, 2], got {scale}")

    c = open_campaign(root)
    if run_name != RUN:
        c = use_recipe(c, run_name)
    dest = Path(out)
    if step:
        src = point_dir(c.run_dir, step)
        if not (src / "cllm.json").is_file():
            kept = ", ".join(map(str, kept_points(c.run_dir))) or "none (campaign run --keep-points keeps them)"
            raise UsageError(f"run {c.run} kept no adapter at step {step}; kept: {kept}")
        dest.mkdir(parents=True, exist_ok=True)
        remove_weights(dest)  # a folder exported before: no stale weights beside the point's
        for f in src.iterdir():
            shutil.copyfile(f, dest / f.name)
    else:
        if not (c.run_dir / "state.pt").is_file() and not (c.run_dir / PORTABLE / "state.json").is_file():
            raise UsageError(f"run {c.run} has no saved state in {c.run_dir} (train it first: campaign run --run {c.run})")
        tr, _ = _trainer(c, base, say)
        tr.write_adapter(dest, int8)
    meta = json.loads((dest / "cllm.json").read_text(encoding="utf-8"))
    if scale != 1.0:
        scale_adapter(dest, scale)
        meta = json.loads((dest / "cllm.json").read_text(encoding="utf-8"))
    for name in ("metrics.jsonl", "curve.jsonl"):
        if (c.run_dir / name).is_file():
            (dest / name).write_text(_rows_upto(c.run_dir / name, meta["step"]), encoding="utf-8")
    say(f"run {c.run} at step {meta['step']} ({meta['items_seen']} items, weights from {meta['weights_from']})"
        + (f", the update at scale {scale:g}" if scale != 1.0 else "") + f" -> {dest}")
    return meta


def scale_adapter(folder: Path, scale: float) -> None:
    """Merge the adapter in ``folder`` at ``scale`` of its update: lora_alpha x scale in its
    adapter_config.json (peft's scaling is lora_alpha / r), recorded in cllm.json as ``scale`` (the
    product with any scale it had)."""
    cfg_path, meta_path = folder / "adapter_config.json", folder / "cllm.json"
    cfg = json.loads(cfg_path.read_text(encoding="utf-8"))
    meta = json.loads(meta_path.read_text(encoding="utf-8"))
    alpha = cfg["lora_alpha"] * scale
    cfg["lora_alpha"] = int(alpha) if float(alpha).is_integer() else alpha
    meta["scale"] = round(meta.get("scale", 1.0) * scale, 6)
    cfg_path.write_text(json.dumps(cfg, indent=2), encoding="utf-8")
    meta_path.write_text(json.dumps(meta, indent=2), encoding="utf-8")


SCORES = "scores.jsonl"  # RUN/scores.jsonl: ``score``'s rows (committed)
ANSWERS = "score_answers"  # RUN/score_answers/*.json.gz: the CLLM's answers of each score row (committed, ~30 KB)


def _score_rows(c: Campaign, skip: int, count: int, select: bool) -> list[dict]:
    """``score``'s problems: the selection set (``unseen_rows``, against the run's last step) or the
    ``count`` held-out problems after the first ``skip``."""
    if count < 1:
        raise UsageError("--count must be positive")
    if select:
        return unseen_rows(c, count, max([0] + [json.loads(x)["step"] for x in _lines(c.run_dir / "metrics.jsonl")]))
    rows = heldout_rows(c, skip, count)
    if len(rows) < count:
        raise UsageError(f"{c.settings.heldout} has {len(rows)} {c.settings.heldout_category} problems after the "
                         f"first {skip}, not {count}")
    return rows


def _score_folder(c: Campaign, step: int, adapter: str) -> Path:
    """The adapter ``score`` reads: the one kept at curve point ``step`` or the folder ``adapter``."""
    if bool(step) == bool(adapter):
        raise UsageError("score takes one adapter: --step N (a curve point kept by run --keep-points) or --adapter DIR")
    folder = point_dir(c.run_dir, step) if step else Path(adapter)
    if step and not (folder / "cllm.json").is_file():
        kept = ", ".join(map(str, kept_points(c.run_dir))) or "none (campaign run --keep-points keeps them)"
        raise UsageError(f"run {c.run} kept no adapter at step {step}; kept: {kept}")
    if not folder.is_dir():
        raise UsageError(f"no adapter folder at {folder}")
    return folder


def _write_score(c: Campaign, row: dict, answers: list, count: int) -> None:
    """Appends ``row`` to the run's scores.jsonl, the CLLM's answers beside it (the base's are in
    run/base_eval-*.json): a later look at them, or a changed rule for loops, needs no new decoding."""
    side = c.run_dir / ANSWERS / (time.strftime("%Y%m%d-%H%M%S") + f"-step{row['step']}-{row['problems']}-{count}.json.gz")
    side.parent.mkdir(parents=True, exist_ok=True)
    with gzip.open(side, "wt", encoding="utf-8") as f:
        json.dump({"ids": row["ids"], "answers": answers}, f)
    row["answers_file"] = f"{ANSWERS}/{side.name}"
    with open(c.run_dir / SCORES, "a", encoding="utf-8") as f:
        f.write(json.dumps(row) + "\n")


def score(root: str, run_name: str = RUN, step: int = 0, adapter: str = "", skip: int = -1, count: int = 64,
          say: Callable[[str], None] = print, base=None, cllm=None, progress: bool = True,
          select: bool = False) -> dict[str, Any]:
    """A curve point of one adapter on more held-out problems than the curve's 16: the ``count``
    problems after the first ``skip`` of the held-out category (default: after the curve's, i.e.
    the problems of ``cllm eval --skip-per-category 16 --per-category 64``), decoded in batched
    lanes as the curve is (Jacobi tokens/step, accuracy, drift, degenerate share; no timings), so
    that a run's kept points can be compared in minutes before the one to ship is evaluated in full
    (``cllm eval``: timings too, an hour and more). The adapter: the one kept at curve point ``step``
    of run ``run_name`` (what ``export --step`` ships) or the folder ``adapter``, merged at load.
    ``select``: the ``count`` problems of ``unseen_rows`` instead (GSM8K problems the run never
    trained on, not the held-out ones: choose a point on these, then evaluate it on the held-out).
    The base's side is computed once per problem set (run/base_eval-SKIP-COUNT.json). Appends the
    row to the run's scores.jsonl and returns it. ``base`` / ``cllm``: the models, loaded (default:
    the campaign's base model; the adapter merged into it)."""
    from contextlib import nullcontext

    from tqdm import tqdm

    from decoding.model import load_model

    c = open_campaign(root)
    if run_name != RUN:
        c = use_recipe(c, run_name)
    folder = _score_folder(c, step, adapter)
    skip = c.settings.curve_prompts if skip < 0 else skip
    rows = _score_rows(c, skip, count, select)
    base = base or load_model(None if c.model == "bundled" else c.model, progress=say)
    lm = cllm or load_model(str(folder), progress=say)
    t0 = time.perf_counter()
    name = f"base_eval-select-{count}.json" if select else f"base_eval-{skip}-{count}.json"
    todo = count * (1 if cached_base(c.root / RUN / name, rows) else 2)  # the base's side first, where not kept
    with tqdm(total=todo, desc="score (base, then the CLLM)" if todo > count else "score", unit="problem",
              file=sys.stderr, disable=not progress) as bar:
        p = curve_point(c, lm, nullcontext, rows, base_lm=base, base_name=name, tick=lambda: bar.update())
    meta = json.loads((folder / "cllm.json").read_text(encoding="utf-8")) if (folder / "cllm.json").is_file() else {}
    answers = p.pop("answers")
    row = {"run": c.run, "step": meta.get("step", step), "adapter": "" if step else str(folder),
           **({"scale": meta["scale"]} if meta.get("scale", 1.0) != 1.0 else {}),
           "problems": "selection" if select else "held-out", "skip": 0 if select else skip,
           "ids": [r["id"] for r in rows], **p, "eval_seconds": round(time.perf_counter() - t0, 1),
           "date": time.strftime("%Y-%m-%d %H:%M")}
    _write_score(c, row, answers, count)
    gain = p["jacobi_tokens_per_step"] / max(1e-9, p["base_jacobi_tokens_per_step"])
    say(f"step {row['step']} on {count} {row['problems']} problems: tokens/step {p['jacobi_tokens_per_step']} (base "
        f"{p['base_jacobi_tokens_per_step']}: {gain:.2f}x), degenerate {p['degenerate_share']:.1%} (base "
        f"{p['base_degenerate_share']:.1%}; periods <= 16 only: {p['degenerate_share_p16']:.1%}, base "
        f"{p['base_degenerate_share_p16']:.1%}), accuracy {p['accuracy']:.1%} (base {p['base_accuracy']:.1%}), base ppl "
        f"{p['base_ppl_cllm']} (of its own {p['base_ppl_base']})")
    return row


def _curve(tr: Trainer, held: list[dict], say, keep: bool = False) -> None:
    tr.save()
    p = tr.curve(held)
    if keep:
        tr.write_adapter(point_dir(tr.c.run_dir, tr.step), int8=True)
    say(f"curve at {tr.items_seen} items: tokens/step {p['jacobi_tokens_per_step']} "
        f"(base {p['base_jacobi_tokens_per_step']}), accuracy {p['accuracy']} (base {p['base_accuracy']})")


def _check_teacher(c: Campaign) -> None:
    """A student-taught campaign's shards are one run's own trajectories: another run would train on
    the trajectories of a model that it is not."""
    if c.settings.teacher != "student":
        return
    others = {s["teacher"]["run"] for s in c.shards if isinstance(s.get("teacher"), dict)} - {c.run}
    if others:
        raise UsageError(f"{c.root}'s shards are the trajectories of run {', '.join(sorted(others))} (teacher student): "
                         f"run {c.run} cannot train on them; start another campaign folder")


def _collect_next(c: Campaign, tr: "Trainer", lm, say, stop) -> dict | None:
    """The next shard from the settings' teacher: the base model (the adapter off) or the student
    as it stands (the adapter on: on-policy trajectories)."""
    from contextlib import nullcontext

    import torch

    student = c.settings.teacher == "student"
    tr.model.eval()
    with torch.inference_mode(), (nullcontext() if student else tr.model.disable_adapter()):
        return collect_shard(c, lm, say, stop, teacher={"run": c.run, "step": tr.step} if student else "base")


MAX_DEGENERATE = 0.25  # a student's shard with more of its answers degenerate than this: the run stops (collapse)


def collapsed(c: Campaign, entry: dict, limit: float, say: Callable[[str], None]) -> bool:
    """Whether a just collected shard of the student shows the collapse into repetition: more than
    ``limit`` of its answers degenerate (dropped by the guard; 0: never)."""
    share = entry.get("dropped_degenerate", 0) / max(1, c.settings.shard_prompts)
    if limit <= 0 or share <= limit:
        return False
    say(f"collapse: {entry.get('dropped_degenerate')} of the student's {c.settings.shard_prompts} answers in shard "
        f"{entry.get('shard')} are degenerate (more than {limit:.0%}); the run stops, saved (--max-degenerate sets the limit)")
    return True


def _progress(tr: "Trainer", row: dict, steps: int, mark: list, say) -> None:
    """Every 10th step: the losses and the seconds per step since the last report (``mark``: the
    trainer's seconds and this run's steps then; updated), not since the run began (a slow stretch,
    e.g. beside another process, would colour every later figure)."""
    if tr.step % 10 == 0:
        say(f"step {tr.step}: items {tr.items_seen}, consistency {row['consistency']:.3f}, ar {row['ar']:.3f}, "
            f"{(tr.seconds - mark[0]) / max(1, steps - mark[1]):.2f} s/step")
        mark[:] = [tr.seconds, steps]


def run(root: str, minutes: float, eval_every: int = 512, save_every: int = 20, collect_only: bool = False,
        say: Callable[[str], None] = print, base=None, max_steps: int = 0, run_name: str = RUN,
        recipe: dict[str, Any] | None = None, start: str = "", max_degenerate: float = MAX_DEGENERATE,
        keep_points: bool = False) -> dict[str, Any]:
    """Go on with the campaign for about ``minutes``: train on the collected items not seen yet,
    collect the next shard (the settings' ``teacher``: the base model's trajectories, or the
    student's as it stands) when they run out, a learning-curve point every ``eval_every`` items; the state is saved every ``save_every``
    steps, after each curve point and at the end. SIGTERM/SIGINT end it cleanly at the next step.
    ``base``: the loaded base model (default: load the campaign's); ``max_steps``: stop after this
    many training steps of this run (0: no limit); ``run_name`` / ``recipe``: train another recipe in
    its own run folder (``use_recipe``; one campaign process at a time: they share the shards);
    ``start``: the run folder whose saved state a new run starts from (``start_from``);
    ``max_degenerate``: stop when a student's shard has more degenerate answers than this share
    (``collapsed``; the shard is kept); ``keep_points``: keep the adapter at each curve point
    (``point_dir``), not only the last state, so that the best point can be shipped."""
    c = open_campaign(root)
    if run_name != RUN or recipe:
        c = use_recipe(c, run_name, recipe)
    if start:
        start_from(c, start, say)
    stop = {"now": False}
    old = {s: signal.signal(s, lambda *_: stop.update(now=True)) for s in (signal.SIGTERM, signal.SIGINT)}
    t_end = time.perf_counter() + minutes * 60
    done = {"steps": 0, "shards": 0, "points": 0}
    over = lambda: stop["now"] or time.perf_counter() > t_end or bool(max_steps and done["steps"] >= max_steps)
    _check_teacher(c)
    tr, lm = _trainer(c, base, say)
    held, mark = heldout_rows(c), [tr.seconds, 0]  # the rate is reported over the steps since the last report
    try:
        if not read_curve(root, c.run) and not collect_only:
            _curve(tr, held, say, keep_points)
            done["points"] += 1
        while not over():
            if collect_only or tr.available() < c.settings.items_per_step:
                entry = _collect_next(c, tr, lm, say, over)
                if entry is None:
                    break
                done["shards"] += 1
                if collapsed(c, entry, max_degenerate, say):
                    done["collapsed"] = entry["shard"]
                    break
                continue
            before = tr.items_seen
            row = tr.train_step()
            done["steps"] += 1
            _progress(tr, row, done["steps"], mark, say)
            if before // eval_every != tr.items_seen // eval_every:
                _curve(tr, held, say, keep_points)
                done["points"] += 1
            elif tr.step % save_every == 0:
                tr.save()
    finally:
        tr.save()
        for s, h in old.items():
            signal.signal(s, h)
    say(f"campaign: {done['steps']} steps, {done['shards']} shards, {done['points']} curve points this run; "
        f"{tr.items_seen} items trained of {c.items} collected in {len(c.shards)} shards")
    return done
