"""Batched trajectory collection (cllm.batch) and the cheap training step (cllm.losses
.cached_block_logits / item_losses_cached), on tiny random models."""

import random

import pytest
import torch

import cllm
from cllm.batch import BatchedJacobi, Lane
from cllm.losses import block_logits, cached_block_logits, item_losses_cached, noise, pick_states, unlikelihood
from decoding.loop import decode
from tiny import cllm_items, cllm_lm, tiny_lm

PROMPTS = [[3 + p, 4, 5, 6 + p, 7, 8, 9 + 2 * p][: 4 + p] for p in range(7)]  # prompts of 4..10 tokens


def _single(lm, prompts, n, max_new, seed=0):
    out = []
    for i, ids in enumerate(prompts):
        out += cllm.items_from_trace(decode(lm, ids, "jacobi", {"n": n, "seed": seed}, max_new), f"p{i}", "cat", seed)
    return out


class Watched(BatchedJacobi):
    """Checks after every iteration that the shared cache stays as short as promised: the longest
    row's valid slots + fewer than COMPACT_AT wasted ones."""

    def _step(self):
        super()._step()
        from cllm.batch import COMPACT_AT

        longest = int(self.valid.sum(1).max())
        assert self._length() - longest < COMPACT_AT
        assert self.cache.get_seq_length() == self._length()
        self.compacted = getattr(self, "compacted", 0) + (self._length() == longest)


def _batched(lm, prompts, n, max_new, lanes, seed=0):
    eos = set(lm.eos_token_ids)
    todo = [Lane({"id": f"p{i}"}, ids, n, max_new, eos, seed) for i, ids in enumerate(prompts)]
    out, finished = [], []
    for ln in Watched(lm, n, max_new, seed, lanes).run(todo):
        finished.append(ln)
        out += ln.items("cat", False, lm.model_id)
    return out, finished


@pytest.mark.parametrize("kind,eos,lanes,n,max_new", [
    ("llama", None, 3, 8, 40),    # more prompts than lanes: finished lanes are refilled
    ("llama", 7, 4, 5, 60),       # EOS ends lanes at different times
    ("qwen2", None, 2, 16, 33),   # max_new_tokens cuts the last block
    ("llama", None, 7, 4, 90),    # long runs: the cache is compacted many times
])
def test_batched_collection_writes_the_same_items_as_one_prompt_at_a_time(kind, eos, lanes, n, max_new):
    lm = tiny_lm(kind, 1, eos=eos)
    want = _single(lm, PROMPTS, n, max_new)
    got, finished = _batched(lm, PROMPTS, n, max_new, lanes)
    key = lambda d: d["id"]
    assert sorted(got, key=key) == sorted(want, key=key)
    assert len(finished) == len(PROMPTS)
    # each lane's output is greedy AR's (the Jacobi fixed points)
    for ln in finished:
        i = int(ln.row["id"][1:])
        assert ln.output == decode(lm, PROMPTS[i], "ar", {}, max_new, record=False).output_ids


def test_batched_tokens_per_step_is_the_single_runs():
    lm = tiny_lm("llama", 2)
    _, finished = _batched(lm, PROMPTS[:4], 8, 48, 4)
    for ln in finished:
        tr = decode(lm, PROMPTS[int(ln.row["id"][1:])], "jacobi", {"n": 8}, 48, record=False)
        assert ln.steps == tr.n_steps and len(ln.output) == len(tr.output_ids)


def test_cached_block_logits_equal_the_full_sequence_ones():
    lm = cllm_lm()
    items = cllm_items(lm)
    it = items[1]
    rows = [it["fixed_point"]] + [s for s in it["states"] if s != it["fixed_point"]][:3]
    with torch.no_grad():
        full = block_logits(lm.model, it["prompt_ids"], rows)
        cheap = cached_block_logits(lm.model, it["prompt_ids"], rows)
    assert cheap.shape == full.shape
    assert torch.allclose(cheap, full, atol=1e-5)


def test_sequence_unlikelihood_is_the_full_sequences_on_the_repeated_tokens():
    """-log(1 - p) of each token that ends a repeated 4-gram, p from one forward of prompt + answer;
    its gradient lowers those probabilities; an answer without a repeat gives 0."""
    from cllm.losses import repeat_positions, sequence_unlikelihood

    lm = cllm_lm()
    it = cllm_items(lm)[0]
    prompt = it["prompt_ids"][:it["prompt_len"]]
    answer = [5, 6, 7, 8, 9] * 3 + [10]
    pos = repeat_positions(answer)
    assert pos == list(range(8, 15))
    with torch.no_grad():
        got = sequence_unlikelihood(lm.model, prompt, answer)
        logits = lm.model(input_ids=torch.tensor([prompt + answer])).logits[0, len(prompt) - 1:-1].float()
        p = torch.softmax(logits, -1)[pos, [answer[t] for t in pos]]
        assert torch.allclose(got, -torch.log(1 - p).mean(), atol=1e-5)
        assert float(sequence_unlikelihood(lm.model, prompt, list(range(5, 15)))) == 0.0
    params = [q for q in lm.model.parameters() if q.requires_grad]
    loss = sequence_unlikelihood(lm.model, prompt, answer)
    loss.backward()
    with torch.no_grad():
        for q in params:
            q -= 0.5 * q.grad
            q.grad = None
        assert float(sequence_unlikelihood(lm.model, prompt, answer)) < float(loss)


def test_base_kl_is_the_full_sequences_kl_to_the_model_with_its_adapter_off():
    """w_kl's term: KL(base || student) averaged over the block's positions, the base the same peft
    model with its adapter off, as one full forward of each computes it; 0 while the adapter is the
    identity; its gradient moves the student back toward the base; a model without an adapter is
    refused plainly."""
    from cllm.losses import base_kl, cached_block_logits
    from cllm.train import add_lora

    lm = cllm_lm()
    it = cllm_items(lm)[1]
    prefix, block = it["prompt_ids"], it["fixed_point"]
    with pytest.raises(TypeError, match="adapter"):
        base_kl(lm.model, prefix, block, torch.zeros(len(block), 64))
    torch.manual_seed(0)
    model = add_lora(lm.model, r=4, alpha=8)
    with torch.no_grad():
        zero = base_kl(model, prefix, block, cached_block_logits(model, prefix, [block])[0, :-1])
        assert abs(float(zero)) < 1e-6  # LoRA starts at the identity (B = 0)
        for name, q in model.named_parameters():
            if "lora_B" in name:
                q.normal_(0, 0.3)
    ids = torch.tensor([prefix + block])
    with torch.no_grad():
        student = model(input_ids=ids).logits[0, len(prefix) - 1:-1].float()
        with model.disable_adapter():
            base = model(input_ids=ids).logits[0, len(prefix) - 1:-1].float()
        t, s = torch.log_softmax(base, -1), torch.log_softmax(student, -1)
        want = (t.exp() * (t - s)).sum(-1).mean()
    assert float(want) > 1e-3
    logits = cached_block_logits(model, prefix, [block])[0, :-1]
    got = base_kl(model, prefix, block, logits)
    assert torch.allclose(got, want, atol=1e-5)
    got.backward()
    with torch.no_grad():
        for q in model.parameters():
            if q.grad is not None:
                q -= 0.05 * q.grad
        assert float(base_kl(model, prefix, block, cached_block_logits(model, prefix, [block])[0, :-1])) < float(got)


def test_cheap_step_gradient_equals_the_full_one_where_the_context_cannot_matter():
    """The cheap step's gradient skips the path through the context's keys and values. Parameters
    that do not feed any key or value (the last layer's q/o projections and MLP, the final norm)
    get exactly the full-sequence gradient; the others a different one (which proves the context
    really is cut off)."""
    from cllm.losses import item_losses

    lm = cllm_lm()
    it = cllm_items(lm)[2]
    model = lm.model

    def grads(fn):
        model.zero_grad(set_to_none=True)
        fn()
        return {k: p.grad.clone() for k, p in model.named_parameters() if p.grad is not None}

    one_state = lambda: [s for s in it["states"] if s != it["fixed_point"]][:1]
    state = one_state()[0]
    item1 = {**it, "states": [state, it["fixed_point"]]}  # one intermediate state: both losses use it
    full = grads(lambda: item_losses(model, item1, random.Random(0))["total"].backward())
    cheap = grads(lambda: item_losses_cached(model, item1, random.Random(0), states=1)["total"].backward())
    last = len(model.model.layers) - 1
    free = [k for k in full if f"layers.{last}." in k and any(m in k for m in ("q_proj", "o_proj", "mlp"))] + ["model.norm.weight"]
    assert free
    for k in free:
        assert torch.allclose(cheap[k], full[k], atol=1e-5, rtol=1e-4), k
    first_k = "model.layers.0.self_attn.k_proj.weight"
    assert not torch.allclose(cheap[first_k], full[first_k], atol=1e-6)


def test_cheap_loss_values_equal_the_full_ones():
    from cllm.losses import item_losses

    lm = cllm_lm()
    it = cllm_items(lm)[0]
    state = [s for s in it["states"] if s != it["fixed_point"]][0]
    item1 = {**it, "states": [state, it["fixed_point"]]}
    with torch.no_grad():
        a = item_losses(lm.model, item1, random.Random(0))
        b = item_losses_cached(lm.model, item1, random.Random(0), states=1)
    for k in ("consistency", "ar", "total"):
        assert abs(float(a[k]) - float(b[k])) < 1e-4 * max(1.0, abs(float(a[k])))


def test_a_consistency_window_counts_only_the_positions_after_the_first_wrong_one():
    """``window``: the first ``window`` positions from each state's first wrong one, the rest left
    out (0: all of them); the AR term is unchanged."""
    from cllm.losses import first_wrong, kl_from

    torch.manual_seed(0)
    t, s = torch.randn(8, 11), torch.randn(8, 11)
    full = kl_from(t, s, 2)
    parts = [kl_from(t[i:i + 1], s[i:i + 1], 0) / 8 for i in range(8)]  # one position each, over n = 1
    assert torch.allclose(full, sum(parts[2:]))
    assert torch.allclose(kl_from(t, s, 2, window=3), sum(parts[2:5]))
    assert torch.allclose(kl_from(t, s, 6, window=5), sum(parts[6:]))  # the window ends with the block
    assert float(kl_from(t, s, 8, window=3)) == 0.0
    lm = cllm_lm()
    it = cllm_items(lm)[0]
    state = [x for x in it["states"] if x != it["fixed_point"]][0]
    item1 = {**it, "states": [state, it["fixed_point"]]}
    j = first_wrong(state, it["fixed_point"])
    with torch.no_grad():
        a = item_losses_cached(lm.model, item1, random.Random(0), states=1)
        b = item_losses_cached(lm.model, item1, random.Random(0), states=1, window=1)
    assert torch.allclose(a["ar"], b["ar"])
    assert float(b["consistency"]) <= float(a["consistency"]) + 1e-7
    if j < len(it["fixed_point"]) - 1:
        assert float(b["consistency"]) < float(a["consistency"])


def test_unlikelihood_is_welleck_s_token_level_term_and_joins_the_fixed_point_row():
    """Recipe option w_ul: -sum log(1 - p(c)) over earlier tokens c other than the target, per position."""
    g = torch.Generator().manual_seed(0)
    logits, vocab = torch.randn(5, 11, generator=g), 11
    targets, before = [3, 4, 3, 9, 4], [7, 3, 10]
    p = torch.softmax(logits, -1)
    want = 0.0
    for t in range(5):
        cands = (set(before) | set(targets[:t])) - {targets[t]}
        want -= sum(float(torch.log(1 - p[t, c])) for c in cands)
    assert float(unlikelihood(logits, targets, before)) == pytest.approx(want / 5, rel=1e-5)
    assert float(unlikelihood(logits[:2], [1, 2], [])) == pytest.approx(-float(torch.log(1 - p[1, 1])) / 2, rel=1e-5)
    lg = logits.clone().requires_grad_()
    unlikelihood(lg, targets, before).backward()
    assert (lg.grad[0, [7, 10]] > 0).all() and lg.grad[0, 3] < 0  # candidates pushed down, the target up
    lm = cllm_lm()
    it = cllm_items(lm)[1]  # a later block: the answer before it gives candidates
    assert it["block"] > 0 and len(it["prompt_ids"]) > it["prompt_len"]
    with torch.no_grad():
        a = item_losses_cached(lm.model, it, random.Random(0), states=1)
        b = item_losses_cached(lm.model, it, random.Random(0), states=1, w_ul=0.5)
    assert "ul" not in a and float(b["ul"]) > 0
    assert float(b["total"]) == pytest.approx(float(a["total"]) + 0.5 * float(b["ul"]), rel=1e-5)


def test_stratified_states_span_the_noise_levels_and_random_is_the_uniform_draw():
    """Recipe option state_pick (after Jacobi Forcing's noise schedule): one state per noise stratum.
    The fixed point has noise 0; a state wrong from position j on has noise (n - j) / n."""
    fp = list(range(10, 20))
    cand = [fp[:j] + [0] * (10 - j) for j in range(10)]  # noise 1.0, 0.9, ... 0.1
    assert [noise(s, fp) for s in cand[:3]] == [1.0, 0.9, 0.8] and noise(fp, fp) == 0.0
    for seed in range(20):
        got = pick_states(cand, fp, 4, random.Random(seed), "stratified")
        levels = sorted(noise(s, fp) for s in got)
        assert len({tuple(s) for s in got}) == 4  # without replacement
        # one state in each quarter of the noise range: targets (i + u) / 4, levels 0.1 apart
        assert all(abs(lv - (i + 0.5) / 4) <= 0.125 + 0.05 + 1e-9 for i, lv in enumerate(levels)), levels
    # random: exactly the uniform draw the campaign made before the option existed
    assert pick_states(cand, fp, 4, random.Random(3)) == random.Random(3).sample(cand, 4)
    # fewer candidates than asked: all of them, in either mode
    assert sorted(pick_states(cand[:2], fp, 4, random.Random(0), "stratified")) == sorted(cand[:2])
    with pytest.raises(ValueError, match="state_pick"):
        pick_states(cand, fp, 2, random.Random(0), "progressive")
