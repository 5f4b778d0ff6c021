"""Equivalence on the bundled SmolLM2-135M (offline): every method equals greedy generate."""

import pytest

from decoding.model import ModelError, load_model
from decoding.loop import decode
from tiny import generate_greedy

PROMPTS = [
    ("Write a Python function that checks whether a number is prime.", True),
    ("What is 17 * 23? Explain step by step.", True),
    ("Summarize: The cat sat on the mat. The cat was happy because the mat was warm. The dog watched the cat.", True),
    ("Once upon a time", False),
]


@pytest.fixture(scope="module")
def lm():
    return load_model()


@pytest.mark.slow
@pytest.mark.parametrize("text,chat", PROMPTS)
def test_bundled_model_all_methods_equal_generate(lm, text, chat):
    ids = lm.encode(text, chat=chat)
    ref = generate_greedy(lm, ids, 40)
    for method, params in [("ar", {}), ("jacobi", {"n": 8}), ("lookahead", {}), ("lookahead", {"W": 7, "N": 5, "G": 7}), ("pld", {})]:
        tr = decode(lm, ids, method, params, 40)
        assert tr.output_ids == ref, method
    assert tr.model_id.startswith("SmolLM2") and tr.text == lm.tokenizer.decode(ref)


def test_chat_template_and_errors(lm):
    ids = lm.encode("hi", chat=True)
    assert lm.tokenizer.decode(ids).rstrip().endswith("assistant")
    with pytest.raises(ValueError, match="empty"):
        lm.encode("   ")
    with pytest.raises(ModelError, match="offline"):
        load_model("no-such-org/no-such-model")
