"""Sampling (temperature > 0) for ar, lookahead and pld: the output distribution equals AR sampling.

The statistical tests compare observed sequence counts with the exact distribution (chi-square,
rare sequences merged into one bin so every bin expects >= 5). The threshold is a p-value of 1e-4:
a correct sampler fails it once in 10,000 runs, and every test draws from a fixed seed, so it is
not flaky; each has a negative twin that breaks the verifier on purpose and must fail.
"""

from __future__ import annotations

from collections import Counter
from functools import lru_cache

import pytest
import torch

from decoding.loop import Run, decode
from decoding.methods import ConfigError, resolve_params
from decoding.sampling import Sampler
from decoding.verify import verify_tree
from decoding.trace import Trace, TraceError
from tiny import IdTokenizer, tiny_lm

P_MIN = 1e-4


@pytest.fixture(scope="module", autouse=True)
def _one_thread():
    """Tiny models: more threads only add overhead (and contention on a busy 2-core machine)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def chi_square_p(counts: Counter, exact: dict[tuple, float]) -> float:
    """p-value of observed ``counts`` against ``exact`` probabilities (bins expecting < 5 merged)."""
    n = sum(counts.values())
    if any(exact.get(k, 0.0) == 0 for k in counts):
        return 0.0  # drew a sequence of probability 0
    obs, exp, rest_o, rest_e = [], [], 0, 0.0
    for k, pk in exact.items():
        if pk * n >= 5:
            obs.append(counts[k]), exp.append(pk * n)
        else:
            rest_o, rest_e = rest_o + counts[k], rest_e + pk * n
    if rest_e > 0:
        obs.append(rest_o), exp.append(rest_e)
    x2 = sum((o - e) ** 2 / e for o, e in zip(obs, exp))
    dof = len(obs) - 1
    return float(torch.special.gammaincc(torch.tensor(dof / 2, dtype=torch.float64), torch.tensor(x2 / 2, dtype=torch.float64)))


# ---- verify_tree alone, on a toy model: many draws in a few seconds -------------------------------------
V, L = 6, 3


@lru_cache(maxsize=None)
def toy_probs(prefix: tuple) -> torch.Tensor:
    """A fixed random next-token distribution per prefix (a model without a network)."""
    g = torch.Generator().manual_seed(hash(prefix) % 2**31)
    return torch.softmax(torch.randn(V, generator=g, dtype=torch.float64) * 1.5, -1).float()


def toy_exact() -> dict[tuple, float]:
    out = {(): 1.0}
    for _ in range(L):
        out = {k + (t,): pk * float(toy_probs(k)[t]) for k, pk in out.items() for t in range(V)}
    return out


# candidates that share prefixes, repeat a token at one depth, and reach the full length (bonus)
TOY_CANDS = [[1, 2], [1, 3], [0, 4], [1, 2, 5], [3, 3], [0, 4]]


def toy_draws(n: int, seed: int = 0) -> Counter:
    """Each draw: one verify_tree step over TOY_CANDS, then plain AR sampling up to L tokens."""
    sampler = Sampler(1.0, 0, 1.0, seed, "cpu")
    counts = Counter()
    for _ in range(n):
        def dist(c, d):  # p at depth d comes from the context "accepted prefix of candidate c"
            return toy_probs(tuple(TOY_CANDS[c][:d]) if d else ())
        toks, chosen, rec = verify_tree(TOY_CANDS, dist, sampler)
        assert toks[:-1] == TOY_CANDS[chosen][:len(toks) - 1] if chosen >= 0 else len(toks) == 1
        seq = tuple(toks[:L])
        while len(seq) < L:
            seq += (sampler.draw(toy_probs(seq)),)
        counts[seq] += 1
    return counts


def test_verify_tree_keeps_the_distribution():
    assert chi_square_p(toy_draws(12000), toy_exact()) > P_MIN


def _accept_all(self, q):
    return True


def _keep_rejected(self, p, t):  # "forgets" to remove a rejected token: draws can repeat it
    pass


@pytest.mark.parametrize("bug,fn", [("accepts", _accept_all), ("reject", _keep_rejected)])
def test_wrong_verifiers_fail_the_same_check(monkeypatch, bug, fn):
    monkeypatch.setattr(Sampler, bug, fn)
    assert chi_square_p(toy_draws(12000), toy_exact()) < P_MIN


def test_verify_tree_record_example():
    """Candidates [[5, 6], [5, 9]] and a sampler that rejects 6: the record says what happened."""
    p = torch.tensor([0.0, 0.0, 0.0, 0.0, 0.2, 0.6, 0.1, 0.0, 0.0, 0.1])

    class Scripted(Sampler):
        def __init__(self):
            super().__init__(1.0, 0, 1.0, 0, "cpu")
            self.coins = iter([True, False, True])

        def accepts(self, q):
            return next(self.coins)

    toks, chosen, rec = verify_tree([[5, 6], [5, 9]], lambda c, d: p, Scripted())
    # depth 0: 5 (p 0.6) accepted; depth 1: 6 (p 0.1) rejected, 9 (now 0.1 / 0.9) accepted; depth 2: drawn
    assert toks[:2] == [5, 9] and chosen == 1 and len(toks) == 3 and p[toks[2]] > 0
    assert rec.tried[0] == [[0, 5, 0.6, True]]
    assert rec.tried[1] == [[0, 6, 0.1, False], [1, 9, round(0.1 / 0.9, 6), True]]
    assert rec.tried[2] == [] and rec.final[:2] == [5, 9] and rec.final_p[0] == 0.6


# ---- whole runs on a tiny model ---------------------------------------------------------------------
def small_lm():
    """1 layer, hidden 32, vocabulary 8; a large init makes the next-token distributions peaked."""
    from transformers import LlamaConfig, LlamaForCausalLM

    from decoding.model import LoadedModel

    torch.manual_seed(0)
    cfg = LlamaConfig(vocab_size=8, hidden_size=32, intermediate_size=64, num_hidden_layers=1, num_attention_heads=4,
                      num_key_value_heads=2, max_position_embeddings=64, eos_token_id=None, bos_token_id=None,
                      pad_token_id=None, initializer_range=1.0)
    return LoadedModel(LlamaForCausalLM(cfg).eval(), IdTokenizer(), "small-llama", "cpu", "float32")


PROMPT = [0, 1, 2, 3, 4, 5, 6, 7, 0, 1, 2, 3, 4, 5, 6, 7]  # every token has pool n-grams and a pld match
SAMPLING = {"temperature": 0.9, "top_k": 6, "top_p": 0.95}
RUN_LEN = 4  # prefill token + 3 tokens from steps (a full lookahead match with N=3 decides 3 at once)
RUN_METHODS = [("lookahead", {"W": 3, "N": 3, "G": 3}), ("pld", {"k": 3, "max_ngram": 2}), ("ar", {}),
               ("lookahead", {"W": 3, "N": 3, "G": 3, "budget": "auto"}), ("pld", {"k": 3, "max_ngram": 2, "budget": "auto"}),
               ("tr", {"successors": 3, "depth": 3, "branch": 3, "width": 4}), ("tr", {"successors": 3, "depth": 3, "budget": "auto"}),
               ("suffix", {"alpha": 2, "max_spec": 4, "min_match": 1}), ("suffix", {"max_spec": 4, "budget": "auto"})]


@pytest.fixture(scope="module")
def small():
    return small_lm()


@pytest.fixture(scope="module")
def small_exact(small):
    """P(continuation) for every continuation of RUN_LEN tokens, from the model's own probabilities."""
    sampler = Sampler(SAMPLING["temperature"], SAMPLING["top_k"], SAMPLING["top_p"], 0, "cpu")
    out = {(): 1.0}
    with torch.inference_mode():
        for _ in range(RUN_LEN):
            keys = list(out)
            logits = small.model(input_ids=torch.tensor([PROMPT + list(k) for k in keys])).logits[:, -1]
            out = {k + (t,): out[k] * float(p)
                   for i, k in enumerate(keys) for t, p in enumerate(sampler.probs(logits[i]).tolist())}
    return out


def _costs(params) -> dict:
    """budget="auto" on a flat (GPU-like) cost curve, trusted from the first step: the controller
    feeds its guesses at once, so the short runs here verify them."""
    from decoding.budget import StepCosts

    if params.get("budget") != "auto":
        return {}
    return {"step_costs": StepCosts(lambda k: 1.0 + 0.001 * (k - 1), calibrate_first=False)}


def run_draws(lm, method, params, n):
    counts, multi = Counter(), 0
    for i in range(n):
        tr = decode(lm, PROMPT, method, params | SAMPLING | {"sample_seed": i}, RUN_LEN, record=False, **_costs(params))
        counts[tuple(tr.output_ids)] += 1
        multi += any(len(s.tokens) > 1 for s in tr.steps)
    return counts, multi


@pytest.mark.parametrize("method,params", RUN_METHODS, ids=[m + ("-auto" if p.get("budget") else "") for m, p in RUN_METHODS])
def test_runs_sample_the_ar_distribution(small, small_exact, method, params):
    counts, multi = run_draws(small, method, params, 700)
    if method != "ar":
        assert multi > 100, "candidates should be accepted often enough to matter"
    p = chi_square_p(counts, small_exact)
    print(f"{method}: p = {p:.3g}, runs with a multi-token step: {multi}/700")
    assert p > P_MIN


def test_runs_with_a_verifier_that_accepts_every_draft_fail(small, small_exact, monkeypatch):
    monkeypatch.setattr(Sampler, "accepts", _accept_all)
    counts, _ = run_draws(small, "lookahead", {"W": 3, "N": 3, "G": 3}, 300)
    assert chi_square_p(counts, small_exact) < P_MIN


def test_ar_sampling_equals_transformers_generate():
    """Same warpers, same order, same generator stream: token for token what generate(do_sample) gives."""
    lm = tiny_lm("llama", 0)
    prompt = [5, 6, 7, 5, 6, 7]
    for t, k, p in ((1.0, 0, 1.0), (0.7, 20, 0.9)):
        torch.manual_seed(3)
        ids = torch.tensor([prompt])
        ref = lm.model.generate(ids, attention_mask=torch.ones_like(ids), do_sample=True, temperature=t, top_k=k, top_p=p,
                                max_new_tokens=20, min_new_tokens=0, eos_token_id=None, pad_token_id=0)[0, len(prompt):]
        ours = decode(lm, prompt, "ar", {"temperature": t, "top_k": k, "top_p": p, "sample_seed": 3}, 20)
        assert ours.output_ids == ref.tolist()


# ---- limits, reproducibility, records -------------------------------------------------------------
@pytest.fixture(scope="module")
def lm():
    return tiny_lm("qwen2", 1)


REPEAT = [9, 8, 7, 6, 9, 8, 7, 6, 9, 8, 7, 6, 9, 8]


@pytest.mark.parametrize("method,params", [("ar", {}), ("lookahead", {"W": 5, "N": 4, "G": 5}), ("pld", {})])
@pytest.mark.parametrize("sampling", [{"temperature": 1e-5}, {"temperature": 1.0, "top_k": 1}],
                         ids=["t1e-5", "topk1"])
def test_near_zero_temperature_or_top_k_1_is_greedy(lm, method, params, sampling):
    greedy = decode(lm, REPEAT, method, params, 30)
    out = decode(lm, REPEAT, method, params | sampling | {"sample_seed": 4}, 30)
    assert out.output_ids == greedy.output_ids
    assert out.n_steps == greedy.n_steps  # the same candidates are accepted, so the same steps


@pytest.mark.parametrize("method", ["ar", "lookahead", "pld"])
def test_a_seed_reproduces_a_run(lm, method):
    p = {"temperature": 1.0, "top_p": 0.9}
    a = decode(lm, REPEAT, method, p | {"sample_seed": 11}, 40)
    b = decode(lm, REPEAT, method, p | {"sample_seed": 11}, 40)
    c = decode(lm, REPEAT, method, p | {"sample_seed": 12}, 40)
    assert a.output_ids == b.output_ids and [s.sampling for s in a.steps] == [s.sampling for s in b.steps]
    assert a.output_ids != c.output_ids


def test_greedy_params_stay_as_they_were():
    assert resolve_params("lookahead", {"temperature": 0, "top_k": 5}) == resolve_params("lookahead", None)
    assert resolve_params("ar", {"temperature": 0.7}) == {"temperature": 0.7, "top_k": 0, "top_p": 1.0, "sample_seed": 0}


@pytest.mark.parametrize("method,params,msg", [
    ("jacobi", {"temperature": 0.7}, "jacobi decodes greedily only"),
    ("ar", {"temperature": -1}, "temperature must be"),
    ("ar", {"temperature": "hot"}, "temperature must be"),
    ("pld", {"temperature": 1, "top_p": 0}, "top_p must be"),
    ("lookahead", {"temperature": 1, "top_k": -2}, "top_k must be"),
    ("ar", {"temperature": 1, "sample_seed": 1.5}, "sample_seed must be"),
])
def test_bad_sampling_params(lm, method, params, msg):
    with pytest.raises(ConfigError, match=msg):
        Run(lm, [1, 2, 3], method, params, 8)


def test_jacobi_at_temperature_zero_is_still_fine(lm):
    assert decode(lm, [1, 2, 3], "jacobi", {"n": 4, "temperature": 0}, 8).params == {"n": 4, "seed": 0, "budget": "fixed"}


def test_trace_round_trip_with_sampling_records(lm):
    tr = decode(lm, REPEAT, "lookahead", {"W": 4, "N": 3, "G": 4, "temperature": 0.8, "sample_seed": 2}, 30)
    assert tr.sampled and all(s.sampling is not None for s in tr.steps)
    for s in tr.steps:  # the record explains the step: its tokens are the decided tokens (cut at the end)
        assert s.sampling.final[:len(s.tokens)] == s.tokens
        assert len(s.sampling.tried) == len(s.sampling.final) == len(s.sampling.final_p)
    assert any(t[3] for s in tr.steps for pos in s.sampling.tried for t in pos), "some candidate accepted"
    back = Trace.from_json(tr.to_json())
    assert back == tr
    tried = {t[1] for s in tr.steps for pos in s.sampling.tried for t in pos}
    assert tried - set(tr.output_ids) <= set(map(int, back.vocab))  # rejected tokens have a text too
    # an old trace (no sampling field at all) still loads
    d = tr.to_dict()
    for s in d["steps"]:
        del s["sampling"]
    assert all(s.sampling is None for s in Trace.from_dict(d).steps)


@pytest.mark.parametrize("mutate,msg", [
    (lambda r: r.update(final_p=[1.5] * len(r["final"])), "probability"),
    (lambda r: r.update(final=r["final"] + [1]), "one tried/final/final_p entry per position"),
    (lambda r: r["tried"].__setitem__(0, [[0, 1, 0.5]]), r"\[candidate, token, p, accepted\]"),
    (lambda r: r["tried"].__setitem__(0, [[0, 1, 0.5, 1]]), r"\[candidate, token, p, accepted\]"),
    (lambda r: r.pop("tried"), r"^steps\[0\]\.sampling\.tried: missing$"),
])
def test_bad_sampling_records_get_a_clear_error(lm, mutate, msg):
    d = decode(lm, REPEAT, "pld", {"temperature": 1.0}, 10).to_dict()
    mutate(d["steps"][0]["sampling"])
    with pytest.raises(TraceError, match=msg):
        Trace.from_dict(d)


def test_recording_off_drops_the_sampling_records_only(lm):
    p = {"temperature": 1.0, "sample_seed": 5}
    on = decode(lm, REPEAT, "lookahead", p, 30)
    off = decode(lm, REPEAT, "lookahead", p, 30, record=False)
    assert off.output_ids == on.output_ids and all(s.sampling is None for s in off.steps)


def test_candidates_are_tried_from_the_right_logits(lm):
    """Each try's p is the model's probability of that token after the accepted prefix: recompute it
    from a plain forward over prompt + output so far (catches an off-by-one logits row)."""
    tr = decode(lm, REPEAT, "lookahead", {"W": 4, "N": 3, "G": 4, "temperature": 1.0, "sample_seed": 7}, 30)
    sampler = Sampler(1.0, 0, 1.0, 0, "cpu")
    seq = REPEAT + tr.output_ids[:1]
    checked = 0
    with torch.inference_mode():
        for s in tr.steps:
            for pos, tried in enumerate(s.sampling.tried):
                if pos >= len(s.tokens):
                    break
                ctx = seq + s.tokens[:pos]
                p = sampler.probs(lm.model(input_ids=torch.tensor([ctx])).logits[0, -1]).clone()
                for c, t, q, ok in tried:
                    assert q == pytest.approx(float(p[t] / p.sum()), abs=2e-4)
                    checked += 1
                    if not ok:
                        p[t] = 0
            seq = seq + s.tokens
    assert checked > 5


def test_analysis_of_sampling_decisions(lm):
    from decoding import analysis

    tr = decode(lm, REPEAT, "lookahead", {"W": 4, "N": 3, "G": 4, "temperature": 0.8, "sample_seed": 2}, 30)
    rows = analysis.sampling_decisions(tr)
    # every output token after the prefill is an accepted try or a draw, in output order
    final = [r for r in rows if r["outcome"] != "rejected" and r["output"] is not None]
    assert [r["token"] for r in final] == tr.output_ids[1:] and [r["output"] for r in final] == list(range(1, 30))
    st = analysis.sampling_stats(tr)
    assert st["tries"] == sum(r["outcome"] != "drawn" for r in rows) > 0 and 0 < st["accept_rate"] <= 1
    # provenance under sampling: the accepted candidate tokens come first, the drawn token last
    labels = analysis.provenance(tr)
    assert len(labels) == len(tr.output_ids)
    for s, start in zip(tr.steps[:-1], analysis.committed_curve(tr)):  # the last step may be cut
        if len(s.tokens) > 1:
            assert labels[start + len(s.tokens) - 1] == "step" and labels[start] != "step"


def test_cli_sampling_options(capsys):
    from decoding import cli

    a = cli.build_parser().parse_args(["generate", "--prompt", "hi", "--method", "pld", "--temperature", "0.7",
                                       "--top-k", "40", "--top-p", "0.9", "--sample-seed", "3"])
    assert cli.method_params("pld", a) == {"k": 10, "max_ngram": 3, "budget": "fixed", "temperature": 0.7, "top_k": 40,
                                           "top_p": 0.9, "sample_seed": 3}
    greedy = cli.build_parser().parse_args(["generate", "--prompt", "hi", "--top-k", "40"])
    assert cli.method_params("lookahead", greedy) == resolve_params("lookahead", None)
    # jacobi refuses before any model is loaded
    assert cli.main(["bench", "--prompts", "x.jsonl", "--methods", "ar,jacobi", "--temperature", "0.7"]) == 2
    assert "jacobi decodes greedily only" in capsys.readouterr().err
