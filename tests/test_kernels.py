"""The skinny and oneDNN linear kernels (decoding/kernels.py): the same products as F.linear up to
float rounding, F.linear wherever they do not apply, and every method on a model that uses them
still equals transformers' greedy generate on the stock model."""

from __future__ import annotations

import dataclasses

import pytest
import torch
import torch.nn.functional as F

from decoding import kernels
from decoding.kernels import MAX_ROWS, onednn_ok, skinny_forward, skinny_rows, use_skinny
from decoding.loop import decode
from decoding.model import ModelError, _check_options
from decoding.trace import Trace, TraceError
from test_equivalence import SETTINGS, _prompt
from tiny import generate_greedy, tiny_lm


@pytest.mark.parametrize("bias", [False, True])
def test_skinny_products_equal_linear(bias):
    torch.manual_seed(0)
    lin = torch.nn.Linear(48, 80, bias=bias)
    with torch.inference_mode():
        for rows in range(1, MAX_ROWS + 9):
            for shape in ((1, rows, 48), (rows, 48)):
                x = torch.randn(*shape)
                got, ref = skinny_forward(lin, x), F.linear(x, lin.weight, lin.bias)
                assert got.shape == ref.shape and got.is_contiguous()
                if skinny_rows(rows):
                    torch.testing.assert_close(got, ref, rtol=1e-5, atol=1e-5)
                else:  # the rows the skinny path does not take: F.linear itself, bit for bit
                    assert torch.equal(got, ref), rows
        x = torch.randn(1, 3, 48).transpose(0, 1)  # a non-contiguous input
        torch.testing.assert_close(skinny_forward(lin, x), F.linear(x, lin.weight, lin.bias), rtol=1e-5, atol=1e-5)


needs_onednn = pytest.mark.skipif(not onednn_ok(), reason="this torch has no oneDNN (mkldnn)")


@needs_onednn
@pytest.mark.parametrize("bias", [False, True])
def test_onednn_products_equal_linear(bias):
    """Every row count: oneDNN's packed product (3 rows and more) or the skinny one (1-2 rows)
    close to F.linear; F.linear itself with gradients; a weight changed in place is packed again
    before its next product."""
    torch.manual_seed(0)
    lin = torch.nn.Linear(48, 80, bias=bias)
    assert use_skinny(torch.nn.Sequential(lin), "onednn") == "onednn" and hasattr(lin, "_onednn")
    with torch.inference_mode():
        for rows in list(range(1, MAX_ROWS + 9)) + [100, 300]:
            for shape in ((1, rows, 48), (rows, 48)):
                x = torch.randn(*shape)
                got, ref = lin(x), F.linear(x, lin.weight, lin.bias)
                assert got.shape == ref.shape and got.is_contiguous()
                torch.testing.assert_close(got, ref, rtol=1e-5, atol=1e-5)
        x = torch.randn(1, 5, 48).transpose(0, 1)  # a non-contiguous input
        torch.testing.assert_close(lin(x), F.linear(x, lin.weight, lin.bias), rtol=1e-5, atol=1e-5)
    with torch.no_grad():
        lin.weight.mul_(-2.0)  # trained, say: the packed copy is stale
    with torch.inference_mode():
        x = torch.randn(6, 48)
        torch.testing.assert_close(lin(x), F.linear(x, lin.weight, lin.bias), rtol=1e-5, atol=1e-5)
    y = lin(torch.randn(6, 48, requires_grad=True))  # gradients: F.linear
    y.sum().backward()
    assert lin.weight.grad is not None


def test_onednn_falls_back_to_skinny_where_it_cannot_pack(monkeypatch):
    monkeypatch.setattr(kernels, "onednn_ok", lambda: False)
    lin = torch.nn.Linear(8, 8)
    assert use_skinny(torch.nn.Sequential(lin), "onednn") == "skinny" and not hasattr(lin, "_onednn")
    with torch.inference_mode():
        x = torch.randn(5, 8)
        torch.testing.assert_close(lin(x), F.linear(x, lin.weight, lin.bias), rtol=1e-5, atol=1e-5)


def test_rows_rule():
    assert [r for r in range(1, 41) if skinny_rows(r)] == list(range(1, 12)) + [16, 24, 32]
    assert not skinny_rows(0)


def test_training_keeps_linear_and_its_gradients():
    torch.manual_seed(0)
    lin = torch.nn.Linear(16, 8)
    use_skinny(torch.nn.Sequential(lin), "skinny")
    x = torch.randn(1, 2, 16, requires_grad=True)
    y = lin(x)  # grad enabled: F.linear, bit for bit
    assert torch.equal(y, F.linear(x, lin.weight, lin.bias))
    y.sum().backward()
    assert lin.weight.grad is not None and x.grad is not None


def test_kernel_choice():
    model = torch.nn.Sequential(torch.nn.Linear(4, 4))
    before = model[0].forward
    assert use_skinny(model, "stock") == "stock" and model[0].forward == before
    with pytest.raises(ValueError, match="unknown kernel"):
        use_skinny(model, "fast")
    assert use_skinny(model, "skinny") == "skinny" and model[0].forward != before
    with pytest.raises(ModelError, match="kernel"):
        _check_options("cpu", None, "fast", None, False)
    with pytest.raises(ModelError, match="device-map"):
        _check_options("cpu", None, "skinny", "auto", False)
    with pytest.raises(ModelError, match="device-map"):
        _check_options("cpu", None, "onednn", "auto", False)
    assert _check_options("cpu", None, "auto", None, False) == "float32"


def test_auto_keeps_its_choice_per_machine(tmp_path, monkeypatch):
    """Issue 23, item 6: kernel=auto measured under load picked the stock kernel by noise. A skinny
    choice is kept in the cache folder and stands; a stock result is kept only when measured on a
    quiet machine; another machine (another key) measures for itself."""
    from decoding import kernels
    monkeypatch.setenv("PDL_CACHE", str(tmp_path))
    model = torch.nn.Sequential(torch.nn.Linear(8, 8))
    gains = []
    monkeypatch.setattr(kernels, "skinny_gain", lambda m, repeats=5: gains.pop(0))
    monkeypatch.setattr(kernels, "onednn_gain", lambda m, repeats=5: 1.0)  # oneDNN no faster: its own test below
    monkeypatch.setattr(kernels, "fewrows_gain", lambda m, k, repeats=5, progress=None: 1.0)  # tests/test_fewrows.py
    monkeypatch.setattr(kernels, "_quiet", lambda: False)
    gains[:] = [0.9]  # busy machine, stock by noise: not kept
    assert kernels.auto_choice(model)[0] == "stock" and not kernels.choice_file().exists()
    gains[:] = [1.8]  # measured skinny: kept
    kernel, why = kernels.auto_choice(model)
    assert kernel == "skinny" and why["from"] == "measured" and why["gain"] == 1.8
    gains[:] = [0.7]  # later, under load: the kept choice stands, nothing measured
    kernel, why = kernels.auto_choice(model)
    assert kernel == "skinny" and why["from"] == "kept" and gains == [0.7]
    assert kernels.use_skinny(torch.nn.Sequential(torch.nn.Linear(8, 8)), "auto") == "skinny"
    other = torch.nn.Sequential(torch.nn.Linear(8, 16))  # another weight shape: its own key, measured
    monkeypatch.setattr(kernels, "_quiet", lambda: True)
    assert kernels.auto_choice(other)[0] == "stock" and gains == []
    kept = kernels._read_choices()
    assert {r["kernel"] for r in kept.values()} == {"skinny", "stock"} and len(kept) == 2
    gains[:] = [1.5]  # a quiet stock result is kept but never blocks a later skinny measurement
    assert kernels.auto_choice(other)[0] == "skinny" and gains == []
    monkeypatch.setenv("PDL_CACHE", str(tmp_path / "file"))
    (tmp_path / "file").write_text("not a folder")
    gains[:] = [1.5]
    assert kernels.auto_choice(model)[0] == "skinny"  # an unwritable cache: measured, not kept, no error


def test_auto_picks_onednn_where_it_measures_faster(tmp_path, monkeypatch):
    monkeypatch.setenv("PDL_CACHE", str(tmp_path))
    monkeypatch.setattr(kernels, "skinny_gain", lambda m, repeats=5: 1.8)
    monkeypatch.setattr(kernels, "onednn_gain", lambda m, repeats=5: 1.6)
    monkeypatch.setattr(kernels, "fewrows_gain", lambda m, k, repeats=5, progress=None: 1.0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 8))
    kernel, why = kernels.auto_choice(model)
    assert kernel == "onednn" and why["onednn_gain"] == 1.6 and why["from"] == "measured"
    monkeypatch.setattr(kernels, "onednn_gain", lambda m, repeats=5: 0.5)  # kept: not measured again
    assert kernels.auto_choice(model)[:1] == ("onednn",) and kernels.auto_choice(model)[1]["from"] == "kept"
    monkeypatch.setattr(kernels, "room_for_packing", lambda m: False)  # no room for the packed copy: skinny
    other = torch.nn.Sequential(torch.nn.Linear(8, 24))
    monkeypatch.setattr(kernels, "onednn_gain", lambda m, repeats=5: 3.0)
    assert kernels.auto_choice(other)[0] == "skinny"


KERNEL_RUNS = ["skinny"] + (["onednn"] if onednn_ok() else [])


@pytest.fixture(scope="module")
def skinny_models():
    out = {}
    for kernel in KERNEL_RUNS:
        for key in (("llama", 0), ("qwen2", 1)):
            lm = tiny_lm(*key)
            assert use_skinny(lm.model, kernel) == kernel
            out[key + (kernel,)] = (dataclasses.replace(lm, kernel=kernel), tiny_lm(*key))  # (kernel, stock twin)
    out[("llama", 0)] = out[("llama", 0, "skinny")]
    return out


@pytest.mark.parametrize("kernel", KERNEL_RUNS)
@pytest.mark.parametrize("key", [("llama", 0), ("qwen2", 1)], ids=lambda k: f"{k[0]}{k[1]}")
@pytest.mark.parametrize("method,params", SETTINGS, ids=lambda x: str(x) if isinstance(x, str) else "-".join(f"{k}{v}" for k, v in x.items()))
def test_skinny_runs_equal_stock_generate(skinny_models, key, method, params, kernel):
    fast, stock = skinny_models[key + (kernel,)]
    for plen, K in ((1, 21), (9, 30), (45, 37)):
        prompt = _prompt(plen * 7 + key[1], plen)
        out = decode(fast, prompt, method, params, K)
        assert out.output_ids == generate_greedy(stock, prompt, K), (plen, K)
        assert out.kernel == kernel


def test_trace_keeps_its_kernel(skinny_models):
    skinny, _ = skinny_models[("llama", 0)]
    t = decode(skinny, [1, 2, 3], "ar", {}, 4)
    d = t.to_dict()
    assert Trace.from_dict(d).kernel == "skinny"
    d.pop("kernel")
    assert Trace.from_dict(d).kernel == "stock"  # traces written before the field: the stock kernel
    d["kernel"] = "magic"
    with pytest.raises(TraceError, match="kernel"):
        Trace.from_dict(d)


def test_curves_are_found_per_kernel(tmp_path, monkeypatch):
    from pathlib import Path

    from decoding.perf.costs import CostCurve, find_curve

    monkeypatch.setenv("PDL_CACHE", str(tmp_path))  # an empty cache folder: only the shipped files
    assets = Path(__file__).resolve().parents[1] / "assets"
    shipped = (assets / "cost_curve_cpu.json", assets / "cost_curve_cpu-stock.json", assets / "cost_curve_cpu-onednn.json",
               assets / "cost_curve_cpu-fewrows.json", assets / "cost_curve_cpu-fewrows-compiled.json")
    model = CostCurve.load(shipped[0]).model_id
    for kernel, i in (("skinny", 0), ("stock", 1), ("onednn", 2), ("fewrows", 3), ("fewrows+compiled", 4)):
        c, where = find_curve(model, "cpu", "float32", shipped, kernel)
        assert c.kernel == kernel and shipped[i].name in where
    assert find_curve(model, "cpu", "float32", shipped, "other") is None
