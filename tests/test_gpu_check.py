"""scripts/gpu_check end to end on the CPU with a tiny config (its GPU run needs a CUDA machine)."""

import importlib.util
import json
import sys
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]


def load_script():
    spec = importlib.util.spec_from_file_location("gpu_check", ROOT / "scripts" / "gpu_check.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules["gpu_check"] = mod
    spec.loader.exec_module(mod)
    return mod


def test_gpu_check_runs_end_to_end_on_the_cpu(tmp_path):
    gc = load_script()
    assert gc.main([str(tmp_path), "--small", "--device", "cpu"]) == 0
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert all(isinstance(v, dict) for v in summary["parts"].values())
    eq = json.loads((tmp_path / "equivalence.json").read_text())
    for key, s in eq["share"].items():  # fp32: every method equals AR
        if key.endswith("float32"):
            assert s["runs_matching"] == s["runs"] and s["tokens_matching"] == s["tokens"], key
    assert {k.split()[1] for k in eq["share"]} == {"float32", "bfloat16"}
    c = json.loads((tmp_path / "cost_curve_cpu_tiny.json").read_text())
    assert c["ks"] == [1, 2, 4, 8] and len(c["seconds"]) == 4 and all(s > 0 for s in c["seconds"])
    cs = json.loads((tmp_path / "compiled_step.json").read_text())  # the compiled step (CPU: no CUDA graphs)
    if "skipped" not in cs and not cs["broken"]:
        assert cs["runs"] == 4 and cs["exact_runs"] == 4 and {r["step"] for r in cs["rows"]} == {"compiled"}
        assert cs["cuda_graphs"] is False and cs["ar_agreement"]["first_divergence"] is None
        assert cs["curves"]["ks"] == [1, 2] and all(s > 0 for s in cs["curves"]["eager_s"] + cs["curves"]["compiled_s"])
        assert cs["ar_step_ms"]["compiled"] > 0 and cs["ar_speedup"] > 0
    ov = json.loads((tmp_path / "overheads.json").read_text())["methods"]
    assert set(ov) == {"ar", "lookahead", "pld", "jacobi"} and 0 <= ov["lookahead"]["overhead_share_median"] < 1


def test_shipped_configs_are_the_two_architectures():
    gc = load_script()
    sizes = {}
    for name, path in gc.CONFIGS.items():
        lm = gc.build(json.loads(path.read_text()), "meta", torch.bfloat16, name=name)  # no memory: shapes only
        sizes[name] = sum(p.numel() for p in lm.model.parameters())
    assert 120e6 < sizes["smollm2-135m"] < 150e6
    assert 6.5e9 < sizes["llama-7b"] < 7e9
