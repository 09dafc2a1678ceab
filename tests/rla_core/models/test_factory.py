"""Tokenizer training, tiny model building, atomic save / local load."""
from __future__ import annotations

import json

import pytest
import torch

from rla_core.config import ModelSpec
from rla_core.fileio import atomic_directory
from rla_core.models.factory import (
    build_model,
    build_or_load,
    load_pretrained,
    save_pretrained,
)
from rla_core.models.tokenizer import train_tokenizer

TEXTS = [
    f"You are in the kitchen. Take the apple {i}. Answer with \\boxed{{{i % 17}}}" for i in range(60)
] + ["The step is good: \\boxed{1}", "The step is bad: \\boxed{-1}"] * 20 + [
    f"\\boxed{{{i}}}" for i in range(40)  # responses start with the box, no leading space
]


def tiny_spec(arch: str = "qwen2", **overrides) -> ModelSpec:
    fields = dict(
        arch=arch, hidden_size=32, num_layers=2, num_heads=2, intermediate_size=64, max_positions=64
    )
    return ModelSpec(**{**fields, **overrides})


@pytest.fixture(scope="module")
def tokenizer():
    return train_tokenizer(TEXTS, vocab_size=400)


def test_tokenizer_round_trips_any_text(tokenizer):
    text = "Go to shelf 3 → \\boxed{12}\n\tmixed  spaces, ünïcode 😀"
    ids = tokenizer(text)["input_ids"]
    assert tokenizer.decode(ids) == text


def test_tokenizer_splits_digits_and_keeps_boxed_whole(tokenizer):
    assert tokenizer.tokenize("\\boxed{12}") == ["\\boxed{", "1", "2", "}"]
    assert tokenizer.tokenize(" \\boxed{7}") == ["Ġ\\boxed{", "7", "}"]  # Ġ: the byte-level space
    assert "\\boxed{" in tokenizer.get_vocab()


def test_tokenizer_specials_and_left_padding(tokenizer):
    assert tokenizer.pad_token == "<pad>" and tokenizer.eos_token == "<eos>"
    assert tokenizer.pad_token_id != tokenizer.eos_token_id
    assert tokenizer.padding_side == "left"
    batch = tokenizer(["kitchen", "take the apple 3"], padding=True)
    assert batch["input_ids"][0][0] == tokenizer.pad_token_id  # shorter row padded on the left
    assert tokenizer("kitchen")["input_ids"][-1] != tokenizer.eos_token_id  # no eos added silently


def test_tokenizer_rejects_too_small_vocab():
    with pytest.raises(ValueError, match="vocab_size"):
        train_tokenizer(TEXTS, vocab_size=100)


@pytest.mark.parametrize("arch, cls_name", [("qwen2", "Qwen2ForCausalLM"), ("llama", "LlamaForCausalLM")])
def test_build_model_both_archs(tokenizer, arch, cls_name):
    model = build_model(tiny_spec(arch), tokenizer, seed=0)
    assert type(model).__name__ == cls_name
    assert model.config.hidden_size == 32 and model.config.num_hidden_layers == 2
    assert model.config.vocab_size == len(tokenizer)
    assert model.get_output_embeddings().weight is model.get_input_embeddings().weight  # tied
    assert all(p.dtype == torch.float32 for p in model.parameters())
    ids = torch.tensor([tokenizer("take the apple")["input_ids"]])
    assert model(input_ids=ids).logits.shape == (1, ids.shape[1], len(tokenizer))


def test_build_model_is_seeded_and_leaves_global_rng_alone(tokenizer):
    torch.manual_seed(123)
    expected = torch.rand(1)
    torch.manual_seed(123)
    first = build_model(tiny_spec(), tokenizer, seed=7)
    assert torch.equal(torch.rand(1), expected)
    second = build_model(tiny_spec(), tokenizer, seed=7)
    third = build_model(tiny_spec(), tokenizer, seed=8)
    weight = lambda m: m.get_input_embeddings().weight  # noqa: E731
    assert torch.equal(weight(first), weight(second))
    assert not torch.equal(weight(first), weight(third))


def test_bad_head_count_names_the_fields(tokenizer):
    with pytest.raises(ValueError, match="num_heads"):
        build_model(tiny_spec(num_heads=3), tokenizer, seed=0)


@pytest.mark.parametrize("arch", ["qwen2", "llama"])
def test_save_load_round_trip_gives_identical_logits(tokenizer, tmp_path, arch):
    model = build_model(tiny_spec(arch), tokenizer, seed=0).eval()
    target = tmp_path / "ckpt"
    save_pretrained(model, tokenizer, target)
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]  # no staging left over
    loaded, loaded_tok = load_pretrained(target)
    ids = torch.tensor([tokenizer("take the apple \\boxed{3}")["input_ids"]])
    with torch.no_grad():
        assert torch.equal(model(input_ids=ids).logits, loaded.eval()(input_ids=ids).logits)
    assert loaded_tok.padding_side == "left" and loaded_tok.pad_token == "<pad>"
    assert loaded_tok.tokenize("\\boxed{12}") == tokenizer.tokenize("\\boxed{12}")
    assert loaded.get_output_embeddings().weight is loaded.get_input_embeddings().weight


def test_save_replaces_an_existing_checkpoint(tokenizer, tmp_path):
    target = tmp_path / "ckpt"
    save_pretrained(build_model(tiny_spec(), tokenizer, seed=0), tokenizer, target)
    newer = build_model(tiny_spec(), tokenizer, seed=1)
    save_pretrained(newer, tokenizer, target)
    loaded, _ = load_pretrained(target)
    assert torch.equal(loaded.get_input_embeddings().weight, newer.get_input_embeddings().weight)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ckpt"]


def test_atomic_directory_leaves_target_untouched_on_error(tmp_path):
    target = tmp_path / "out"
    target.mkdir()
    (target / "keep.txt").write_text("old")
    with pytest.raises(RuntimeError):
        with atomic_directory(target) as staging:
            (staging / "keep.txt").write_text("new")
            raise RuntimeError("crash mid-write")
    assert (target / "keep.txt").read_text() == "old"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]


def test_load_pretrained_on_non_hf_dir_names_the_path(tmp_path):
    (tmp_path / "notes.txt").write_text("not a model")
    with pytest.raises(ValueError, match=str(tmp_path)):
        load_pretrained(tmp_path)
    with pytest.raises(FileNotFoundError, match="missing"):
        load_pretrained(tmp_path / "missing")


def test_load_pretrained_on_broken_config_names_the_path(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "no-such-arch"}))
    with pytest.raises(ValueError, match=str(tmp_path)):
        load_pretrained(tmp_path)


def test_load_pretrained_falls_back_to_eos_as_pad(tokenizer, tmp_path):
    model = build_model(tiny_spec(), tokenizer, seed=0)
    save_pretrained(model, tokenizer, tmp_path / "ckpt")
    config_path = tmp_path / "ckpt" / "tokenizer_config.json"
    config = json.loads(config_path.read_text())
    config.pop("pad_token")
    config.pop("padding_side")
    config_path.write_text(json.dumps(config))
    _, loaded_tok = load_pretrained(tmp_path / "ckpt")
    assert loaded_tok.pad_token == "<eos>" and loaded_tok.padding_side == "left"


def test_build_or_load(tokenizer, tmp_path):
    built, same_tok = build_or_load(tiny_spec(), tokenizer, seed=0)
    assert same_tok is tokenizer
    save_pretrained(built, tokenizer, tmp_path / "ckpt")
    loaded, loaded_tok = build_or_load(tiny_spec(path=str(tmp_path / "ckpt")), None, seed=99)
    assert torch.equal(loaded.get_input_embeddings().weight, built.get_input_embeddings().weight)
    assert len(loaded_tok) == len(tokenizer)
    with pytest.raises(ValueError, match="tokenizer"):
        build_or_load(tiny_spec(), None, seed=0)
