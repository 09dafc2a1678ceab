"""`rollout.drop_finished`: rows that have said eos leave the decode batch. Each remaining row must draw
what it drew in the full batch and read its prompt through the same matmul shapes, so the samples do not
change: to the bit where the platform's bfloat16 matmuls are row-independent (the claim `auto` rests on),
to float rounding in float32."""
import pytest
import torch
import torch.nn.functional as F
from transformers import LlamaConfig, LlamaForCausalLM

from rla_core.config import load_config
from rla_core.rollout import decode_attention, hf_engine
from rla_core.rollout.base import SamplingParams, get_engine

EOS = 2
PROMPTS = [[1, 5, 9, 13, 10], [1, 7], [1, 3, 4, 5, 6, 7, 8, 9, 11], [1, 8, 8], [1, 12, 3]]


def _model(vocab=16, seed=0):
    """A Llama whose query heads share key/value heads (as SmolLM2's); over 16 tokens an untrained one says
    eos often, so rows end at many different steps."""
    torch.manual_seed(seed)
    config = LlamaConfig(vocab_size=vocab, hidden_size=48, intermediate_size=96, num_hidden_layers=2,
                         num_attention_heads=6, num_key_value_heads=2, max_position_embeddings=128,
                         pad_token_id=0, bos_token_id=1, eos_token_id=EOS)
    return LlamaForCausalLM(config).eval()


def _decode(model, params, attention, drop, eos=EOS):
    return hf_engine.sample_batch(model, PROMPTS, params, eos_id=eos, pad_id=0,
                                  generator=torch.Generator().manual_seed(params.seed), decode_attention=attention,
                                  drop_finished=drop)


CASES = [SamplingParams(40, 1.0, seed=3, n=4), SamplingParams(40, 1.0, seed=5), SamplingParams(30, 0.0, seed=0, n=2)]


def _row_independent_bf16_matmuls(model) -> bool:
    """Whether this platform's kernels give a row the same bits in a batch of 2-16 rows: the bfloat16
    `linear`s, bfloat16 sdpa over a padded cache (the model's attention) and float32 batched matmuls (the
    matmul attention's own part)."""
    torch.manual_seed(7)
    for layer in model.model.layers[:1]:
        for weight in (layer.self_attn.q_proj.weight, layer.mlp.down_proj.weight, model.lm_head.weight):
            x = torch.randn(16, 1, weight.shape[1], dtype=torch.bfloat16)
            full = F.linear(x, weight)
            if any(not torch.equal(full[:rows], F.linear(x[:rows], weight)) for rows in range(2, 16)):
                return False
    query = torch.randn(16, 6, 1, 8, dtype=torch.bfloat16)
    key, value = (torch.randn(16, 2, 20, 8, dtype=torch.bfloat16) for _ in range(2))
    mask = torch.ones(16, 1, 1, 20, dtype=torch.bool)
    mask[::3, :, :, :4] = False

    def sdpa(rows):
        return F.scaled_dot_product_attention(query[:rows], key[:rows], value[:rows], attn_mask=mask[:rows],
                                              enable_gqa=True)

    grouped, own = torch.randn(16, 2, 3, 8), torch.randn(16, 2, 8, 20)
    full_sdpa, full_bmm = sdpa(16), torch.matmul(grouped, own)
    return all(torch.equal(full_sdpa[:rows], sdpa(rows)) and torch.equal(full_bmm[:rows],
               torch.matmul(grouped[:rows], own[:rows])) for rows in range(2, 16))


def test_dropping_rows_changes_no_sample_in_bfloat16(monkeypatch):
    """Sampled n = 4, sampled n = 1 and greedy, with the model's attention and the matmul attention over a
    shared prompt: the same ids and log-probs as decoding every row to the end, and rows really left."""
    model = _model().to(torch.bfloat16)
    exact = _row_independent_bf16_matmuls(model)
    batches = []
    select = hf_engine.PreallocatedLayer.batch_select_indices

    def spy(self, indices):
        batches.append(len(indices))
        return select(self, indices)

    monkeypatch.setattr(hf_engine.PreallocatedLayer, "batch_select_indices", spy)
    # greedy rows of an untrained model rarely say eos: stop them on a token of their own (row 0's 4th)
    greedy_stop = _decode(model, CASES[2], "model", False, eos=-1)[0][0][3]
    for attention in ("model", "matmul"):
        for params in CASES:
            eos = EOS if params.temperature > 0 else greedy_stop
            kept = _decode(model, params, attention, False, eos)
            assert not batches
            dropped = _decode(model, params, attention, True, eos)
            assert [ids for ids, _ in dropped] == [ids for ids, _ in kept]
            if exact:
                assert dropped == kept
            else:  # bf16 matmuls that round by batch size: log-probs agree to bf16 rounding only
                assert max(abs(a - b) for (_, x), (_, y) in zip(dropped, kept) for a, b in zip(x, y)) < 0.05
            lengths = [len(ids) for ids, _ in kept]
            assert len(set(lengths)) > 2 and max(lengths) > 2 * min(lengths)  # rows ended early beside long ones
            assert batches and 1 not in batches  # rows left, never down to a one-row matmul
            assert batches == sorted(batches, reverse=True) and min(batches) <= len(kept) // 2
            batches.clear()


def test_dropping_rows_in_float32_keeps_the_ids_and_the_log_probs_to_rounding():
    model = _model(seed=1)
    greedy_stop = _decode(model, CASES[2], "model", False, eos=-1)[0][0][3]
    for attention in ("model", "matmul"):
        for params in CASES:
            eos = EOS if params.temperature > 0 else greedy_stop
            kept, dropped = (_decode(model, params, attention, drop, eos) for drop in (False, True))
            assert [ids for ids, _ in dropped] == [ids for ids, _ in kept]
            assert max(abs(a - b) for (_, x), (_, y) in zip(dropped, kept) for a, b in zip(x, y)) < 1e-5


def test_a_kept_row_draws_the_uniform_it_draws_in_the_full_batch():
    weights = torch.rand(6, 11)
    weights[:, 4] = 0
    full = hf_engine.sample_rows(weights, torch.Generator().manual_seed(2))
    rows = torch.tensor([1, 3, 4])
    part = hf_engine.sample_rows(weights[rows], torch.Generator().manual_seed(2), rows, 6)
    assert torch.equal(part, full[rows])


def test_the_shared_prompt_cache_keeps_its_prompt_and_the_kept_rows_own_positions():
    """After dropping rows the attention over (prompt once per prompt, own positions of the kept rows)
    equals the attention over the copied cache of the same rows; the cache writes new positions to them."""
    torch.manual_seed(3)
    prompts, n, kv_heads, heads, dim, prompt_length = 2, 3, 2, 6, 8, 5
    layer = hf_engine.PreallocatedLayer(capacity=12, store_dtype=torch.float32, share_prompt=True)
    prompt = torch.randn(prompts, kv_heads, prompt_length, dim)
    layer.update(prompt, -prompt)
    layer.batch_repeat_interleave(n)
    own = torch.randn(prompts * n, kv_heads, 2, dim)
    layer.update(own, -own)
    kept = torch.tensor([0, 2, 3, 5])
    layer.batch_select_indices(kept)
    step = torch.randn(4, kv_heads, 1, dim)
    keys, values = layer.update(step, -step)
    assert torch.equal(keys.rows, kept) and torch.equal(keys.prefix, prompt)
    assert torch.equal(keys.own, torch.cat([own[kept], step], dim=2))
    expected = torch.cat([prompt.repeat_interleave(n, dim=0)[kept], own[kept], step], dim=2)
    assert torch.equal(keys.materialize(), expected) and layer.get_seq_length() == prompt_length + 3
    layer.batch_select_indices(torch.tensor([1, 3]))  # a second drop composes with the first
    assert torch.equal(layer.keys.rows, torch.tensor([2, 5]))
    assert torch.equal(layer.values.materialize(), -expected[[1, 3]])
    query = torch.randn(2, heads, 1, dim)
    mask = torch.ones(2, 1, 1, prompt_length + 3, dtype=torch.bool)
    mask[0, :, :, :2] = False
    module = torch.nn.Module().eval()
    shared, _ = decode_attention.decode_attention(module, query, layer.keys, layer.values, mask, scaling=0.3)
    copied, _ = decode_attention.decode_attention(module, query, layer.keys.materialize(),
                                                  layer.values.materialize(), mask, scaling=0.3)
    torch.testing.assert_close(shared, copied, rtol=1e-5, atol=1e-6)


def test_the_config_key_and_the_engine(tmp_path):
    """auto = on where the model computes in bfloat16; true / false forced (YAML's on / off read as those); a
    bad value is refused; a run written before the key keeps decoding every row."""
    import yaml

    from rla_core.config import ConfigError, config_to_yaml, load_run_config

    assert load_config().rollout.drop_finished == "auto"
    make = get_engine("transformers")
    assert make(_model(), None)._drops() is False
    assert make(_model().to(torch.bfloat16), None)._drops() is True
    assert make(_model(), None, drop_finished=True)._drops() is True
    assert make(_model().to(torch.bfloat16), None, drop_finished=False)._drops() is False
    with pytest.raises(ValueError, match="auto, True, False"):
        make(_model(), None, drop_finished="yes")
    with pytest.raises(ConfigError, match="drop_finished"):
        load_config(overrides=["rollout.drop_finished=sometimes"])
    assert load_config(overrides=["rollout.drop_finished=off"]).rollout.drop_finished is False
    assert load_config(overrides=["rollout.drop_finished=true"]).rollout.drop_finished is True
    written = yaml.safe_load(config_to_yaml(load_config()))
    del written["rollout"]["drop_finished"]
    old = tmp_path / "config.yaml"
    old.write_text(yaml.safe_dump(written))
    assert load_run_config(old).rollout.drop_finished is False


def test_the_engine_decodes_the_same_with_and_without_dropping():
    """Through `TransformersEngine.generate` (chunks, sorting, regrouping) on a bfloat16 model."""
    class Tokenizer:
        eos_token_id, pad_token_id = EOS, 0

        def decode(self, ids, **_):
            return " ".join(map(str, ids))

    model = _model(seed=2).to(torch.bfloat16)
    make = get_engine("transformers")
    params = SamplingParams(40, 1.0, seed=9, n=3)
    on = make(model, Tokenizer(), batch_size=6, drop_finished=True).generate(PROMPTS, params)
    off = make(model, Tokenizer(), batch_size=6, drop_finished=False).generate(PROMPTS, params)
    assert [g.token_ids for g in on] == [g.token_ids for g in off] and len(on) == 15
    assert [g.text for g in on] == [g.text for g in off]
