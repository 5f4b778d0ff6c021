"""The compiled decode step (decoding/compiled.py): torch.compile over a static KV cache. Every
method's greedy output on it equals transformers' generate on the stock model; it falls back to
the eager step where it cannot compile, where a compile fails, for a second concurrent run and for
steps larger than its fed sizes."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from decoding import compiled as C
from decoding.compiled import CompiledStep, cache_size, fed_size, step_mask
from decoding.kernels import onednn_ok, use_skinny
from decoding.loop import Run, decode
from decoding.model import ModelError, _check_step, with_step
from decoding.trace import Trace
from test_equivalence import SETTINGS, _prompt
from tiny import generate_greedy, tiny_lm

can_compile = pytest.mark.skipif(C.compile_possible() is not None, reason="no C++ compiler for torch.compile")
KERNEL = "onednn" if onednn_ok() else "skinny"


def test_sizes():
    assert [fed_size(q) for q in (1, 2, 3, 5, 8, 9, 33, 64)] == [1, 2, 4, 8, 8, 16, 64, 64]
    assert fed_size(65) is None
    assert [cache_size(n) for n in (1, 256, 257, 513, 4096)] == [256, 256, 384, 768, 4096]
    assert cache_size(4097) is None


def test_step_mask_blocks_padding_and_stale_entries():
    m = step_mask(None, 3, 5, 4, 16, torch.float32)[0, 0]
    see = m == 0
    for r in range(3):  # causal real rows: the 5 cached positions and the block up to themselves
        assert see[r].nonzero().flatten().tolist() == list(range(5 + r + 1))
    assert see[3].nonzero().flatten().tolist() == [8]  # the padding row: only its own column
    tree = torch.full((1, 1, 2, 7), torch.finfo(torch.float32).min)
    tree[..., :5] = 0
    tree[0, 0, 0, 5] = tree[0, 0, 1, 6] = 0  # row 1 does not see row 0 (a tree's siblings)
    see = step_mask(tree, 2, 5, 2, 8, torch.float32)[0, 0] == 0
    assert see[1].nonzero().flatten().tolist() == [0, 1, 2, 3, 4, 6] and not see[:, 7].any()


def test_step_option_is_checked():
    with pytest.raises(ModelError, match="step must be one of"):
        _check_step("jit", None)
    with pytest.raises(ModelError, match="not with --device-map"):
        _check_step("compiled", "auto")


def test_no_compiler_means_the_eager_step(monkeypatch):
    monkeypatch.setattr(C, "compile_possible", lambda: "no C++ compiler (g++) on PATH")
    said = []
    lm = with_step(tiny_lm("llama", 0), "compiled", said.append)
    assert lm.step == "eager" and lm.compiled is None and "no C++ compiler" in said[0]
    assert decode(lm, [1, 2, 3], "ar", {}, 4).step == "eager"


@pytest.fixture(scope="module")
def compiled_models():
    out = {}
    for key in (("llama", 0), ("qwen2", 1), ("llama", 2)):
        lm = tiny_lm(*key)
        kernel = "fewrows" if key == ("llama", 2) else KERNEL  # the few-row kernel's ops inside the graph
        lm = dataclasses.replace(lm, kernel=use_skinny(lm.model, kernel))
        out[key] = (with_step(lm, "compiled"), tiny_lm(*key))  # (compiled, stock twin)
    return out


@can_compile
@pytest.mark.parametrize("key", [("llama", 0), ("qwen2", 1), ("llama", 2)], ids=lambda k: f"{k[0]}{k[1]}")
@pytest.mark.parametrize("method,params", SETTINGS, ids=lambda x: str(x) if isinstance(x, str) else "-".join(f"{k}{v}" for k, v in x.items()))
def test_compiled_runs_equal_stock_generate(compiled_models, key, method, params):
    fast, stock = compiled_models[key]
    for plen, K in ((1, 21), (9, 30), (45, 37)):
        prompt = _prompt(plen * 7 + key[1], plen)
        out = decode(fast, prompt, method, params, K)
        assert out.output_ids == generate_greedy(stock, prompt, K), (plen, K)
        assert out.step == "compiled" and out.kernel == fast.kernel
    assert not fast.compiled.broken and fast.compiled.compiled  # graphs were built and ran


@can_compile
@pytest.mark.parametrize("key", [("llama", 0), ("llama", 2)], ids=lambda k: f"{k[0]}{k[1]}")
def test_graphs_skip_guards_once_trusted_and_weights_changed_in_place_are_followed(key):
    """A graph that ran under full guards runs later with only the guards that tell graphs apart;
    a weight changed in place (repacked by the next run) makes every graph earn that trust again,
    and the run follows the new weights."""
    fast = tiny_lm(*key)
    fast = with_step(dataclasses.replace(fast, kernel=use_skinny(fast.model, "fewrows" if key[1] == 2 else KERNEL)),
                     "compiled")
    stock = tiny_lm(*key)
    prompt = _prompt(3, 10)
    assert decode(fast, prompt, "ar", {}, 12).output_ids == generate_greedy(stock, prompt, 12)
    assert (1, 256) in fast.compiled.trusted
    with torch.no_grad():
        for m in (fast.model, stock.model):
            m.model.layers[0].mlp.down_proj.weight.mul_(-3.0)  # in place: the same tensors
    out = decode(fast, prompt, "ar", {}, 12)
    assert out.output_ids == generate_greedy(stock, prompt, 12) and out.step == "compiled"
    if key[1] == 2:  # the few-row kernel's panels were packed again: trust was earned again
        assert (1, 256) in fast.compiled.trusted


@can_compile
def test_large_steps_and_concurrent_runs_run_eagerly(compiled_models):
    fast, stock = compiled_models[("llama", 0)]
    prompt = _prompt(5, 12)
    ref = generate_greedy(stock, prompt, 24)
    big = decode(fast, prompt, "lookahead", {"W": 15, "N": 5, "G": 15}, 24)  # 121 fed rows: past the fed sizes
    assert big.output_ids == ref and big.step == "compiled" and max(s.fed for s in big.steps) > C.FED_SIZES[-1]
    first = Run(fast, prompt, "ar", {}, 24)
    steps = iter(first)
    next(steps)  # the first run holds the static cache ...
    second = decode(fast, prompt, "ar", {}, 24)
    assert second.step == "eager" and second.output_ids == ref  # ... so the second runs eagerly
    list(steps)
    assert first.trace.step == "compiled" and first.trace.output_ids == ref
    assert decode(fast, prompt, "ar", {}, 24).step == "compiled"  # released at the first run's end


@can_compile
def test_a_step_past_the_static_cache_goes_on_eagerly(compiled_models):
    fast, stock = compiled_models[("llama", 0)]
    prompt = _prompt(4, 150)
    assert C.cache_size(len(prompt) + 40 + 64) == 256  # 121 fed rows at position 150 pass its end
    out = decode(fast, prompt, "lookahead", {"W": 15, "N": 5, "G": 15}, 40)
    assert out.output_ids == generate_greedy(stock, prompt, 40) and out.step == "compiled"
    assert not fast.compiled.locks[256].locked()  # released when the run left the static cache
    assert decode(fast, prompt, "ar", {}, 8).step == "compiled"


@can_compile
def test_a_failing_compile_falls_back_to_the_eager_step():
    fast, stock = tiny_lm("llama", 2), tiny_lm("llama", 2)
    fast = with_step(fast, "compiled")
    said = []
    fast.compiled.progress = said.append

    def broken(*_):
        raise RuntimeError("inductor: C++ compile error\nmore")

    fast.compiled.fn = broken
    prompt = _prompt(3, 10)
    out = decode(fast, prompt, "pld", {}, 20)
    assert out.output_ids == generate_greedy(stock, prompt, 20)
    assert fast.compiled.broken == "RuntimeError: inductor: C++ compile error"
    assert any("eager step" in m for m in said)
    assert decode(fast, prompt, "ar", {}, 5).step == "eager"  # later runs: the eager step throughout


def test_trace_keeps_its_step():
    t = decode(tiny_lm("llama", 0), [1, 2, 3], "ar", {}, 4)
    d = t.to_dict()
    assert d["step"] == "eager" and Trace.from_dict(d | {"step": "compiled"}).step == "compiled"
    d.pop("step")
    assert Trace.from_dict(d).step == "eager"  # traces written before the field


@can_compile
def test_a_compiled_step_has_its_own_cost_curve(tmp_path, monkeypatch):
    from decoding.perf.costs import cached_curve, step_costs_for
    from decoding.perf.measure import load_or_measure

    monkeypatch.setenv("PDL_CACHE", str(tmp_path))
    eager = tiny_lm("llama", 3)
    fast = with_step(tiny_lm("llama", 3), "compiled")
    c = load_or_measure(fast, ks=(2, 4, 96), context=16, repeats=1, ar_tokens=8)
    assert c.kernel == "stock+compiled" and c.ks == [1, 2, 4] and "compiled step" in c.regime  # 96: past the fed sizes
    assert all(s > 0 for s in c.seconds) and not any(lock.locked() for lock in fast.compiled.locks.values())
    assert cached_curve(fast.model_id, "cpu", "float32", torch.get_num_threads(), "stock") is None  # not the eager one's
    assert "compiled step" in step_costs_for(fast).source and "compiled" not in step_costs_for(eager).source
    fast_costs = step_costs_for(fast)  # rows are padded to the compiled sizes: 3 cost what 4 cost
    assert "padded" in fast_costs.source and fast_costs.prior(3) == fast_costs.prior(4) >= fast_costs.prior(2)
    assert decode(fast, _prompt(2, 9), "ar", {}, 6).step == "compiled"  # the curve released its cache


@can_compile
def test_every_graph_compiles_past_dynamos_default_limit():
    """Dynamo compiles at most ``recompile_limit`` (default 8) graphs of one function and silently
    runs the rest eagerly; the compiled step needs one per (fed size, cache size)."""
    from torch._dynamo.utils import counters

    fast = with_step(tiny_lm("llama", 4, layers=1), "compiled")
    before = counters["stats"]["unique_graphs"]
    fast.compiled.prepare(200)  # 5 fed sizes over a 256-token cache
    fast.compiled.prepare(300)  # and over a 384-token one
    assert counters["stats"]["unique_graphs"] - before >= 10
    assert len(fast.compiled.compiled) == 10


class _SlowFirstCall:
    """Stands in for torch.compile: the eager forward, whose first call per shape sleeps (a compile)."""

    def __init__(self, fn, seconds: float = 0.4):
        self.fn, self.seconds, self.seen = fn, seconds, set()

    def __call__(self, *args):
        key = tuple(args[1].shape) + tuple(args[3].shape)
        if key not in self.seen:
            self.seen.add(key)
            import time

            time.sleep(self.seconds)
        return self.fn(*args)


def slow_compile(monkeypatch, seconds: float = 0.4) -> None:
    monkeypatch.setattr(C.torch, "compile", lambda fn, **_: _SlowFirstCall(fn, seconds))


def test_compiling_is_left_out_of_the_runs_timings(monkeypatch):
    """A first use that compiles for seconds is recorded as compile_seconds, and neither a step's
    time, its forward's, the run's nor the budget's observed costs include it."""
    slow_compile(monkeypatch, 0.4)
    lm, stock = with_step(tiny_lm("llama", 0), "compiled"), tiny_lm("llama", 0)
    prompt = _prompt(3, 9)
    run = Run(lm, prompt, "pld", {"budget": "auto"}, 30)
    seen = []
    run.costs.observe = lambda fed, s, f=run.costs.observe: (seen.append(s), f(fed, s))
    t = run.decode()
    assert t.output_ids == generate_greedy(stock, prompt, 30) and t.step == "compiled"
    graphs = len({fed_size(s.fed) for s in t.steps})
    assert t.compile_seconds >= 0.4 * graphs and graphs >= 1
    assert max(s.seconds for s in t.steps) < 0.3 and max(s.forward_seconds for s in t.steps) < 0.3
    assert max(seen) < 0.3 and t.seconds < 0.4 * graphs
    again = decode(lm, prompt, "pld", {"budget": "auto"}, 30)  # the graphs are built: nothing to leave out
    assert again.compile_seconds == 0.0 and again.output_ids == t.output_ids
    d = t.to_dict()
    assert Trace.from_dict(d).compile_seconds == t.compile_seconds
    d.pop("compile_seconds")
    assert Trace.from_dict(d).compile_seconds == 0.0  # traces written before the field


def test_the_apps_compiled_step(monkeypatch):
    """The sidebar's Decode step runs the sidebar's model compiled: the bar says when a graph is
    being built and how long compiling took, left out of the run's time; Explain looks for the
    compiled step's own curve; eager again when Decode step goes back."""
    from streamlit.testing.v1 import AppTest

    from app_pages.common import models
    from test_app_sampling import APP
    from tiny import ByteTokenizer
    from viz.style import METHOD_NAMES

    slow_compile(monkeypatch, 0.3)
    lm = tiny_lm("llama", 0)
    lm.tokenizer = ByteTokenizer()
    monkeypatch.setattr(models, "get_model", lambda name: lm)
    models.compiled_model.clear()
    try:
        at = AppTest.from_file(APP, default_timeout=60).run()
        at.selectbox(key="example").select("Plain text (no chat)").run()
        at.selectbox(key="method_label").select(METHOD_NAMES["ar"]).run()
        at.number_input(key="max_new_tokens").set_value(12).run()
        at.selectbox(key="decode_step").select("compiled").run()
        at.button(key="run_button").click().run()
        assert not at.exception and not at.error
        t = next(iter(at.session_state["results"].traces.values()))
        assert t.step == "compiled" and t.compile_seconds >= 0.3
        done = [p.proto.text for p in at.get("progress") if p.proto.text.startswith("done:")]
        assert done and "compiling the decode step, not counted" in done[-1], done
        assert any("compiled step" in m.value for m in at.markdown)
        at.selectbox(key="decode_step").select("eager").run()
        at.button(key="run_button").click().run()
        assert next(iter(at.session_state["results"].traces.values())).step == "eager"
    finally:
        models.compiled_model.clear()


def test_the_compiled_steps_attention_takes_grouped_heads(monkeypatch):
    """gqa_sdpa: transformers' sdpa for a one-token eager step; for several tokens eagerly (the
    same bits) and inside a compiled graph (the same values), with a mask over grouped KV heads,
    SDPA's own grouping (no repeated copy)."""
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    lm, ref = tiny_lm("llama", 0), tiny_lm("llama", 0)
    C.use_gqa_sdpa(lm.model)
    assert lm.model.config._attn_implementation == C.GQA_SDPA
    ids = torch.tensor([_prompt(5, 12)])
    from transformers import StaticCache

    with torch.inference_mode():
        assert torch.equal(lm.model(input_ids=ids).logits, ref.model(input_ids=ids).logits)
        got, want = (m.model(input_ids=ids, use_cache=True, past_key_values=StaticCache(config=m.model.config, max_cache_len=32)).logits
                     for m in (lm, ref))  # over a static cache: transformers' sdpa masks too
        assert torch.equal(got, want)
    attn = lm.model.model.layers[0].self_attn
    assert attn.num_key_value_groups > 1
    torch.manual_seed(0)
    q, k, v = torch.randn(1, 4, 3, 16), torch.randn(1, 2, 10, 16), torch.randn(1, 2, 10, 16)
    mask = torch.zeros(1, 1, 3, 10)
    mask[..., 8:] = torch.finfo(torch.float32).min
    want, _ = sdpa_attention_forward(attn, q, k, v, mask, scaling=0.25)
    got, _ = C.gqa_sdpa(attn, q, k, v, mask, scaling=0.25)  # eager, 3 queries: SDPA's grouping, the same bits
    assert got.shape == want.shape and torch.equal(got, want)
    monkeypatch.setattr(torch.compiler, "is_compiling", lambda: True)
    got, _ = C.gqa_sdpa(attn, q, k, v, mask, scaling=0.25)
    assert got.shape == want.shape
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)


def test_a_cache_allocated_ahead_is_the_one_the_model_writes():
    """``init_cache`` (the CUDA path: a static cache allocated outside any captured graph): the
    layers get the model's KV shape, dtype and device, and a forward writes into those very
    tensors (no reallocation) the values a lazily allocated cache gets."""
    from transformers import StaticCache

    lm = tiny_lm("llama", 0)
    cfg = lm.model.config
    ahead = StaticCache(config=cfg, max_cache_len=32)
    C.init_cache(ahead, lm.model)
    k = ahead.layers[0].keys
    assert k.shape == (1, cfg.num_key_value_heads, 32, cfg.hidden_size // cfg.num_attention_heads)
    assert k.dtype == next(lm.model.parameters()).dtype
    ptr = k.data_ptr()
    lazy = StaticCache(config=cfg, max_cache_len=32)
    ids = torch.tensor([[1, 2, 3, 4]])
    with torch.inference_mode():
        a = lm.model(input_ids=ids, past_key_values=ahead, use_cache=True).logits
        b = lm.model(input_ids=ids, past_key_values=lazy, use_cache=True).logits
    assert ahead.layers[0].keys.data_ptr() == ptr
    assert torch.equal(a, b) and torch.equal(ahead.layers[1].values, lazy.layers[1].values)
    assert ahead.layers[0].keys[:, :, :4].abs().sum() > 0


def test_the_cpu_step_captures_no_cuda_graph():
    step = CompiledStep(tiny_lm("llama", 0).model)
    assert not step.cuda
    out = torch.zeros(1, 3, 5)
    assert step._out(out, 2).data_ptr() == out.data_ptr()  # a view on the CPU; a copy only on CUDA
