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


def test_preallocated_cache_decodes_bit_for_bit_like_the_concatenating_cache(monkeypatch):
    """The in-place KV buffer is a pure speed change: ids and log-probs equal transformers' own growing
    cache to the last bit, for sampled n > 1 (repeated prefill), greedy, and rows that stop early."""
    from transformers.cache_utils import DynamicCache

    from rla_core.rollout import hf_engine

    engine, tokenizer = _engine(batch_size=8)
    model, pad = engine.model.eval(), tokenizer.pad_token_id
    prompts = [tokenizer(t)["input_ids"] for t in TEXTS[:4] + ["go to", "open", "take apple 1 from countertop 1"]]
    # the untrained model rarely says eos: stop on the third token of the first greedy row, so that row
    # ends by its third step while sampled rows of a near-uniform model mostly run to the cap
    probe = hf_engine.sample_batch(model, prompts, SamplingParams(9, 0.0), -1, pad, torch.Generator())
    stop = probe[0][0][2]
    cases = [SamplingParams(12, 1.0, seed=5, n=3), SamplingParams(9, 0.0, seed=0), SamplingParams(20, 1.0, seed=2)]

    def decode_all():
        return [hf_engine.sample_batch(model, prompts, params, stop, pad, torch.Generator().manual_seed(params.seed))
                for params in cases]

    fast = decode_all()
    monkeypatch.setattr(hf_engine, "preallocated_cache", lambda model, capacity, *settings: DynamicCache())
    reference = decode_all()
    assert fast == reference
    # the cases exercise what they claim: rows that stop early beside rows that run to the cap
    rows = [ids for case in fast for ids, _ in case]
    assert any(ids[-1] == stop and len(ids) < 9 for ids in rows)
    assert any(len(ids) == 20 for ids in rows)


def test_preallocated_layer_fills_in_place_and_refuses_to_overflow():
    import pytest

    from rla_core.rollout.hf_engine import PreallocatedLayer

    layer = PreallocatedLayer(capacity=5)
    prefill = torch.randn(2, 1, 3, 4)
    keys, values = layer.update(prefill, -prefill)
    assert keys is prefill and layer.get_seq_length() == 3
    step = torch.randn(2, 1, 1, 4)
    keys, values = layer.update(step, -step)
    assert torch.equal(keys, torch.cat([prefill, step], dim=-2)) and torch.equal(values, -keys)
    layer.batch_repeat_interleave(2)
    assert layer.keys.shape == (4, 1, 4, 4) and torch.equal(layer.keys[1], layer.keys[0])
    layer.update(torch.randn(4, 1, 1, 4), torch.randn(4, 1, 1, 4))
    with pytest.raises(RuntimeError, match="5 positions cannot hold 6"):
        layer.update(torch.randn(4, 1, 1, 4), torch.randn(4, 1, 1, 4))


def test_sample_rows_draws_in_proportion_to_the_weights_and_never_a_zero_weight():
    from rla_core.rollout.hf_engine import sample_rows

    weights = torch.tensor([[1.0, 2.0, 0.0, 4.0, 1.0], [0.0, 0.0, 3.0, 0.0, 1.0]])  # unnormalised rows
    draws = 100_000
    picked = sample_rows(weights.repeat_interleave(draws, dim=0), torch.Generator().manual_seed(0)).view(2, draws)
    for row, expected in zip(picked, weights / weights.sum(dim=-1, keepdim=True)):
        frequency = torch.bincount(row, minlength=5).double() / draws
        assert float((frequency - expected.double()).abs().max()) < 0.006  # 4 sd of the largest share
        assert int(frequency[expected == 0].count_nonzero()) == 0


def test_sample_rows_at_the_ends_of_the_uniform_draw_picks_positive_weights(monkeypatch):
    from rla_core.rollout import hf_engine

    weights = torch.tensor([[0.0, 0.0, 2.0, 1.0, 0.0], [3.0, 0.0, 0.0, 0.0, 0.0], [0.0, 0.0, 0.0, 0.0, 5.0]])
    generator = torch.Generator().manual_seed(0)
    for uniform, expected in ((0.0, [2, 0, 4]), (1.0 - 2.0 ** -24, [3, 0, 4])):  # torch.rand's least and most
        monkeypatch.setattr(hf_engine.torch, "rand", lambda shape, value=uniform, **kw: torch.full(shape, value))
        assert hf_engine.sample_rows(weights, generator).tolist() == expected


def test_pick_samples_at_the_temperature_and_returns_the_temperature_one_logprob():
    from rla_core.rollout.hf_engine import _pick

    logits = torch.tensor([[0.0, 1.0, 2.0, -1.0]])
    draws = 100_000
    for temperature in (1.0, 0.5):
        token, logprob = _pick(logits.repeat(draws, 1), temperature, torch.Generator().manual_seed(1))
        expected = torch.softmax(logits[0] / temperature, dim=-1)
        frequency = torch.bincount(token, minlength=4).float() / draws
        assert float((frequency - expected).abs().max()) < 0.006
        assert torch.equal(logprob, torch.log_softmax(logits[0], dim=-1)[token])
    greedy, _ = _pick(logits, 0.0, torch.Generator())
    assert greedy.tolist() == [2]


def test_the_multinomial_sampler_draws_what_the_engine_drew_before_inverse_cdf_existed():
    """sampler="multinomial" keeps old runs reproducible: the same draws as torch.multinomial over the
    softmax with the engine's generator, which is what `_pick` did before `rollout.sampler` existed."""
    import pytest

    from rla_core.rollout import hf_engine

    logits = torch.randn(64, 300, generator=torch.Generator().manual_seed(0)) * 2
    for temperature in (1.0, 0.7):
        token, logprob = hf_engine._pick(logits, temperature, torch.Generator().manual_seed(4), "multinomial")
        expected = torch.multinomial(torch.softmax(logits / temperature, dim=-1), 1,
                                     generator=torch.Generator().manual_seed(4)).squeeze(-1)
        assert torch.equal(token, expected)
        assert torch.equal(logprob, torch.log_softmax(logits, dim=-1).gather(-1, token[:, None]).squeeze(-1))
    fast, _ = hf_engine._pick(logits, 1.0, torch.Generator().manual_seed(4), "inverse_cdf")
    assert not torch.equal(fast, expected)  # the two samplers draw differently from the same seed
    engine, tokenizer = _engine(batch_size=4)
    prompts = [tokenizer(t)["input_ids"] for t in ["go to", "open"]]
    old = get_engine("transformers")(engine.model, tokenizer, batch_size=4, sampler="multinomial")
    assert old.generate(prompts, SamplingParams(6, 1.0, seed=2)) != engine.generate(prompts, SamplingParams(6, 1.0, seed=2))
    with pytest.raises(ValueError, match="inverse_cdf, multinomial"):
        get_engine("transformers")(engine.model, tokenizer, sampler="gumbel")
