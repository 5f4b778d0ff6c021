"""The few-row product kernel (decoding/fewrows.py, decoding/csrc/fewrows.cpp) and its place among
the kernels (decoding/kernels.py): the same products as F.linear up to float rounding, each row's
result independent of the other rows (bit for bit), F.linear where it does not apply, the stock
kernel where it cannot be built, and every method on it equal to transformers' greedy generate."""

from __future__ import annotations

import dataclasses
import shutil

import pytest
import torch
import torch.nn.functional as F

from decoding import fewrows, kernels
from decoding.kernels import fewrows_ok, use_skinny
from decoding.loop import decode
from test_equivalence import SETTINGS, _prompt
from tiny import generate_greedy, tiny_lm

HAS_COMPILER = shutil.which("c++") is not None or shutil.which("g++") is not None
needs_fewrows = pytest.mark.skipif(not HAS_COMPILER, reason="no C++ compiler to build the few-row kernel")


@needs_fewrows
def test_the_kernel_builds_where_a_compiler_is():
    assert fewrows_ok(), fewrows.why()
    assert fewrows.why() == ""


def _products_and_rows(ops, N: int, K: int, bias: bool):
    torch.manual_seed(N + K)
    w = torch.randn(N, K)
    b = torch.randn(N) if bias else None
    packed = ops.pack(w)
    assert packed.shape == (-(-N // ops.panel_width()), K, ops.panel_width())
    for rows in range(1, fewrows.MAX_ROWS + 5):
        x = torch.randn(rows, K)
        y = ops.linear(x, packed, b, N)
        torch.testing.assert_close(y, F.linear(x, w, b), rtol=1e-5, atol=1e-4)
        for r in range(rows):  # row invariance: each row alone gives the same bits
            assert torch.equal(ops.linear(x[r:r + 1], packed, b, N)[0], y[r]), (rows, r)
        for more in {rows + 1, rows + 3, 2 * rows} - {rows}:  # computed as more rows (kernels.row_plan): the same bits
            padded = ops.linear(x, packed, b, N, more)
            assert padded.shape == (rows, N) and torch.equal(padded, y), (rows, more)


@needs_fewrows
@pytest.mark.parametrize("bias", [False, True])
@pytest.mark.parametrize("N,K", [(80, 48), (33, 7), (1, 1), (100, 576)])
def test_products_equal_linear_and_rows_are_invariant(N, K, bias):
    assert fewrows_ok(), fewrows.why()
    _products_and_rows(kernels._few[0], N, K, bias)


@needs_fewrows
@pytest.mark.slow
def test_the_build_without_avx512_is_right_too():
    """The portable paths of the source (AVX2, 16-column panels): another build under its own namespace."""
    flags = tuple(f for f in fewrows.FLAGS) + ("-mno-avx512f",)
    ops = fewrows.ops(flags=flags, namespace="pdl_fewrows_noavx512")
    assert ops is not None, fewrows.why("pdl_fewrows_noavx512")
    assert ops.panel_width() in (16, 32)
    _products_and_rows(ops, 100, 48, True)


@needs_fewrows
def test_the_fewrows_forward_and_its_fallbacks():
    """Through nn.Linear: 1..MAX_ROWS rows take the kernel, more rows, gradients and other dtypes
    F.linear bit for bit; a weight changed in place is packed again before its next product."""
    torch.manual_seed(0)
    lin = torch.nn.Linear(48, 80)
    assert use_skinny(torch.nn.Sequential(lin), "fewrows") == "fewrows" and hasattr(lin, "_fewrows")
    with torch.inference_mode():
        for rows in (1, 3, 8, fewrows.MAX_ROWS):
            x = torch.randn(1, rows, 48)
            torch.testing.assert_close(lin(x), F.linear(x, lin.weight, lin.bias), rtol=1e-5, atol=1e-4)
        lin._few_limit = fewrows.MAX_ROWS  # past the machine's row limit: F.linear
        x = torch.randn(1, fewrows.MAX_ROWS + 1, 48)
        assert torch.equal(lin(x), F.linear(x, lin.weight, lin.bias))
        x = torch.randn(1, 5, 48).transpose(0, 1)  # non-contiguous
        torch.testing.assert_close(lin(x), F.linear(x, lin.weight, lin.bias), rtol=1e-5, atol=1e-4)
    x = torch.randn(2, 48, requires_grad=True)
    y = lin(x)
    assert y.requires_grad and torch.equal(y, F.linear(x, lin.weight, lin.bias))
    with torch.no_grad():
        lin.weight.mul_(2.0)
    with torch.inference_mode():
        x = torch.randn(3, 48)
        torch.testing.assert_close(lin(x), F.linear(x, lin.weight, lin.bias), rtol=1e-5, atol=1e-4)


def test_the_row_plan_computes_a_count_as_the_faster_larger_one():
    """kernels.plan_from_times: r rows computed as the count r' >= r that measures fastest, if by
    PLAN_GAIN (the AMD EPYC's AVX2 sweeps: 2 and 3 rows slower than 4, 7 slower than 8)."""
    amd = [0, 19.3, 25.4, 26.0, 21.5, 24.2, 27.9, 43.8, 38.3]
    assert kernels.plan_from_times(amd) == [0, 1, 4, 4, 4, 5, 6, 8, 8]
    assert kernels.plan_from_times([0, 21.5, 22.7, 24.0, 25.4, 27.0]) == [0, 1, 2, 3, 4, 5]  # rising: none
    assert kernels.plan_from_times([0, 10.0, 10.2, 9.9]) == [0, 1, 2, 3]  # within the margin: none


def _measured_layer(tmp_path, monkeypatch, seed: int):
    """A 48 -> 80 layer on the few-row kernel, its row plan and limit measured into a cache folder of its own
    (on a machine taken as quiet, so they are kept there)."""
    monkeypatch.setenv("PDL_CACHE", str(tmp_path))
    monkeypatch.setattr(kernels, "_quiet", lambda: True)
    torch.manual_seed(seed)
    lin = torch.nn.Linear(48, 80)
    model = torch.nn.Sequential(lin)
    assert use_skinny(model, "fewrows") == "fewrows"
    return lin, model


@needs_fewrows
def test_a_row_plan_is_kept_per_machine_and_changes_no_bit(tmp_path, monkeypatch):
    lin, model = _measured_layer(tmp_path, monkeypatch, seed=0)
    assert len(lin._row_plan) == kernels.PLAN_ROWS + 1 and all(q >= r for r, q in enumerate(lin._row_plan))
    monkeypatch.setattr(kernels, "_median_seconds", lambda fn, repeats: pytest.fail("measured again"))
    assert kernels.row_plan(model) == lin._row_plan  # kept in the cache folder
    with torch.inference_mode():
        x = torch.randn(1, 5, 48)
        lin._row_plan = list(range(kernels.PLAN_ROWS + 1))
        plain = lin(x)
        lin._row_plan = [min(r + 3, kernels.PLAN_ROWS) for r in range(kernels.PLAN_ROWS + 1)]
        assert torch.equal(lin(x), plain)


def test_the_row_limit_is_the_last_probe_up_to_which_the_kernel_won():
    """kernels.limit_from_times: the kernel takes rows in passes up to the largest probe it won at,
    every smaller probe won too; MAX_ROWS where it lost at the first."""
    rows = [64, 128, 256, 512]
    assert kernels.limit_from_times(rows, [55, 101, 232, 470], [132, 232, 459, 900]) == 512  # Zen 5 + MKL
    assert kernels.limit_from_times(rows, [55, 101, 232, 470], [132, 90, 459, 900]) == 64  # lost at 128: no further
    assert kernels.limit_from_times(rows, [55, 101], [50, 232]) == fewrows.MAX_ROWS


@needs_fewrows
def test_rows_past_one_pass_keep_each_rows_bits_up_to_the_limit(tmp_path, monkeypatch):
    """More rows than one pass (up to the row limit) go through the kernel in passes, each row's
    result the one-row product's bit for bit; past the limit F.linear. The limit is kept per machine."""
    lin, model = _measured_layer(tmp_path, monkeypatch, seed=1)
    assert lin._few_limit in {fewrows.MAX_ROWS} | {p * fewrows.MAX_ROWS for p in kernels.LIMIT_PASSES}
    monkeypatch.setattr(kernels, "_median_seconds", lambda fn, repeats: pytest.fail("measured again"))
    assert kernels.row_limit(model) == lin._few_limit  # kept in the cache folder
    rows = 2 * fewrows.MAX_ROWS + 3
    x = torch.randn(1, rows, 48)
    with torch.inference_mode():
        lin._few_limit = 4 * fewrows.MAX_ROWS
        many = lin(x)
        for r in (0, fewrows.MAX_ROWS, rows - 1):
            assert torch.equal(many[0, r], lin(x[:, r:r + 1])[0, 0])
        torch.testing.assert_close(many, F.linear(x, lin.weight, lin.bias), rtol=1e-5, atol=1e-4)
        lin._few_limit = 2 * fewrows.MAX_ROWS
        assert torch.equal(lin(x), F.linear(x, lin.weight, lin.bias))


def test_a_kernel_that_cannot_build_leaves_the_stock_one(monkeypatch):
    monkeypatch.setattr(kernels, "fewrows_ok", lambda progress=None: False)
    lin = torch.nn.Linear(8, 8)
    before = lin.forward
    assert use_skinny(torch.nn.Sequential(lin), "fewrows") == "stock"
    assert lin.forward == before and not hasattr(lin, "_fewrows")
    assert kernels.fewrows_gain(torch.nn.Sequential(lin), "stock") == 0.0


def test_a_build_failure_is_said_not_raised(tmp_path, monkeypatch):
    monkeypatch.setenv("PDL_CACHE", str(tmp_path))
    monkeypatch.setenv("CXX", "/nonexistent/c++")
    assert fewrows.ops(flags=fewrows.FLAGS + ("-DBROKEN",), namespace="pdl_fewrows_broken") is None
    assert fewrows.why("pdl_fewrows_broken")
    assert fewrows.ops(flags=fewrows.FLAGS + ("-DBROKEN",), namespace="pdl_fewrows_broken") is None  # not tried again


def test_auto_picks_fewrows_where_it_measures_faster(tmp_path, monkeypatch):
    monkeypatch.setenv("PDL_CACHE", str(tmp_path))
    monkeypatch.setattr(kernels, "skinny_gain", lambda m, repeats=5: 0.4)  # an Intel MKL: stock beats skinny
    seen = []
    monkeypatch.setattr(kernels, "fewrows_gain", lambda m, k, repeats=5, progress=None: seen.append(k) or 1.3)
    model = torch.nn.Sequential(torch.nn.Linear(8, 8))
    kernel, why = kernels.auto_choice(model)
    assert kernel == "fewrows" and why["fewrows_gain"] == 1.3 and seen == ["stock"]  # measured against stock
    assert kernels.auto_choice(model)[1]["from"] == "kept"
    monkeypatch.setattr(kernels, "fewrows_gain", lambda m, k, repeats=5, progress=None: 1.05)  # not enough
    monkeypatch.setattr(kernels, "_quiet", lambda: True)
    assert kernels.auto_choice(torch.nn.Sequential(torch.nn.Linear(8, 24)))[0] == "stock"


@pytest.fixture(scope="module")
def fewrows_models():
    if not fewrows_ok():
        pytest.skip(f"the few-row kernel cannot be built here: {fewrows.why()}")
    out = {}
    for key in (("llama", 0), ("qwen2", 1)):
        lm = tiny_lm(*key)
        assert use_skinny(lm.model, "fewrows") == "fewrows"
        out[key] = (dataclasses.replace(lm, kernel="fewrows"), tiny_lm(*key))
    return out


@needs_fewrows
@pytest.mark.parametrize("key", [("llama", 0), ("qwen2", 1)], ids=lambda k: f"{k[0]}{k[1]}")
@pytest.mark.parametrize("method,params", SETTINGS, ids=lambda x: str(x) if isinstance(x, str) else "-".join(f"{k}{v}" for k, v in x.items()))
def test_fewrows_runs_equal_stock_generate(fewrows_models, key, method, params):
    fast, stock = fewrows_models[key]
    for plen, K in ((1, 21), (9, 30), (45, 37)):
        prompt = _prompt(plen * 7 + key[1], plen)
        out = decode(fast, prompt, method, params, K)
        assert out.output_ids == generate_greedy(stock, prompt, K), (plen, K)
        assert out.kernel == "fewrows"
