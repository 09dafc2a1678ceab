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


@pytest.mark.parametrize("arch", ["qwen2", "llama"])
def test_shared_prompts_run_once_with_the_same_logprobs_and_gradients(arch):
    """Rows sharing a prompt (judge samples of one step) take the cached-prefix path; values and
    gradients equal the full-logits forward of every row on its own."""
    tokenizer = train_tokenizer([f"open drawer {i} take key {i * 3} \\boxed{{{i % 7}}}" for i in range(60)], 320)
    spec = ModelSpec(arch=arch, hidden_size=32, num_layers=2, num_heads=4, intermediate_size=64, max_positions=128)
    model = build_model(spec, tokenizer, seed=0)
    rng = random.Random(1)
    prompts = [[rng.randrange(2, len(tokenizer)) for _ in range(rng.randint(3, 30))] for _ in range(3)]
    items = [SimpleNamespace(prompt_ids=prompts[k % 3], response_ids=[rng.randrange(2, len(tokenizer))
                                                                       for _ in range(rng.randint(1, 6))])
             for k in range(8)]  # 3 distinct prompts among 8 rows
    batch = collate(items, pad_id=0)
    seen = []
    hook = model.get_decoder().register_forward_hook(lambda m, args, kwargs, out: seen.append(kwargs["input_ids"].shape),
                                                     with_kwargs=True)
    shared = forward_logprobs(model, batch)
    hook.remove()
    assert seen[0][0] == 3  # the prompts ran once each
    shared.sum().backward()
    shared_grads = [p.grad.clone() for p in model.parameters()]
    model.zero_grad()
    full = sequence_logprobs(model(input_ids=batch.input_ids, attention_mask=batch.attention_mask,
                                   position_ids=batch.position_ids, use_cache=False).logits,
                             batch.input_ids, batch.response_mask)
    full.sum().backward()
    assert torch.allclose(shared, full, atol=1e-5)
    assert (shared[~batch.response_mask] == 0).all()
    for got, want in zip(shared_grads, (p.grad for p in model.parameters()), strict=True):
        assert torch.allclose(got, want, atol=1e-5)


def test_group_chunks_keep_same_prompt_items_together():
    from rla_core.training.batching import group_chunks

    items = [SimpleNamespace(prompt_ids=[1 + k % 4] * (2 + k % 4), response_ids=[9]) for k in range(12)]
    chunks = group_chunks(items, 5)
    assert sorted(i for c in chunks for i in c) == list(range(12)) and all(len(c) <= 5 for c in chunks)
    for chunk in chunks:
        for i in chunk:  # every item of a prompt sits in its prompt's chunk
            assert all(j in chunk for j in range(12) if items[j].prompt_ids == items[i].prompt_ids)
    assert [len(items[c[0]].prompt_ids) for c in chunks] == sorted((len(items[c[0]].prompt_ids) for c in chunks),
                                                                  reverse=True)


def test_split_groups_packs_whole_groups_into_near_equal_parts():
    from rla_core.training.batching import split_groups

    singletons = [[i] for i in range(10)]
    assert [len(p) for p in split_groups(singletons, 3)] == [3, 4, 3]
    assert [i for p in split_groups(singletons, 4) for i in p] == list(range(10))
    groups = [[0, 1, 2], [3, 4, 5], [6], [7, 8, 9], [10]]
    parts = split_groups(groups, 2)
    assert parts == [[0, 1, 2, 3, 4, 5], [6, 7, 8, 9, 10]]  # no group is split
    assert split_groups([[0, 1, 2, 3]], 3) == [[0, 1, 2, 3]]  # parts that get no group are dropped


def test_split_groups_cuts_groups_when_whole_ones_cannot_fill_the_parts():
    """train.exact_steps: 3 same-prompt groups of 8 for 4 steps make 4 parts of 6 (whole groups: 3)."""
    from rla_core.training.batching import split_groups

    groups = [list(range(0, 8)), list(range(8, 16)), list(range(16, 24))]
    assert [len(p) for p in split_groups(groups, 4)] == [8, 8, 8]
    parts = split_groups(groups, 4, whole=False)
    assert [len(p) for p in parts] == [6, 6, 6, 6] and [i for p in parts for i in p] == list(range(24))
    uneven = [[0], list(range(1, 10))]  # whole: 2 parts for 3; cut: 3 parts of 3 and 4
    assert sorted(len(p) for p in split_groups(uneven, 3, whole=False)) == [3, 3, 4]
    assert split_groups([[0, 1]], 5, whole=False) == [[0], [1]]  # never more parts than items
    many = [[i] for i in range(10)]  # enough groups: the whole-group packing, unchanged
    assert split_groups(many, 4, whole=False) == split_groups(many, 4)
