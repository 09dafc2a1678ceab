"""train.trainable: which weights an update (and the warm-start) trains."""
from __future__ import annotations

import pytest
import torch

from rla_core.config import ConfigError, ModelSpec, load_config
from rla_core.models.factory import build_model
from rla_core.models.tokenizer import train_tokenizer
from rla_core.training import trainable
from rla_core.training.sft import supervised_finetune


@pytest.fixture()
def tiny():
    tokenizer = train_tokenizer(["go to the desk", "take the lamp", "use the lamp"] * 20, 300)
    spec = ModelSpec(hidden_size=32, num_layers=4, num_heads=2, intermediate_size=64)
    return build_model(spec, tokenizer, 0), tokenizer


def test_all_changes_nothing_and_last_layers_trains_only_the_top(tiny):
    model, _ = tiny
    total = sum(p.numel() for p in model.parameters())
    assert trainable.apply(model, "all") == {"trainable_params": float(total), "total_params": float(total)}
    counts = trainable.apply(model, "last_layers:1")
    layers = trainable.decoder_layers(model)
    assert all(p.requires_grad for p in layers[-1].parameters())
    assert not any(p.requires_grad for layer in layers[:-1] for p in layer.parameters())
    assert all(p.requires_grad for p in model.get_output_embeddings().parameters())
    expected = sum(p.numel() for p in model.parameters() if p.requires_grad)
    assert counts["trainable_params"] == expected < total


def test_a_frozen_block_does_not_move_in_a_warm_start(tiny):
    model, tokenizer = tiny
    trainable.apply(model, "last_layers:2")
    layers = trainable.decoder_layers(model)
    frozen = [p.detach().clone() for p in layers[0].parameters()]
    top = [p.detach().clone() for p in layers[-1].parameters()]
    ids = tokenizer(["take the lamp"], add_special_tokens=False)["input_ids"][0]

    class Pair:
        prompt_ids, response_ids = ids[:2], ids[2:] + [tokenizer.eos_token_id]

    supervised_finetune(model, [Pair()] * 4, steps=3, batch_size=4, lr=1e-2, progress=False)
    assert all(torch.equal(a, b) for a, b in zip(frozen, layers[0].parameters()))
    assert any(not torch.equal(a, b) for a, b in zip(top, layers[-1].parameters()))


@pytest.mark.parametrize("spec", ["last_layers:0", "last_layers", "some", "last_layers:-1"])
def test_a_bad_spec_is_refused_by_the_config(spec):
    with pytest.raises(ConfigError):
        load_config(None, [f"train.trainable={spec}"])


def test_lora_trains_only_the_adapters_and_merges_into_a_plain_model(tiny, tmp_path):
    from rla_core.models.factory import load_pretrained, save_pretrained

    model, tokenizer = tiny
    before = {name: p.detach().clone() for name, p in model.named_parameters()}
    ids = tokenizer(["take the lamp"], add_special_tokens=False)["input_ids"][0]
    probe = torch.tensor([ids])
    with torch.no_grad():
        logits_before = model(input_ids=probe).logits
    counts = trainable.apply(model, "lora:4", seed=1)
    adapters = [m for m in model.modules() if isinstance(m, trainable.LoRALinear)]
    assert len(adapters) == 4 * 7  # q, k, v, o, gate, up, down in each of the 4 blocks
    trained = {name for name, p in model.named_parameters() if p.requires_grad}
    assert trained and all(name.endswith(("lora_a", "lora_b")) for name in trained)
    assert counts["trainable_params"] == sum(a.lora_a.numel() + a.lora_b.numel() for a in adapters)
    with torch.no_grad():  # B = 0: the adapted model starts as the model
        assert torch.allclose(model(input_ids=probe).logits, logits_before, atol=1e-6)

    class Pair:
        prompt_ids, response_ids = ids[:2], ids[2:] + [tokenizer.eos_token_id]

    result = supervised_finetune(model, [Pair()] * 4, steps=5, batch_size=4, lr=1e-2, progress=False)
    assert result["loss_last"] < result["loss_first"]
    with torch.no_grad():
        adapted = model(input_ids=probe).logits
    trainable.merge(model)
    assert not any(isinstance(m, trainable.LoRALinear) for m in model.modules())
    assert set(dict(model.named_parameters())) == set(before)  # the plain HF layout again
    with torch.no_grad():
        assert torch.allclose(model(input_ids=probe).logits, adapted, atol=1e-4)  # merged = adapted
    moved = [name for name, p in model.named_parameters() if not torch.equal(p, before[name])]
    assert moved and all(".layers." in name for name in moved)  # only the blocks' linear weights
    save_pretrained(model, tokenizer, tmp_path / "m")  # the checkpoint every stage loads
    loaded, _ = load_pretrained(tmp_path / "m")
    with torch.no_grad():
        assert torch.allclose(loaded(input_ids=probe).logits, adapted, atol=1e-4)


def test_lora_rank_is_checked_by_the_config():
    assert load_config(None, ["train.trainable=lora:8"]).train.trainable == "lora:8"
    with pytest.raises(ConfigError):
        load_config(None, ["train.trainable=lora:0"])


def _layer_outputs_requiring_grad(model, ids):
    seen = []
    hooks = [layer.register_forward_hook(lambda mod, inp, out: seen.append(
        (out[0] if isinstance(out, tuple) else out).requires_grad)) for layer in trainable.decoder_layers(model)]
    model(input_ids=ids)
    for hook in hooks:
        hook.remove()
    return seen


def _trained_grads(model, ids):
    model.zero_grad(set_to_none=True)
    logits = model(input_ids=ids).logits
    torch.nn.functional.cross_entropy(logits[0, :-1], ids[0, 1:]).backward()
    return {name: p.grad.clone() for name, p in model.named_parameters() if p.requires_grad}


def test_the_gradient_stops_at_the_lowest_trained_block_even_with_a_tied_head():
    """SmolLM2 ties its head to the input embedding: freezing the lower blocks alone left the graph
    running through all of them into the embedding lookup. With stop_gradient the frozen blocks' outputs
    need no grad; without it (the default, the exact gradient) every block's output is in the graph. The trained weights get the same gradient either way except the tied head's rows of the input
    tokens, which the old graph also fed through the embedding lookup."""
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=61, hidden_size=32, intermediate_size=64, num_hidden_layers=4,
                         num_attention_heads=4, num_key_value_heads=2, tie_word_embeddings=True)
    ids = torch.tensor([[3, 17, 5, 42, 9, 17, 30]])
    stopped, legacy = LlamaForCausalLM(config), LlamaForCausalLM(config)
    legacy.load_state_dict(stopped.state_dict())
    assert stopped.get_output_embeddings().weight is stopped.get_input_embeddings().weight  # tied
    trainable.apply(stopped, "last_layers:1", stop_gradient=True)
    trainable.apply(stopped, "last_layers:1", stop_gradient=True)  # applied twice: still one hook
    trainable.apply(legacy, "last_layers:1", stop_gradient=False)
    assert _layer_outputs_requiring_grad(stopped, ids) == [False, False, False, True]
    assert _layer_outputs_requiring_grad(legacy, ids) == [True, True, True, True]
    grads, with_inputs = _trained_grads(stopped, ids), _trained_grads(legacy, ids)
    assert grads.keys() == with_inputs.keys()
    head = next(name for name, p in stopped.named_parameters() if p is stopped.get_output_embeddings().weight)
    for name, grad in with_inputs.items():  # the top block and the norm: the same gradient either way
        if name != head:
            torch.testing.assert_close(grads[name], grad, rtol=1e-5, atol=1e-7)
    # the tied weight: the same in the rows of tokens that are not inputs, other in the input tokens' rows
    inputs = torch.zeros(config.vocab_size, dtype=torch.bool)
    inputs[torch.unique(ids[0, :-1])] = True  # the last token's position predicts nothing in the loss
    torch.testing.assert_close(with_inputs[head][~inputs], grads[head][~inputs], rtol=1e-5, atol=1e-7)
    assert (with_inputs[head][inputs] - grads[head][inputs]).abs().amax(dim=-1).gt(0).all()
    assert len(stopped.get_input_embeddings()._forward_hooks) == 1


def test_a_run_written_before_stop_gradient_keeps_the_old_gradient(tmp_path):
    import yaml

    from rla_core.config import config_to_yaml, load_run_config

    assert load_config().train.stop_gradient is False  # the exact gradient by default (docs/design.md)
    written = yaml.safe_load(config_to_yaml(load_config()))
    del written["train"]["stop_gradient"]
    (tmp_path / "config.yaml").write_text(yaml.safe_dump(written))
    assert load_run_config(tmp_path / "config.yaml").train.stop_gradient is False
