"""Tiny random causal LMs built in-process (no downloads) for the equivalence tests."""

from __future__ import annotations

import torch

from decoding.model import LoadedModel


class IdTokenizer:
    """Decodes token ids as `<id>` pieces; enough for traces of random models."""

    chat_template = None
    eos_token_id = None

    def decode(self, ids, **_):
        return "".join(f"<{int(t)}>" for t in ids)


class ByteTokenizer(IdTokenizer):
    """Enough of a tokenizer for the app's sidebar on a tiny model: one token per byte, modulo the
    vocabulary of tiny_lm."""

    def __call__(self, text, **_):
        return {"input_ids": [b % 96 for b in text.encode()]}


def tiny_lm(kind: str = "llama", seed: int = 0, vocab: int = 96, eos: int | None = None, layers: int = 2) -> LoadedModel:
    from transformers import LlamaConfig, LlamaForCausalLM, Qwen2Config, Qwen2ForCausalLM

    torch.manual_seed(seed)
    common = dict(vocab_size=vocab, hidden_size=64, intermediate_size=128, num_hidden_layers=layers,
                  num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=1024,
                  eos_token_id=eos, bos_token_id=None, pad_token_id=None, initializer_range=0.2)
    if kind == "llama":
        model = LlamaForCausalLM(LlamaConfig(**common))
    elif kind == "qwen2":
        model = Qwen2ForCausalLM(Qwen2Config(**common))
    else:
        raise ValueError(kind)
    model.generation_config.eos_token_id = eos
    model.generation_config.pad_token_id = 0
    model.eval()
    return LoadedModel(model, IdTokenizer(), f"tiny-{kind}-{seed}", "cpu", "float32")


def generate_greedy(lm: LoadedModel, prompt_ids: list[int], max_new_tokens: int) -> list[int]:
    """transformers' own greedy generate: the reference every method must equal."""
    ids = torch.tensor([prompt_ids])
    with torch.inference_mode():
        out = lm.model.generate(ids, attention_mask=torch.ones_like(ids), do_sample=False, max_new_tokens=max_new_tokens,
                                min_new_tokens=0, eos_token_id=lm.model.generation_config.eos_token_id, pad_token_id=0,
                                temperature=None, top_p=None, top_k=None)
    new = out[0, len(prompt_ids):].tolist()
    eos = lm.model.generation_config.eos_token_id
    if eos is not None and eos in new:  # generate pads after EOS only in batches; cut to be safe
        new = new[: new.index(eos) + 1]
    return new


CLLM_PROMPTS = [[3 + p, 4, 5, 6 + p, 7, 8] for p in range(4)]


def cllm_lm() -> LoadedModel:
    """The tiny model the CLLM tests train."""
    return tiny_lm("llama", 0, vocab=64)


def cllm_items(lm: LoadedModel) -> list[dict]:
    """Jacobi trajectory items (n = 8, 24 tokens) of CLLM_PROMPTS on ``lm``, as `python -m cllm collect` writes them."""
    import cllm
    from decoding.loop import decode

    out = []
    for i, ids in enumerate(CLLM_PROMPTS):
        out += cllm.items_from_trace(decode(lm, ids, "jacobi", {"n": 8}, 24), f"p{i}", "cat")
    return out
