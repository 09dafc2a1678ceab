"""The batched KV-cache decoder must match one-prompt-at-a-time decoding (left padding is exact)."""
import torch

from rla_core.config import ModelSpec
from rla_core.models.factory import build_model
from rla_core.models.tokenizer import train_tokenizer
from rla_core.rollout.base import SamplingParams, get_engine

TEXTS = ["go to fridge 1 and open it", "take apple 1 from countertop 1", "\\boxed{1} \\boxed{2} \\boxed{12}",
         "You arrive at cabinet 3. The cabinet 3 is closed."] * 20


def _engine(batch_size):
    tokenizer = train_tokenizer(TEXTS, 300)
    model = build_model(ModelSpec(hidden_size=32, num_layers=2, num_heads=2, intermediate_size=64,
                                  max_positions=128), tokenizer, seed=0)
    return get_engine("transformers")(model, tokenizer, batch_size=batch_size), tokenizer


def _no_cache_greedy(model, prompt, steps, eos):
    ids = list(prompt)
    out = []
    for _ in range(steps):
        logits = model(input_ids=torch.tensor([ids])).logits[0, -1]
        token = int(logits.argmax())
        out.append(token)
        ids.append(token)
        if token == eos:
            break
    return out


def test_batched_greedy_equals_unbatched_uncached_greedy():
    engine, tokenizer = _engine(batch_size=8)
    prompts = [tokenizer(t)["input_ids"] for t in ["go to", "take apple 1 from countertop", "You arrive at cabinet 3."]]
    params = SamplingParams(max_new_tokens=6, temperature=0.0, seed=0)
    batched = engine.generate(prompts, params)
    for prompt, generation in zip(prompts, batched):
        expected = _no_cache_greedy(engine.model, prompt, 6, tokenizer.eos_token_id)
        assert generation.token_ids == expected


def test_sampling_is_reproducible_by_seed_and_keeps_order():
    engine, tokenizer = _engine(batch_size=2)
    prompts = [tokenizer(t)["input_ids"] for t in ["go to", "take apple 1 from countertop", "open"]]
    a = engine.generate(prompts, SamplingParams(5, 1.0, seed=3))
    b = engine.generate(prompts, SamplingParams(5, 1.0, seed=3))
    assert [g.token_ids for g in a] == [g.token_ids for g in b]
    assert len(a) == 3 and all(len(g.token_ids) == len(g.logprobs) for g in a)
    assert all(lp <= 0 for g in a for lp in g.logprobs)


def test_unknown_backend_lists_valid_names():
    import pytest

    with pytest.raises(KeyError, match="transformers"):
        get_engine("nope")


def test_n_samples_share_the_prefill_and_group_by_prompt():
    engine, tokenizer = _engine(batch_size=4)
    prompts = [tokenizer(t)["input_ids"] for t in ["go to", "take apple 1 from countertop", "open"]]
    single = engine.generate(prompts, SamplingParams(5, 0.0, seed=0))
    tripled = engine.generate(prompts, SamplingParams(5, 0.0, seed=0, n=3))
    assert len(tripled) == 9
    for i, generation in enumerate(single):
        assert all(g.token_ids == generation.token_ids for g in tripled[3 * i:3 * i + 3])
    sampled = engine.generate(prompts, SamplingParams(5, 1.0, seed=1, n=3))
    assert len(sampled) == 9 and all(g.token_ids for g in sampled)
