"""Prompts in the model's own format: the chat template of a real instruct model (SmolLM2), the plain text
of a tiny model (exactly the tokenizer call of before)."""
from __future__ import annotations

import pytest

from rla_core.config import ModelSpec
from rla_core.models.chat import encode_pairs, encode_prompts, is_chat
from rla_core.models.factory import build_or_load
from rla_core.models.pretrained import SMOLLM2
from rla_core.models.tokenizer import train_tokenizer
from rla_core.rollout.prompts import policy_prompt


@pytest.fixture(scope="module")
def smol_tokenizer():
    from rla_core.models.factory import load_tokenizer
    from rla_core.models.pretrained import ensure

    return load_tokenizer(ensure(SMOLLM2))


def test_a_tiny_tokenizer_gets_the_plain_call(tmp_path):
    tokenizer = train_tokenizer(["go to desk 1", "take lamp 1"] * 30, 300)
    texts = ["go to desk 1", "take lamp 1"]
    assert not is_chat(tokenizer)
    assert encode_prompts(tokenizer, texts) == tokenizer(texts)["input_ids"]
    assert encode_prompts(tokenizer, texts, add_special_tokens=False) == tokenizer(
        texts, add_special_tokens=False)["input_ids"]
    assert encode_pairs(tokenizer, [("go to", " desk 1")]) == [
        (tokenizer("go to", add_special_tokens=False)["input_ids"],
         tokenizer(" desk 1", add_special_tokens=False)["input_ids"] + [tokenizer.eos_token_id])]


def test_a_real_policy_prompt_is_one_user_turn_of_the_chat_template(smol_tokenizer):
    """The seam: the household policy prompt the runner builds, through SmolLM2's tokenizer."""
    text = policy_prompt("put a mug in cabinet 1", [], "You are in the kitchen.", ["go to cabinet 1", "look"], 1)
    [ids] = encode_prompts(smol_tokenizer, [text])
    decoded = smol_tokenizer.decode(ids)
    assert decoded.startswith("<|im_start|>system\n") and decoded.endswith("<|im_start|>assistant\n")
    assert f"<|im_start|>user\n{text}<|im_end|>" in decoded
    [(prompt, target)] = encode_pairs(smol_tokenizer, [(text, "go to cabinet 1")])
    assert prompt == ids and smol_tokenizer.decode(target) == "go to cabinet 1<|im_end|>"


def test_the_real_model_answers_a_chat_prompt_in_its_own_words(smol_tokenizer):
    import torch

    model, tokenizer = build_or_load(ModelSpec(path=SMOLLM2.name), None, 0)
    [ids] = encode_prompts(tokenizer, ["Write a Python function add(a, b) that returns their sum."])
    with torch.no_grad():
        out = model.generate(torch.tensor([ids]), max_new_tokens=24, do_sample=False)
    assert "def add(a, b):" in tokenizer.decode(out[0, len(ids):], skip_special_tokens=True)
