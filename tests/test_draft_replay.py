"""scripts/draft_replay.py: a drafter's greedy tokens/step replayed from the greedy output alone equals
a real run's (for drafters that read only the text: prompt lookup, suffix drafting without fallback)."""

import importlib.util
from pathlib import Path

import pytest

from decoding.loop import decode
from tiny import tiny_lm

spec = importlib.util.spec_from_file_location("draft_replay", Path(__file__).resolve().parents[1] / "scripts" / "draft_replay.py")
draft_replay = importlib.util.module_from_spec(spec)
spec.loader.exec_module(draft_replay)


@pytest.fixture(scope="module")
def cyc():
    return tiny_lm("llama", 0, vocab=8)


@pytest.mark.parametrize("method,params", [("pld", {}), ("pld", {"k": 3, "max_ngram": 2}),
                                           ("suffix", {"fallback": False}),
                                           ("suffix", {"fallback": False, "alpha": 1, "offset": 0, "min_match": 1})])
@pytest.mark.parametrize("prompt", [[0, 1, 2, 3, 4, 5, 6, 7, 1, 3, 5], [3, 1, 4, 1, 5, 9 % 8, 2, 6]])
def test_replay_counts_the_steps_a_real_run_takes(cyc, method, params, prompt):
    tr = decode(cyc, prompt, method, params, 60)
    tokens, steps, _ = draft_replay.replay(method, params, prompt, tr.output_ids)
    assert (tokens, steps) == (len(tr.output_ids), tr.n_steps)
    assert tr.tokens_per_step > 1.05, "a repetitive output: the drafts were accepted (else the test proves little)"


def test_parse_drafter():
    assert draft_replay.parse_drafter("suffix:fallback=false:alpha=3:x=y") == ("suffix", {"fallback": False, "alpha": 3, "x": "y"})
