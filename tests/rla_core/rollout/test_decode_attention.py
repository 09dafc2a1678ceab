"""`rollout.decode_attention: matmul`: the decode steps' attention as two batched matmuls over a float32
cache, checked against the model's own attention (sdpa) on a Llama whose query heads share key/value
heads, as SmolLM2's do (9 query heads, 3 key/value heads)."""
import pytest
import torch
from transformers import LlamaConfig, LlamaForCausalLM

from rla_core.config import load_config
from rla_core.rollout import decode_attention, hf_engine
from rla_core.rollout.base import SamplingParams, get_engine


def _gqa_model(vocab=97, seed=0):
    torch.manual_seed(seed)
    config = LlamaConfig(vocab_size=vocab, hidden_size=48, intermediate_size=96, num_hidden_layers=2,
                         num_attention_heads=6, num_key_value_heads=2, max_position_embeddings=128,
                         pad_token_id=0, bos_token_id=1, eos_token_id=2)
    return LlamaForCausalLM(config).eval()


PROMPTS = [[1, 5, 9, 13, 40], [1, 7], [1, 30, 31, 32, 33, 34, 35, 36, 37], [1, 8, 8]]  # left-padded together


def _decode(model, params, attention):
    return hf_engine.sample_batch(model, PROMPTS, params, eos_id=2, pad_id=0,
                                  generator=torch.Generator().manual_seed(params.seed), decode_attention=attention)


def test_the_function_is_grouped_query_attention_with_the_mask():
    """Against the textbook formula: each query head h reads key/value head h // G, masked positions
    get no weight, softmax over the scaled scores."""
    torch.manual_seed(0)
    batch, heads, kv_heads, dim, length = 3, 6, 2, 8, 7
    query = torch.randn(batch, heads, 1, dim)
    key, value = torch.randn(batch, kv_heads, length, dim), torch.randn(batch, kv_heads, length, dim)
    mask = torch.ones(batch, 1, 1, length, dtype=torch.bool)
    mask[0, :, :, :3] = False  # a left-padded row
    mask[2, :, :, 1] = False
    module = torch.nn.Module().eval()
    out, weights = decode_attention.decode_attention(module, query, key, value, mask, scaling=0.3)
    assert weights is None and out.shape == (batch, 1, heads, dim)
    for b in range(batch):
        for h in range(heads):
            scores = key[b, h // 3] @ query[b, h, 0] * 0.3
            scores[~mask[b, 0, 0]] = float("-inf")
            expected = torch.softmax(scores, -1) @ value[b, h // 3]
            torch.testing.assert_close(out[b, 0, h], expected, rtol=1e-5, atol=1e-6)


def test_a_shared_prompt_is_the_same_attention_as_its_copies():
    """A `SharedPrefix` (the prompt's keys once per prompt, each sample's own after) gives the attention of
    the cache that copies the prompt n times, masks included; the sdpa fallback materializes it."""
    torch.manual_seed(1)
    prompts, n, heads, kv_heads, dim, prompt_length, own = 2, 3, 6, 2, 8, 5, 4
    query = torch.randn(prompts * n, heads, 1, dim)
    parts = [(torch.randn(prompts, kv_heads, prompt_length, dim), torch.randn(prompts * n, kv_heads, own, dim))
             for _ in range(2)]
    key, value = (decode_attention.SharedPrefix(prefix, mine, n) for prefix, mine in parts)
    assert key.materialize().shape == (prompts * n, kv_heads, prompt_length + own, dim)
    assert torch.equal(key.materialize()[n + 1, :, :prompt_length], parts[0][0][1])  # sample 1 of prompt 1
    mask = torch.ones(prompts * n, 1, 1, prompt_length + own, dtype=torch.bool)
    mask[:n, :, :, :2] = False  # prompt 0 was left-padded
    mask[4, :, :, prompt_length + 1] = False
    module = torch.nn.Module().eval()
    for m in (mask, None):
        shared, _ = decode_attention.decode_attention(module, query, key, value, m, scaling=0.3)
        copied, _ = decode_attention.decode_attention(module, query, key.materialize(), value.materialize(), m,
                                                      scaling=0.3)
        torch.testing.assert_close(shared, copied, rtol=1e-5, atol=1e-6)
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    module.train()  # the fallback path (training / several query positions) reads the materialized tensors
    module.num_key_value_groups = heads // kv_heads
    fallback, _ = decode_attention.decode_attention(module, query, key, value, mask, scaling=0.3)
    expected, _ = sdpa_attention_forward(module, query, key.materialize(), value.materialize(), mask, scaling=0.3)
    assert torch.equal(fallback, expected)


def test_the_cache_keeps_the_prompt_once_for_its_samples():
    layer = hf_engine.PreallocatedLayer(capacity=9, store_dtype=torch.float32, share_prompt=True)
    prompt = torch.randn(2, 3, 6, 4)
    layer.update(prompt, prompt + 1)
    layer.batch_repeat_interleave(4)
    keys, values = layer.update(torch.randn(8, 3, 1, 4), torch.randn(8, 3, 1, 4))
    assert isinstance(keys, decode_attention.SharedPrefix) and keys.repeats == 4
    assert keys.prefix.shape == (2, 3, 6, 4) and keys.own.shape == (8, 3, 1, 4)
    assert torch.equal(values.prefix, prompt + 1) and layer.get_seq_length() == 7
    layer.update(torch.randn(8, 3, 2, 4), torch.randn(8, 3, 2, 4))
    with pytest.raises(RuntimeError, match="cannot hold 10"):
        layer.update(torch.randn(8, 3, 1, 4), torch.randn(8, 3, 1, 4))
    plain = hf_engine.PreallocatedLayer(capacity=9)  # the model-attention path still copies
    plain.update(prompt, prompt)
    plain.batch_repeat_interleave(4)
    assert plain.keys.shape == (8, 3, 6, 4)


def test_decoding_matches_the_models_own_attention_in_float32():
    """Same ids, log-probs equal to float rounding: greedy and sampled n > 1 (the repeated prefill), over
    left-padded prompts of 2-9 tokens."""
    model = _gqa_model()
    for params in (SamplingParams(12, 0.0, seed=0), SamplingParams(10, 1.0, seed=3, n=3)):
        ours, reference = _decode(model, params, "matmul"), _decode(model, params, "model")
        assert [ids for ids, _ in ours] == [ids for ids, _ in reference]
        for (_, a), (_, b) in zip(ours, reference):
            assert max(abs(x - y) for x, y in zip(a, b)) < 1e-5
    assert any(len(ids) > 5 for ids, _ in ours)  # the decode steps ran, not just the prefill's token


def test_the_prefill_is_unchanged_to_the_bit_and_the_model_is_restored():
    """One new token is the prefill alone: identical log-probs to the last bit. Afterwards (also after a
    failure inside the call) the model attends with its own function again, so training is untouched."""
    model = _gqa_model()
    params = SamplingParams(1, 1.0, seed=1, n=2)
    assert _decode(model, params, "matmul") == _decode(model, params, "model")
    assert model.config._attn_implementation == "sdpa"
    with pytest.raises(RuntimeError, match="boom"), decode_attention.using(model):
        assert model.config._attn_implementation == decode_attention.NAME
        raise RuntimeError("boom")
    assert model.config._attn_implementation == "sdpa"


def test_bfloat16_decoding_stays_close_to_the_float32_model():
    """In bfloat16 the float32 cache keeps the attention exact, so the matmul path's log-probs are no
    further from the float32 model's than the bf16 kernel's (measured on the greedy ids both share)."""
    model = _gqa_model(seed=1)
    params = SamplingParams(8, 0.0, seed=0)
    reference = _decode(model, params, "model")
    bf16 = model.to(torch.bfloat16)
    errors = {}
    for attention in ("model", "matmul"):
        rows = _decode(bf16, params, attention)
        errors[attention] = max(abs(x - y) for (ids, lp), (ref_ids, ref_lp) in zip(rows, reference)
                                for x, y, i, j in zip(lp, ref_lp, ids, ref_ids) if i == j)
    assert errors["matmul"] < 0.05
    assert errors["matmul"] <= errors["model"] * 1.5


def test_the_config_key_and_the_engine():
    """auto = matmul for pretrained models, the model's own for the tiny ones; a bad value is refused
    with the valid ones named."""
    cfg = load_config()
    assert cfg.rollout.decode_attention == "auto"
    assert cfg.rollout.decode_attention_for(pretrained=True) == "matmul"
    assert cfg.rollout.decode_attention_for(pretrained=False) == "model"
    forced = load_config(overrides=["rollout.decode_attention=matmul"])
    assert forced.rollout.decode_attention_for(pretrained=False) == "matmul"
    with pytest.raises(ValueError, match="model, matmul"):
        get_engine("transformers")(_gqa_model(), None, decode_attention="flash")
    with pytest.raises(ValueError, match="model, matmul"):
        _decode(_gqa_model(), SamplingParams(2, 0.0), "flash")


def test_a_run_written_before_the_key_keeps_the_models_attention(tmp_path):
    import yaml

    from rla_core.config import config_to_yaml, load_run_config

    written = yaml.safe_load(config_to_yaml(load_config()))
    del written["rollout"]["decode_attention"]
    old = tmp_path / "config.yaml"
    old.write_text(yaml.safe_dump(written))
    assert load_run_config(old).rollout.decode_attention == "model"
