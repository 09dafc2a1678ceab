"""forward_logprobs: the response-only vocabulary projection gives the full-logits numbers and grads."""
from __future__ import annotations

import random
from types import SimpleNamespace

import pytest
import torch

from rla_core.config import ModelSpec
from rla_core.losses import sequence_logprobs
from rla_core.models.factory import build_model
from rla_core.models.tokenizer import train_tokenizer
from rla_core.training.batching import _decoder_and_head, collate, forward_logprobs, length_order


@pytest.mark.parametrize("arch", ["qwen2", "llama"])
def test_response_only_projection_matches_full_logits(arch):
    tokenizer = train_tokenizer([f"open drawer {i} take key {i * 3} \\boxed{{{i % 7}}}" for i in range(60)], 320)
    spec = ModelSpec(arch=arch, hidden_size=32, num_layers=2, num_heads=4, intermediate_size=64, max_positions=128)
    model = build_model(spec, tokenizer, seed=0)
    assert _decoder_and_head(model) is not None  # the fast path is taken for these architectures
    rng = random.Random(0)
    items = [SimpleNamespace(prompt_ids=[rng.randrange(2, len(tokenizer)) for _ in range(rng.randint(3, 40))],
                             response_ids=[rng.randrange(2, len(tokenizer)) for _ in range(rng.randint(1, 6))])
             for _ in range(7)]
    batch = collate(items, pad_id=0)
    fast = forward_logprobs(model, batch)
    fast.sum().backward()
    fast_grads = [p.grad.clone() for p in model.parameters()]
    model.zero_grad()
    full = sequence_logprobs(model(input_ids=batch.input_ids, attention_mask=batch.attention_mask,
                                   position_ids=batch.position_ids, use_cache=False).logits,
                             batch.input_ids, batch.response_mask)
    full.sum().backward()
    assert torch.allclose(fast, full, atol=1e-5)
    assert (fast[~batch.response_mask] == 0).all() and (fast[batch.response_mask] < 0).all()
    for got, want in zip(fast_grads, (p.grad for p in model.parameters()), strict=True):
        assert torch.allclose(got, want, atol=1e-5)


def test_a_wrapper_without_a_plain_head_uses_the_full_forward():
    assert _decoder_and_head(torch.nn.Linear(2, 2)) is None


def test_length_order_is_longest_first_and_stable():
    items = [SimpleNamespace(prompt_ids=[1] * p, response_ids=[2] * r) for p, r in [(3, 1), (5, 2), (2, 2), (6, 1)]]
    assert length_order(items) == [1, 3, 0, 2]
