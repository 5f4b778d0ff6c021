"""One prepared check for a CUDA machine (torch + transformers, no network, no weights): writes JSON
results to the folder given as its argument, in under 8 minutes on one H200.

  1. equivalence: tiny random Llama models on the device, float32 and bfloat16, every greedy method
     (AR, Jacobi, lookahead, prompt lookup) vs AR: the share of runs and tokens that match, the first
     divergences (equivalence.json);
  2. step-cost curves: randomly initialised models built from the configs in assets/
     (SmolLM2-135M's and a Llama-7B-class config) in bfloat16: the cost of one forward over k tokens
     on a cached context (cost_curve_<device>_<config>.json; the weights do not change the cost);
  3. the compiled step (decoding/compiled.py; on CUDA one captured CUDA graph per fed and cache size,
     gpt-fast's approach) against the eager step: greedy methods on it against eager AR (tiny model,
     float32), the step-cost curves of both and an AR decode on both on the SmolLM2-135M config
     (compiled_step.json; 1, 4, 8 and 16 fed tokens: a graph each to build);
  4. per-step overheads: a short lookahead / PLD / Jacobi run on the random 7B-class model: the share
     of a step spent outside the forward, tokens fed per step (overheads.json).

    python scripts/gpu_check.py OUT_DIR                 # on the GPU machine
    python scripts/gpu_check.py OUT_DIR --small --device cpu   # the CPU test: a tiny config, a few k
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from dataclasses import asdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

import torch

from decoding.exactness import agreement
from decoding.loop import decode
from decoding.model import LoadedModel

CONFIGS = {"smollm2-135m": ROOT / "assets" / "config_smollm2-135m.json", "llama-7b": ROOT / "assets" / "config_llama-7b.json"}
TINY = {"model_type": "llama", "vocab_size": 512, "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2,
        "num_attention_heads": 4, "num_key_value_heads": 2, "max_position_embeddings": 2048, "initializer_range": 0.2,
        "tie_word_embeddings": False}
METHODS = [("ar", {}), ("jacobi", {"n": 8}), ("lookahead", {"W": 5, "N": 4, "G": 5}), ("pld", {})]


class IdTokenizer:
    chat_template = None
    eos_token_id = None

    def decode(self, ids, **_):
        return "".join(f"<{int(t)}>" for t in ids)


def build(config: dict, device: str, dtype: torch.dtype, seed: int = 0, name: str = "random") -> LoadedModel:
    """A randomly initialised causal LM from a config dict, made directly on ``device`` in ``dtype``."""
    from transformers import AutoConfig, AutoModelForCausalLM

    cfg = {k: v for k, v in config.items() if not k.startswith("_")}
    cfg.update(eos_token_id=None, bos_token_id=None, pad_token_id=None)
    conf = AutoConfig.for_model(cfg.pop("model_type"), **cfg)
    torch.manual_seed(seed)
    with torch.device(device):
        model = AutoModelForCausalLM.from_config(conf, dtype=dtype)
    model.eval()
    model.generation_config.eos_token_id = None
    return LoadedModel(model, IdTokenizer(), name, device, str(dtype).replace("torch.", ""))


def prompts(vocab: int, n: int, length: int = 48) -> list[list[int]]:
    """Random prompts with repeats (so lookahead / PLD find candidates), seeded."""
    g = torch.Generator().manual_seed(1)
    out = []
    for _ in range(n):
        base = torch.randint(0, vocab, (length // 3,), generator=g).tolist()
        out.append(base + base[: length // 3] + torch.randint(0, vocab, (length - 2 * (length // 3),), generator=g).tolist())
    return out


def equivalence(device: str, n_prompts: int, new_tokens: int, seeds: list[int]) -> dict:
    rows = []
    for dtype in (torch.float32, torch.bfloat16):
        for seed in seeds:
            lm = build(TINY, device, dtype, seed, f"tiny-{seed}")
            for i, p in enumerate(prompts(TINY["vocab_size"], n_prompts)):
                ref = decode(lm, p, "ar", {}, new_tokens, record=False).output_ids
                for m, params in METHODS[1:]:
                    out = decode(lm, p, m, params, new_tokens, record=False).output_ids
                    rows.append({"dtype": lm.dtype, "seed": seed, "prompt": i, "method": m, **agreement(out, ref)})
    share = {}
    for r in rows:
        s = share.setdefault(f"{r['method']} {r['dtype']}", {"runs": 0, "runs_matching": 0, "tokens": 0, "tokens_matching": 0})
        s["runs"] += 1
        s["runs_matching"] += r["first_divergence"] is None
        s["tokens"] += r["ar_compared"]
        s["tokens_matching"] += r["ar_match"]
    return {"device": device, "new_tokens": new_tokens, "share": share, "runs": rows}


def curve(name: str, config: dict, device: str, dtype: torch.dtype, ks: list[int], context: int, repeats: int) -> dict:
    from decoding.perf.measure import measure_curve

    lm = build(config, device, dtype, 0, f"random {name}")
    c = measure_curve(lm, ks=ks, context=context, repeats=repeats, ar_tokens=16)
    d = asdict(c) | {"config": name, "weights": "random (the cost depends on the architecture, dtype and hardware)",
                     "gpu": torch.cuda.get_device_name() if device.startswith("cuda") else None}
    del lm
    if device.startswith("cuda"):
        torch.cuda.empty_cache()
    return d


def _ar_step_ms(lm, p: list[int], new_tokens: int) -> tuple[list[int], float]:
    tr = decode(lm, p, "ar", {}, new_tokens)
    return tr.output_ids, 1000 * statistics.median(s.seconds for s in tr.steps if s.seconds > 0)


def compiled_step(name: str, config: dict, device: str, dtype: torch.dtype, ks: list[int], context: int, repeats: int,
                  new_tokens: int, methods: list[tuple[str, dict]]) -> dict:
    """The compiled step against the eager step: exactness (every method of ``methods`` on the
    compiled step against eager AR, tiny model, float32), then on ``config`` in ``dtype`` both
    steps' cost curves and an AR decode's median step (the compiled one after its graphs are built)."""
    from decoding.compiled import compile_possible
    from decoding.model import with_step
    from decoding.perf.measure import measure_curve

    if compile_possible() is not None:
        return {"config": name, "device": device, "skipped": compile_possible()}
    eager = build(TINY, device, torch.float32, 0, "tiny-0")
    comp = with_step(build(TINY, device, torch.float32, 0, "tiny-0"), "compiled")
    rows = []
    for i, p in enumerate(prompts(TINY["vocab_size"], 2)):
        ref = decode(eager, p, "ar", {}, new_tokens, record=False).output_ids
        for m, params in methods:
            tr = decode(comp, p, m, params, new_tokens, record=False)
            rows.append({"prompt": i, "method": m, "step": tr.step, **agreement(tr.output_ids, ref)})
    lm = build(config, device, dtype, 0, f"random {name}")
    p = prompts(config["vocab_size"], 1, 96)[0]
    decode(lm, p, "ar", {}, 4, record=False)  # warm-up
    e_ids, e_ms = _ar_step_ms(lm, p, new_tokens)
    e_curve = measure_curve(lm, ks=ks, context=context, repeats=repeats, ar_tokens=0)
    with_step(lm, "compiled")
    decode(lm, p, "ar", {}, 4, record=False)  # builds the 1-token graph
    c_ids, c_ms = _ar_step_ms(lm, p, new_tokens)
    c_curve = measure_curve(lm, ks=ks, context=context, repeats=repeats, ar_tokens=0)
    out = {"config": name, "dtype": str(dtype).replace("torch.", ""), "device": device,
           "cuda_graphs": lm.compiled.cuda, "broken": lm.compiled.broken, "compile_seconds": round(lm.compiled.compile_seconds, 1),
           "exact_runs": sum(r["first_divergence"] is None for r in rows), "runs": len(rows), "rows": rows,
           "ar_step_ms": {"eager": e_ms, "compiled": c_ms}, "ar_speedup": e_ms / c_ms,
           "ar_agreement": agreement(c_ids, e_ids),
           "curves": {"ks": e_curve.ks, "eager_s": e_curve.seconds, "compiled_s": c_curve.seconds}}
    del lm
    if device.startswith("cuda"):
        torch.cuda.empty_cache()
    return out


def overheads(name: str, config: dict, device: str, dtype: torch.dtype, new_tokens: int) -> dict:
    lm = build(config, device, dtype, 0, f"random {name}")
    p = prompts(config["vocab_size"], 1, 96)[0]
    decode(lm, p, "ar", {}, 4, record=False)  # warm-up
    out = {}
    for m, params in [("ar", {}), ("lookahead", {"W": 5, "N": 4, "G": 5}), ("pld", {}), ("jacobi", {"n": 8})]:
        tr = decode(lm, p, m, params, new_tokens)
        steps = [s for s in tr.steps if s.seconds > 0]
        out[m] = {"steps": tr.n_steps, "tokens_per_step": tr.tokens_per_step,
                  "fed_per_step": statistics.mean(s.fed for s in steps) if steps else None,
                  "step_seconds_median": statistics.median(s.seconds for s in steps) if steps else None,
                  "forward_seconds_median": statistics.median(s.forward_seconds for s in steps) if steps else None,
                  "overhead_share_median": statistics.median((s.seconds - s.forward_seconds) / s.seconds for s in steps) if steps else None}
    del lm
    if device.startswith("cuda"):
        torch.cuda.empty_cache()
    return {"config": name, "dtype": str(dtype).replace("torch.", ""), "device": device, "new_tokens": new_tokens, "methods": out}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("out", help="folder for the JSON results")
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--small", action="store_true", help="the CPU test: a tiny config in place of both, few k, short runs")
    ap.add_argument("--budget-s", type=float, default=450, help="skip what is left after this many seconds")
    a = ap.parse_args(argv)
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    dev_label = "cpu" if a.device == "cpu" else (torch.cuda.get_device_name().split()[-1].lower() if a.device.startswith("cuda") else a.device)
    summary = {"device": a.device, "device_name": dev_label, "torch": torch.__version__, "small": a.small, "parts": {}}
    configs = {"tiny": TINY} if a.small else {k: json.loads(v.read_text()) for k, v in CONFIGS.items()}
    half = torch.float32 if a.small else torch.bfloat16
    ks = [1, 2, 4, 8] if a.small else [1, 2, 4, 8, 16, 32, 64, 128, 256]
    jobs = [("equivalence", lambda: equivalence(a.device, 2 if a.small else 4, 16 if a.small else 64, [0] if a.small else [0, 1, 2]),
             "equivalence.json")]
    for name, cfg in configs.items():
        jobs.append((f"curve {name}", lambda name=name, cfg=cfg: curve(name, cfg, a.device, half, ks, 64 if a.small else 512, 2 if a.small else 5),
                     f"cost_curve_{dev_label}_{name}.json"))
    small = "tiny" if a.small else "smollm2-135m"
    jobs.insert(1, ("compiled step", lambda: compiled_step(small, configs[small], a.device, half, [1, 2] if a.small else [1, 4, 8, 16],
                                                           64 if a.small else 512, 2 if a.small else 5, 8 if a.small else 64,
                                                           [("ar", {}), ("jacobi", {"n": 4})] if a.small else METHODS),
                    "compiled_step.json"))
    big = "tiny" if a.small else "llama-7b"
    jobs.append(("overheads", lambda: overheads(big, configs[big], a.device, half, 12 if a.small else 48), "overheads.json"))
    for label, job, fname in jobs:
        if time.perf_counter() - t0 > a.budget_s:
            summary["parts"][label] = "skipped (time budget)"
            continue
        t = time.perf_counter()
        try:
            res = job()
            (out / fname).write_text(json.dumps(res, indent=1))
            summary["parts"][label] = {"file": fname, "seconds": round(time.perf_counter() - t, 1)}
        except Exception as e:  # one failed part does not lose the others
            summary["parts"][label] = f"failed: {type(e).__name__}: {e}"[:500]
        print(f"{label}: {summary['parts'][label]}", flush=True)
        (out / "summary.json").write_text(json.dumps(summary, indent=1))
    summary["seconds"] = round(time.perf_counter() - t0, 1)
    (out / "summary.json").write_text(json.dumps(summary, indent=1))
    return 0 if all(isinstance(v, dict) for v in summary["parts"].values()) else 1


if __name__ == "__main__":
    sys.exit(main())
