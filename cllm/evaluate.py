"""Evaluating a CLLM against its base: Jacobi tokens/step and speedup, exactness, drift of the
greedy answer and the base's perplexity of both answers (``evaluate``, ``report``); and the pair of
Jacobi traces the app's CLLM page shows (``pair``)."""

from __future__ import annotations

import json
import math
import os
import re
import sys
from typing import Any, Callable, Sequence

from decoding.loop import decode, warm_up


def answer_nll(lm, prompt_ids: list[int], answer: list[int]) -> tuple[float, int]:
    """Summed negative log-likelihood of ``answer`` after ``prompt_ids`` under ``lm``, and its count."""
    import torch
    import torch.nn.functional as F

    if not answer:
        return 0.0, 0
    with torch.inference_mode():
        ids = torch.tensor([prompt_ids + answer], device=lm.model.device)
        logits = lm.model(input_ids=ids, use_cache=False).logits[0, len(prompt_ids) - 1:-1].float()
        nll = F.cross_entropy(logits, torch.tensor(answer, device=logits.device), reduction="sum")
    return float(nll), len(answer)


_NUM = re.compile(r"-?\d[\d,]*(?:\.\d+)?")


def final_number(text: str) -> float | None:
    """The answer's number: after '####' if present, else the last number in the text."""
    if "####" in text:
        text = text.split("####")[-1]
    nums = _NUM.findall(text)
    if not nums:
        return None
    try:
        return float(nums[-1].replace(",", ""))
    except ValueError:
        return None


# A loop's period: any that repeats 3 times in the answer (0: up to len // 3). Until 2026-12-06 it was 1..16,
# which missed the sentence- and paragraph-long loops (a 20-80-token stretch said again word for word) that
# both models fall into: 8 of the base's 128 selection answers loop so, 2 at a period of 16 or less; rows written since say
# ``degenerate_periods: "any"`` and keep the old count beside (``*_p16``).
DEGENERATE_MAX_PERIOD = 0
SHORT_PERIOD = 16  # the old rule's longest period (the ``*_p16`` figures)
DEGENERATE_SHARE = 0.5


def repeated_share(ids: list[int], max_period: int = DEGENERATE_MAX_PERIOD) -> float:
    """The largest share of ``ids`` covered by one stretch that repeats a token n-gram (n = the
    period, 1..max_period; 0: any period up to a third of the answer) at least 3 times back to
    back: a stretch where every token equals the token ``period`` places before it, counted with
    its first period ("0 0 0 0" is period 1, "a b a b a b" period 2, a sentence said three times
    over its length). 0 for an empty answer."""
    best, n = 0, len(ids)
    for p in range(1, (max_period or n // 3) + 1):
        run = 0  # tokens i with ids[i] == ids[i - p], in the current stretch
        for i in range(p, n + 1):
            if i < n and ids[i] == ids[i - p]:
                run += 1
                continue
            if run >= 2 * p:  # the first period + 2 more repeats
                best = max(best, run + p)
            run = 0
    return best / n if n else 0.0


def degenerate(ids: list[int], share: float = DEGENERATE_SHARE, max_period: int = DEGENERATE_MAX_PERIOD) -> bool:
    """A degenerate repetitive answer: one token n-gram (of any period; ``max_period`` > 0: at most
    that) repeated back to back, >= 3 times, fills more than half of it (``repeated_share`` > 0.5)."""
    return repeated_share(ids, max_period) > share


def _side(lm, ids: list[int], n: int, max_new_tokens: int, seed: int, n_small: int = 0,
          auto: int = 0) -> tuple[list[int], dict[str, Any]]:
    """One model's greedy AR answer and its Jacobi vs AR numbers on one prompt. The Jacobi run is
    recorded (its per-block counts come from the record: ``jacobi_counts``, CLLM's definitions);
    its wall time includes that recording (a few small lists per iteration). ``auto``: also Jacobi
    with the cost-aware window (``budget="auto"``) in blocks of ``auto`` tokens (0: off), not recorded: its wall time,
    tokens/step and whether its output is the AR answer."""
    from decoding.analysis import jacobi_counts

    ar = decode(lm, ids, "ar", {}, max_new_tokens, record=False)
    jc = decode(lm, ids, "jacobi", {"n": n, "seed": seed}, max_new_tokens, record=True)
    blocks = jacobi_counts(jc)
    out = {"jacobi_tokens_per_step": jc.tokens_per_step, "jacobi_steps": jc.n_steps,
           "jacobi_seconds": jc.seconds, "ar_seconds": ar.seconds, "tokens": len(ar.output_ids),
           "exact": jc.output_ids == ar.output_ids,
           "speedup": (ar.seconds / jc.seconds) if jc.seconds > 0 else 0.0,
           "block_iterations": [b["iterations"] for b in blocks],
           "block_tokens": [b["tokens"] for b in blocks],
           "fast_forwarded": [b["fast_forwarded"] for b in blocks],
           "stationary": [b["stationary"] for b in blocks],
           "repeated_share": round(repeated_share(ar.output_ids), 4),
           "degenerate": degenerate(ar.output_ids)}
    if n_small:
        js = decode(lm, ids, "jacobi", {"n": n_small, "seed": seed}, max_new_tokens, record=False)
        out.update({"n_small": n_small, "jacobi_tokens_per_step_small": js.tokens_per_step,
                    "jacobi_steps_small": js.n_steps})
    if auto:
        ja = decode(lm, ids, "jacobi", {"n": auto, "seed": seed, "budget": "auto"}, max_new_tokens, record=False)
        out.update({"auto_seconds": ja.seconds, "auto_tokens_per_step": ja.tokens_per_step, "auto_steps": ja.n_steps,
                    "auto_exact": ja.output_ids == ar.output_ids})
    return ar.output_ids, out


def compare(base, cllm, r: dict, n: int, max_new_tokens: int, chat: bool, seed: int = 0, n_small: int = 0,
            auto: int = 0) -> dict[str, Any]:
    """The result row of one prompt row ``r`` (see ``evaluate``). With ``auto``, ``auto_vs_base_ar``:
    the CLLM's cost-aware Jacobi tokens/s over the base's AR tokens/s (issue 20's payoff on a CPU)."""
    ids = base.encode(r["prompt"], chat=chat)
    row: dict[str, Any] = {"id": r["id"], "category": r["category"], "split": r.get("split", ""), "prompt_tokens": len(ids),
                           "n": n}
    outs = {}
    for name, lm in (("base", base), ("cllm", cllm)):
        outs[name], row[name] = _side(lm, ids, n, max_new_tokens, seed, n_small, auto)
    b, c = outs["base"], outs["cllm"]
    if auto:
        row["auto_n"] = auto
        rate = lambda side, k: side["tokens"] / side[k] if side[k] > 0 else 0.0
        base_ar = rate(row["base"], "ar_seconds")
        row["auto_vs_base_ar"] = rate(row["cllm"], "auto_seconds") / base_ar if base_ar else 0.0
    row.update(drift(b, c))
    ref = final_number(r["reference"]) if r.get("reference") else None
    if ref is not None:  # a math problem with its answer (GSM8K, Spec-Bench math_reasoning): is each model's right
        for name, ans in (("base", b), ("cllm", c)):
            row[f"{name}_correct"] = final_number(base.tokenizer.decode(ans, skip_special_tokens=True)) == ref
    row["base_nll_base"], row["n_base"] = answer_nll(base, ids, b)
    row["base_nll_cllm"], row["n_cllm"] = answer_nll(base, ids, c)
    return row


def drift(base_answer: list[int], cllm_answer: list[int]) -> dict[str, Any]:
    """identical_share: positions where the two greedy answers hold the same token, over the longer
    answer's length; common_prefix: tokens before they first differ."""
    b, c = base_answer, cllm_answer
    same = sum(x == y for x, y in zip(b, c))
    return {"identical_share": same / max(len(b), len(c), 1),
            "common_prefix": next((i for i, (x, y) in enumerate(zip(b, c)) if x != y), min(len(b), len(c)))}


class CurveEval:
    """The learning curve's evaluation (``cllm.train``'s ``evaluate``) on a fixed held-out set of
    prompt ids: Jacobi tokens/step of the model being trained, its drift from the base (identical
    share, the base's perplexity of its answers vs of the base's own) and its share of degenerate
    answers. The first call (before training) records the base's answers and figures in ``state``
    (kept in the training checkpoint); with a LoRA model the base's perplexity of later answers
    comes from the adapter switched off, else it is left out."""

    def __init__(self, tokenizer, prompts: list[list[int]], n: int = 16, max_new_tokens: int = 64, seed: int = 0,
                 model_id: str = "training", device: str = "cpu", dtype: str = "float32"):
        self.tokenizer, self.prompts, self.n, self.max_new_tokens, self.seed = tokenizer, prompts, n, max_new_tokens, seed
        self.model_id, self.device, self.dtype = model_id, device, dtype
        self.state: dict | None = None

    def __call__(self, model) -> dict[str, Any]:
        import contextlib

        from decoding.model import LoadedModel

        lm = LoadedModel(model, self.tokenizer, self.model_id, self.device, self.dtype)
        answers, steps, toks = [], 0, 0
        for ids in self.prompts:
            jc = decode(lm, ids, "jacobi", {"n": self.n, "seed": self.seed}, self.max_new_tokens, record=False)
            answers.append(jc.output_ids)  # greedy Jacobi's output is greedy AR's
            steps += jc.n_steps
            toks += len(jc.output_ids)
        first = self.state is None
        if first:
            self.state = {"answers": answers,
                          "nll": [answer_nll(lm, ids, a) for ids, a in zip(self.prompts, answers)]}
        base_answers = self.state["answers"]
        d = [drift(b, c) for b, c in zip(base_answers, answers)]
        row: dict[str, Any] = {
            "prompts": len(self.prompts), "jacobi_tokens_per_step": round(toks / max(1, steps), 4),
            "identical_share": round(sum(x["identical_share"] for x in d) / max(1, len(d)), 4),
            "degenerate_share": round(sum(degenerate(a) for a in answers) / max(1, len(answers)), 4),
            "base_degenerate_share": round(sum(degenerate(a) for a in base_answers) / max(1, len(answers)), 4)}
        ppl = lambda pairs: math.exp(sum(x for x, _ in pairs) / max(1, sum(k for _, k in pairs)))
        row["base_ppl_base"] = round(ppl(self.state["nll"]), 4)
        off = getattr(model, "disable_adapter", None)
        if first:
            row["base_ppl_cllm"] = row["base_ppl_base"]
        elif off is not None:
            with off() if callable(off) else contextlib.nullcontext():
                row["base_ppl_cllm"] = round(ppl([answer_nll(lm, ids, a) for ids, a in zip(self.prompts, answers)]), 4)
        return row


def evaluate(base, cllm, rows: list[dict], n: int, max_new_tokens: int, chat: bool, seed: int = 0,
             progress: bool = True, out=None, n_small: int = 0, auto: int = 0) -> list[dict]:
    """Per prompt: Jacobi tokens/step of base and CLLM (and at ``n_small``), AR and Jacobi wall time
    of both, their exactness (Jacobi == AR), per-block iterations, fast-forwarded and stationary
    counts (``decoding.analysis.jacobi_counts``), degenerate answers (``degenerate``), drift of the
    CLLM's greedy answer from the base's, the base's NLL of both answers and (``auto``) the
    cost-aware Jacobi of both against the base's AR."""
    from tqdm import tqdm

    for lm in (base, cllm):
        warm_up(lm, chat)
    res = []
    for r in tqdm(rows, desc="eval", unit="prompt", file=sys.stderr, disable=not progress):
        row = compare(base, cllm, r, n, max_new_tokens, chat, seed, n_small, auto)
        res.append(row)
        if out:
            out.write(json.dumps(row) + "\n")
            out.flush()
    return res


def _tokens_per_step(rs: list[dict], side: str) -> float:
    """Jacobi tokens/step of one side ("base" / "cllm") over rows ``rs``, weighted by their steps."""
    return (sum(r[side]["jacobi_tokens_per_step"] * r[side]["jacobi_steps"] for r in rs)
            / max(1, sum(r[side]["jacobi_steps"] for r in rs)))


def report(results: list[dict]) -> str:
    """A Markdown table per split: tokens/step base vs CLLM, speedups, drift, base perplexity."""
    import statistics

    groups: dict[str, list[dict]] = {}
    for r in results:
        groups.setdefault(r.get("split") or r["category"], []).append(r)
    if len(groups) > 1:
        groups["ALL"] = list(results)
    head = ("| split | prompts | Jacobi tok/step base | Jacobi tok/step CLLM | ratio | Jacobi vs AR (CLLM), median | "
            "Jacobi vs AR (base), median | identical tokens | base ppl of base answers | base ppl of CLLM answers | exact |")
    lines = [head, "|" + "---|" * (head.count("|") - 1)]
    for g, rs in groups.items():
        b, c = _tokens_per_step(rs, "base"), _tokens_per_step(rs, "cllm")
        ppl = lambda k, nk: math.exp(sum(r[k] for r in rs) / max(1, sum(r[nk] for r in rs)))
        lines.append(f"| {g} | {len(rs)} | {b:.3f} | {c:.3f} | {c / b if b else 0:.2f}x | "
                     f"{statistics.median(r['cllm']['speedup'] for r in rs):.2f}x | "
                     f"{statistics.median(r['base']['speedup'] for r in rs):.2f}x | "
                     f"{sum(r['identical_share'] for r in rs) / len(rs):.1%} | "
                     f"{ppl('base_nll_base', 'n_base'):.2f} | {ppl('base_nll_cllm', 'n_cllm'):.2f} | "
                     f"{'yes' if all(r['cllm']['exact'] and r['base']['exact'] for r in rs) else 'NO'} |")
    more = [(g, rs) for g, rs in groups.items() if all("block_iterations" in r["base"] and "block_iterations" in r["cllm"] for r in rs)]
    if more:
        small = all("jacobi_tokens_per_step_small" in r["base"] and "jacobi_tokens_per_step_small" in r["cllm"] for _, rs in more for r in rs)
        head = ("| split | prompts | iterations per block (base / CLLM) | fast-forwarded per block (base / CLLM) | "
                "stationary per block (base / CLLM) | degenerate answers (base / CLLM) | AR s (base / CLLM) | Jacobi s (base / CLLM) |"
                + (" Jacobi tok/step at small n (base / CLLM) |" if small else ""))
        lines += ["", head, "|" + "---|" * (head.count("|") - 1)]
        for g, rs in more:
            per = lambda k, f: sum(sum(r[k][f]) for r in rs) / max(1, sum(len(r[k][f]) for r in rs))
            both = lambda f, fmt: f"{fmt(per('base', f))} / {fmt(per('cllm', f))}"
            deg = lambda k: sum(bool(r[k].get("degenerate")) for r in rs)
            tot = lambda k, f: sum(r[k][f] for r in rs)
            line = (f"| {g} | {len(rs)} | {both('block_iterations', lambda v: f'{v:.2f}')} | "
                    f"{both('fast_forwarded', lambda v: f'{v:.2f}')} | {both('stationary', lambda v: f'{v:.2f}')} | "
                    f"{deg('base')} / {deg('cllm')} | {tot('base', 'ar_seconds'):.1f} / {tot('cllm', 'ar_seconds'):.1f} | "
                    f"{tot('base', 'jacobi_seconds'):.1f} / {tot('cllm', 'jacobi_seconds'):.1f} |")
            if small:
                st = lambda k: sum(r[k]["jacobi_tokens_per_step_small"] * r[k]["jacobi_steps_small"] for r in rs) / max(1, sum(r[k]["jacobi_steps_small"] for r in rs))
                line += f" {st('base'):.3f} / {st('cllm'):.3f} (n = {rs[0]['base']['n_small']}) |"
            lines.append(line)
    return "\n".join(lines + _clean_table(groups) + _auto_table(groups) + _accuracy_table(groups))


def _accuracy_table(groups: dict[str, list[dict]]) -> list[str]:
    """Answer accuracy of both models (the final number against the prompt's reference) over the rows
    that have it (math problems evaluated with a reference), or none."""
    lines = []
    for g, rs in groups.items():
        rs = [r for r in rs if "base_correct" in r and "cllm_correct" in r]
        if rs:
            right = lambda k: sum(bool(r[k]) for r in rs)
            lines.append(f"| {g} | {len(rs)} | {right('base_correct')} ({right('base_correct') / len(rs):.1%}) | "
                         f"{right('cllm_correct')} ({right('cllm_correct') / len(rs):.1%}) |")
    if not lines:
        return []
    return ["", "| split | problems with a reference | base right | CLLM right |", "|---|---|---|---|"] + lines


def _clean_table(groups: dict[str, list[dict]]) -> list[str]:
    """Jacobi tokens/step on the problems where the CLLM's answer is not degenerate (a repetition
    loop is the easiest text to fast-forward, so the first table's ratio rewards collapse), the
    base's on the same problems."""
    lines = ["", "| split | problems without a degenerate CLLM answer | Jacobi tok/step base | Jacobi tok/step CLLM | ratio |",
             "|---|---|---|---|---|"]
    for g, rs in groups.items():
        keep = [r for r in rs if not r["cllm"].get("degenerate")]
        b, c = _tokens_per_step(keep, "base"), _tokens_per_step(keep, "cllm")
        lines.append(f"| {g} | {len(keep)} of {len(rs)} | {b:.3f} | {c:.3f} | {c / b if b else 0:.2f}x |")
    return lines


def _auto_table(groups: dict[str, list[dict]]) -> list[str]:
    """The cost-aware Jacobi's lines of ``report`` (rows evaluated with ``auto``), or none."""
    import statistics

    groups = {g: rs for g, rs in groups.items() if all("auto_vs_base_ar" in r for r in rs)}
    if not groups:
        return []
    head = ("| split | prompts | CLLM budget=auto Jacobi vs base AR, tokens/s (median) | vs the CLLM's AR (median) | "
            "base budget=auto Jacobi vs base AR (median) | tokens/step budget=auto (base / CLLM) | exact |")
    lines = ["", head, "|" + "---|" * (head.count("|") - 1)]
    for g, rs in groups.items():
        med = lambda f: statistics.median(f(r) for r in rs)
        own = lambda k: lambda r: r[k]["ar_seconds"] / r[k]["auto_seconds"] if r[k]["auto_seconds"] > 0 else 0.0
        tps = lambda k: sum(r[k]["auto_tokens_per_step"] * r[k]["auto_steps"] for r in rs) / max(1, sum(r[k]["auto_steps"] for r in rs))
        exact = all(r[k]["auto_exact"] for r in rs for k in ("base", "cllm"))
        lines.append(f"| {g} | {len(rs)} | {med(lambda r: r['auto_vs_base_ar']):.2f}x | {med(own('cllm')):.2f}x | "
                     f"{med(own('base')):.2f}x | {tps('base'):.3f} / {tps('cllm'):.3f} | {'yes' if exact else 'NO'} |")
    return lines


def pair(r: dict, models: dict[str, str | None], out_dir: str, n: int, max_new_tokens: int, chat: bool = False,
         seed: int = 0, device: str | None = None, dtype: str | None = None,
         say: Callable[[str], None] = lambda m: print(m, file=sys.stderr)) -> dict[str, str]:
    """Decode prompt row ``r`` with greedy Jacobi by each model of ``models`` (name -> model, e.g.
    {"base": None, "cllm": folder}), one model loaded at a time; save ``<name>_jacobi.json`` in
    ``out_dir`` (the app's CLLM page reads base_jacobi.json and cllm_jacobi.json). Name -> path."""
    from decoding.model import load_model

    paths = {}
    for name, model in models.items():
        lm = load_model(model, device, dtype, progress=say)
        tr = decode(lm, lm.encode(r["prompt"], chat=chat), "jacobi", {"n": n, "seed": seed}, max_new_tokens,
                    prompt_text=r["prompt"], chat=chat)
        paths[name] = os.path.join(out_dir, f"{name}_jacobi.json")
        tr.save(paths[name])
        say(f"{name}: prompt {r['id']} ({r['category']}), {len(tr.output_ids)} tokens in {tr.n_steps} steps, "
            f"{tr.tokens_per_step:.2f} tokens/step -> {paths[name]}")
    return paths


PAIR_KEEP = 0.8
PAIR_RULE = ("the held-out prompt with the median Jacobi tokens/step gain (CLLM / base) among those whose "
             "CLLM answer keeps at least {keep:.0%} of the base's tokens and is not degenerate")


def pair_table(results: list[dict], keep: float = PAIR_KEEP, loops: Sequence[str] = ()) -> dict[str, Any]:
    """The CLLM page's choice of pair from ``eval`` rows, by a stated rule: among the prompts whose
    CLLM answer keeps >= ``keep`` of the base's tokens (identical_share) and is not degenerate, the
    one with the median tokens/step gain (the lower middle of an even count: a real prompt). If none
    qualifies, the median over the prompts whose CLLM answer is not degenerate (all, if every one
    is), and the rule says so. ``loops``: the ids of prompts whose CLLM answer is degenerate by the
    rule of today (``degenerate``) where the results' flag, written by an older rule, says not:
    degenerate too (``cllm pair`` finds them in a score's answers, and checks the chosen one's
    answer as it decodes it). Returns {rule, chosen, qualified,
    prompts: [{id, category, split, base/cllm tokens/step and steps, gain, identical_share,
    degenerate}]} (every prompt, for a list to pick from)."""
    table = []
    for r in results:
        b, c = r["base"]["jacobi_tokens_per_step"], r["cllm"]["jacobi_tokens_per_step"]
        table.append({"id": r["id"], "category": r["category"], "split": r.get("split", ""),
                      "base_tokens_per_step": b, "cllm_tokens_per_step": c,
                      "base_steps": r["base"]["jacobi_steps"], "cllm_steps": r["cllm"]["jacobi_steps"],
                      "gain": round(c / b, 4) if b else 0.0, "identical_share": r["identical_share"],
                      "degenerate": bool(r["cllm"].get("degenerate", False)) or str(r["id"]) in set(map(str, loops))})
    if not table:
        raise ValueError("no results to choose a pair from")
    ok = [t for t in table if t["identical_share"] >= keep and not t["degenerate"]]
    rule, qualified = PAIR_RULE.format(keep=keep), len(ok)
    if not ok:  # still never a degenerate answer, unless every one is
        ok = [t for t in table if not t["degenerate"]] or table
        rule += (f" (no prompt qualified: the median over the {len(ok)} of {len(table)} prompts whose CLLM answer "
                 "is not degenerate)")
    if loops:
        rule += (f"; {len(loops)} CLLM answer{'s' if len(loops) > 1 else ''} that the results flag as not degenerate "
                 f"loop{'s' if len(loops) == 1 else ''} by the rule of today (a loop of any period): "
                 f"{', '.join(map(str, loops))}, left out")
    ranked = sorted(ok, key=lambda t: (t["gain"], str(t["id"])))
    chosen = ranked[(len(ranked) - 1) // 2]
    return {"rule": rule, "keep": keep, "chosen": chosen["id"], "qualified": qualified, "prompts": table,
            **({"loops": [str(x) for x in loops]} if loops else {})}

