"""Settings for this device: which W, N, G (lookahead) and n (Jacobi) pay off here.

A setting pays off when its tokens per step beat what its steps cost (decoding.perf.costs): on a 2-core
CPU a step that feeds 31 tokens costs ~2.7 one-token forwards, so lookahead with W=5, N=4, G=5
needs 2.7 tokens/step just to break even; on a GPU the same step costs ~1.

Two tools:
- ``run_grid`` + ``rank``: decode a few prompts with each setting (record off) and rank the
  settings by predicted speedup over AR (tokens/step over the curve's step cost, with each run's
  measured overhead), next to the measured speedup. `python -m decoding tune` does this.
- ``what_if``: from one recorded lookahead trace, estimate tokens/step and speedup for smaller N
  and G by replaying the verification of the candidates it saw (no model needed), and the
  break-even tokens/step of a grid of settings.
"""

from __future__ import annotations

import json
import math
import statistics
from collections import defaultdict
from pathlib import Path
from typing import Any, Callable

from .account import account, break_even, whole_run
from .costs import CostCurve, curve_key
from ..methods import REGISTRY
from ..methods.lookahead import fed_tokens as lookahead_fed
from ..trace import Trace


def label(method: str, params: dict[str, Any]) -> str:
    """'lookahead W=5 N=4 G=5' (only the tuned parameters)."""
    keys = REGISTRY[method].tuned if method in REGISTRY else ()
    return " ".join([method] + [f"{k}={params[k]}" for k in keys if k in params])


def is_default(method: str, params: dict[str, Any]) -> bool:
    if method not in REGISTRY:
        return False
    d = REGISTRY[method].defaults
    return all(params.get(k) == d.get(k) for k in REGISTRY[method].tuned)


def settings_grid(methods=("jacobi", "lookahead")) -> list[tuple[str, dict]]:
    return [(m, dict(p)) for m in methods for p in (REGISTRY[m].grid if m in REGISTRY else ())]


def run_grid(lm, prompts: list[dict], settings: list[tuple[str, dict]], max_new_tokens: int = 64,
             progress: Callable[[float, str], None] | None = None) -> list[dict]:
    """Decode each prompt ({id, category, ids}) with AR and each setting, recording off.
    Returns bench-like rows (method, params, fed, seconds, forward_seconds, ...)."""
    rows = []
    todo = [("ar", {})] + [s for s in settings if s[0] != "ar"]
    from ..loop import decode

    total, done = len(prompts) * len(todo), 0
    for p in prompts:
        ref = None
        for method, params in todo:
            if progress:
                progress(done / total, f"{p['id']}: {label(method, params)}")
            tr = decode(lm, p["ids"], method, params, max_new_tokens, record=False)
            if method == "ar":
                ref = tr.output_ids
            rows.append({"id": p["id"], "category": p.get("category", "all"), "method": method, "params": tr.params,
                         "setting": label(method, tr.params), "fed": [s.fed for s in tr.steps],
                         "output_ids": tr.output_ids, "seconds": tr.seconds, "prefill_seconds": tr.prefill_seconds,
                         "forward_seconds": tr.forward_seconds, "steps": tr.n_steps,
                         "tokens_per_s": tr.tokens_per_s, "matches_ar": tr.output_ids == ref})
            done += 1
    if progress:
        progress(1.0, "done")
    return rows


def _gmean(xs: list[float]) -> float | None:
    xs = [x for x in xs if x and x > 0]
    return math.exp(sum(map(math.log, xs)) / len(xs)) if xs else None


def rank(rows: list[dict], curve: CostCurve, by_category: bool = False) -> list[dict]:
    """One row per setting (and category): prompts, tokens/step, step cost, predicted and measured
    speedup over AR (geometric means over prompts), best predicted first within each group.

    The AR row of the same prompt id gives the measured speedup and AR's overhead.
    """
    ar = {r["id"]: r for r in rows if r["method"] == "ar"}
    groups: dict[tuple[str, str, str], list[dict]] = defaultdict(list)
    for r in rows:
        if r["method"] == "ar" or r.get("fed") is None:
            continue
        setting = r.get("setting") or label(r["method"], r.get("params") or {})
        groups[(r["category"] if by_category else "ALL", r["method"], setting)].append(r)
    out = []
    for (cat, method, setting), rs in groups.items():
        accs = [account(r, curve, ar.get(r["id"])) for r in rs]
        steps = sum(len(r["fed"]) for r in rs)
        out.append({
            "category": cat, "method": method, "setting": setting, "params": rs[0].get("params") or {},
            "default": is_default(method, rs[0].get("params") or {}), "prompts": len(rs),
            "tokens_per_step": sum(a.tokens_per_step * len(r["fed"]) for a, r in zip(accs, rs)) / steps if steps else 0.0,
            "fed_per_step": sum(sum(r["fed"]) for r in rs) / steps if steps else 0.0,
            "step_cost": statistics.mean(a.step_cost for a in accs),
            "predicted": _gmean([a.predicted for a in accs]),
            "measured": _gmean([a.measured for a in accs if a.measured]),
            "exact": all(r.get("matches_ar") in (True, None) for r in rs),
        })
    out.sort(key=lambda d: (d["category"] == "ALL", d["category"], -(d["predicted"] or 0)))
    return out


def recommend(ranked: list[dict], category: str = "ALL") -> dict[str, dict]:
    """Method -> its best setting (by predicted speedup) in ``category``."""
    best: dict[str, dict] = {}
    for r in ranked:
        if r["category"] == category and (r["method"] not in best or (r["predicted"] or 0) > (best[r["method"]]["predicted"] or 0)):
            best[r["method"]] = r
    return best


# ---- what-if from one recorded trace ----------------------------------------------------------
def jacobi_step_cost(n: int, curve: CostCurve) -> float:
    """Mean step cost of a Jacobi block that commits one token per iteration (fed n, n-1, .., 1)."""
    return sum(curve.relative_cost(k) for k in range(1, n + 1)) / n


def break_even_rows(curve: CostCurve, overhead: float = 0.0) -> list[dict]:
    """For the default grid: tokens fed per step (full candidates), the step cost on this curve and
    the tokens/step needed to match AR."""
    out = []
    for method, params in settings_grid():
        if method == "jacobi":
            fed, cost = (params["n"] + 1) / 2, jacobi_step_cost(params["n"], curve)
        else:
            fed = lookahead_fed(params["W"], params["N"], params["G"])
            cost = curve.relative_cost(fed)
        out.append({"setting": label(method, params), "fed per step": round(fed, 1), "step cost": round(cost, 2),
                    "break-even tokens/step": round(break_even(cost, overhead, curve.ar_overhead or 0.0), 2)})
    return out


def what_if(trace: Trace, curve: CostCurve, ar: Trace | None = None) -> list[dict]:
    """Lookahead trace -> estimated tokens/step, step cost and speedup for N' <= N, G' <= G (same W),
    by replaying this run's verification: with G' the pool keeps the newest G' continuations per
    key, and an (N'-1)-gram matches as far as the first N'-1 tokens of the longer one did.
    Estimates per step along this run's path (a different setting would take a different path)."""
    if trace.method != "lookahead" or not any(s.record for s in trace.steps):
        return []
    W, N, G = (int(trace.params[k]) for k in ("W", "N", "G"))
    base = account(trace, curve, ar)
    out = []
    for n2 in range(2, N + 1):
        for g2 in sorted({g for g in (1, 2, 4, 8) if g < G} | {max(G // 2, 1), G}):
            tokens, fed = _replay(trace, W, n2, g2)
            tps = tokens / len(fed)
            cost = sum(curve.relative_cost(k) for k in fed) / len(fed)
            decode = tps / cost * base.overhead_factor
            out.append({"setting": label("lookahead", {"W": W, "N": n2, "G": g2}), "W": W, "N": n2, "G": g2,
                        "this run": n2 == N and g2 == G, "tokens/step": round(tps, 3), "fed per step": round(sum(fed) / len(fed), 1),
                        "step cost": round(cost, 3), "predicted speedup": round(whole_run(decode, base.prefill_share), 3),
                        "break-even tokens/step": round(break_even(cost, base.overhead, base.ar_overhead), 3)})
    out.sort(key=lambda d: -d["predicted speedup"])
    return out


def _replay(trace: Trace, W: int, n2: int, g2: int) -> tuple[int, list[int]]:
    """Tokens committed by the steps, and the tokens each step would feed, of ``trace`` replayed
    with N = n2 and G = g2 (the newest g2 candidates, each cut to n2 - 1 tokens)."""
    tokens, fed = 0, []
    for s in trace.steps:
        la = s.record  # a LookaheadRecord
        if la is None:
            tokens += len(s.tokens)
            fed.append(s.fed)
            continue
        newest = list(range(len(la.candidates)))[-g2:] if g2 else []
        tokens += 1 + max((min(la.matched[i], n2 - 1) for i in newest), default=0)
        fed.append(lookahead_fed(W, n2, len(newest), min(len(la.window), n2 - 1)))
    return tokens, fed


# ---- results of `python -m decoding tune` ---------------------------------------------------
def tune_path(curve: CostCurve):
    """Where `python -m decoding tune` leaves its last ranking for the app."""
    from ..model import cache_dir

    return cache_dir() / "tune" / f"{curve.key()}.json"


def format_ranking(ranked: list[dict], curve: CostCurve) -> str:
    head = f"{'category':<16}{'setting':<26}{'n':>3}{'fed/step':>9}{'tok/step':>9}{'cost':>7}{'pred':>7}{'meas':>7}  note"
    lines = [f"step costs: {curve.model_id} on {curve.regime}", head, "-" * len(head)]
    f = lambda v: "-" if v is None else f"{v:.2f}"
    best = {}
    for r in ranked:
        best.setdefault((r["category"], r["method"]), r["setting"])
    for r in ranked:
        note = []
        if best[(r["category"], r["method"])] == r["setting"]:
            note.append("RECOMMENDED")
        if r["default"]:
            note.append("default")
        if not r["exact"]:
            note.append("NOT EXACT")
        lines.append(f"{r['category'][:15]:<16}{r['setting']:<26}{r['prompts']:>3}{r['fed_per_step']:>9.1f}{r['tokens_per_step']:>9.2f}"
                     f"{r['step_cost']:>7.2f}{f(r['predicted']):>7}{f(r['measured']):>7}  {' '.join(note)}")
    lines.append("(pred: tokens/step ÷ step cost × overhead, prefill included; meas: tokens/s over AR's; geometric means over prompts)")
    return "\n".join(lines)


def tune_result(curve: CostCurve, ranked: list[dict], max_new_tokens: int, chat: bool, prompts: int) -> dict:
    """What `python -m decoding tune` keeps for the app (find_tune_result reads it back)."""
    return {"model_id": curve.model_id, "regime": curve.regime, "curve": curve.to_dict(), "max_new_tokens": max_new_tokens,
            "chat": chat, "prompts": prompts, "ranking": ranked,
            "recommended": {m: r["setting"] for m, r in recommend(ranked).items()}}


def save_tune_result(result: dict, curve: CostCurve) -> None:
    path = tune_path(curve)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(result, indent=1))


def find_tune_result(model_id: str, device: str, shipped: tuple = ()) -> tuple[dict, str] | None:
    """The latest `python -m decoding tune` result for this model/device (cache folder first, then
    the ``shipped`` files), as (result, where it came from)."""
    from ..model import cache_dir

    prefix = curve_key(model_id, device, "x", 0).split("__x__")[0] + "__"
    cands = sorted((cache_dir() / "tune").glob("*.json"), key=lambda p: p.stat().st_mtime, reverse=True)
    for p, where in [(p, "this machine's last `python -m decoding tune`") for p in cands if p.name.startswith(prefix)] + \
                    [(Path(p), f"shipped with the app ({Path(p).name})") for p in shipped]:
        try:
            d = json.loads(Path(p).read_text())
        except (OSError, ValueError):
            continue
        if d.get("model_id") == model_id and d.get("curve", {}).get("device") == device:
            return d, where
    return None
