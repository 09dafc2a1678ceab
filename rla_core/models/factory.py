"""Causal LMs: build a tiny Qwen2/Llama from a ModelSpec, or load any local HF directory.

Checkpoints are written atomically: everything goes to a temporary sibling directory first, which
is then renamed into place, so a crash never leaves a half-written model where a reader looks.
"""
from __future__ import annotations

import json
import os
from pathlib import Path

import torch
from transformers import PreTrainedModel, PreTrainedTokenizerBase

from rla_core.config import ModelSpec
from rla_core.fileio import atomic_directory

_ARCHS = ("qwen2", "llama")


def _tiny_config(spec: ModelSpec, tokenizer: PreTrainedTokenizerBase):
    """The transformers config for `spec`: tied embeddings, no dropout, vocab = len(tokenizer)."""
    from transformers import LlamaConfig, Qwen2Config

    if spec.hidden_size % spec.num_heads:
        raise ValueError(
            f"model hidden_size={spec.hidden_size} must be divisible by num_heads={spec.num_heads}"
        )
    common = dict(
        vocab_size=len(tokenizer),
        hidden_size=spec.hidden_size,
        intermediate_size=spec.intermediate_size,
        num_hidden_layers=spec.num_layers,
        num_attention_heads=spec.num_heads,
        num_key_value_heads=spec.num_heads,
        max_position_embeddings=spec.max_positions,
        tie_word_embeddings=True,
        attention_dropout=0.0,
        pad_token_id=tokenizer.pad_token_id,
        # The tokenizer has no BOS; pointing bos at eos keeps generate() from inventing one.
        bos_token_id=tokenizer.eos_token_id,
        eos_token_id=tokenizer.eos_token_id,
    )
    if spec.arch == "qwen2":
        return Qwen2Config(use_sliding_window=False, **common)
    if spec.arch == "llama":
        return LlamaConfig(**common)
    raise ValueError(f"model arch '{spec.arch}' is not one of {list(_ARCHS)}")


def build_model(spec: ModelSpec, tokenizer: PreTrainedTokenizerBase, seed: int) -> PreTrainedModel:
    """A freshly initialised tiny causal LM (float32) sized by `spec`; same seed → same weights.

    The global torch RNG is left untouched (initialisation runs under a forked RNG).
    """
    from transformers import AutoModelForCausalLM

    config = _tiny_config(spec, tokenizer)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    return model


def save_pretrained(
    model: PreTrainedModel,
    tokenizer: PreTrainedTokenizerBase | None,
    directory: str | os.PathLike,
) -> Path:
    """Write model (safetensors + config) and tokenizer to `directory` atomically; return its path."""
    with atomic_directory(directory) as staging:
        model.save_pretrained(staging)
        if tokenizer is not None:
            tokenizer.save_pretrained(staging)
    return Path(directory)


def _check_model_directory(directory: Path) -> None:
    if not directory.is_dir():
        raise FileNotFoundError(f"model directory not found: {directory}")
    if not (directory / "config.json").is_file():
        raise ValueError(
            f"{directory} is not a local Hugging Face causal-LM directory (no config.json); "
            "expected the output of save_pretrained"
        )


_GENERIC = {"TokenizersBackend", "PreTrainedTokenizerFast"}


def _saved_tokenizer_class(directory: Path) -> str | None:
    config_path = directory / "tokenizer_config.json"
    if not config_path.is_file():
        return None
    try:
        return json.loads(config_path.read_text()).get("tokenizer_class")
    except (json.JSONDecodeError, AttributeError):
        return None


def load_tokenizer(directory: str | os.PathLike) -> PreTrainedTokenizerBase:
    """The tokenizer saved in `directory`, with left padding and a pad token (eos if none).

    Use this, not AutoTokenizer, on checkpoints made here (see the comment inside).
    """
    from transformers import AutoTokenizer, PreTrainedTokenizerFast

    path = Path(directory)
    # transformers 5 maps some model types (qwen2 among them) to their own tokenizer class even
    # when tokenizer_config.json names the generic one, and that class swaps in its own
    # pre-tokenizer and adds tokens. A generic saved tokenizer is therefore loaded generically.
    loader = PreTrainedTokenizerFast if _saved_tokenizer_class(path) in _GENERIC else AutoTokenizer
    try:
        tokenizer = loader.from_pretrained(path, local_files_only=True, padding_side="left")
    except (OSError, ValueError) as err:
        raise ValueError(f"cannot load a tokenizer from {path}: {err}") from err
    tokenizer.padding_side = "left"
    if tokenizer.pad_token is None:
        if tokenizer.eos_token is not None:
            tokenizer.pad_token = tokenizer.eos_token
        else:
            tokenizer.add_special_tokens({"pad_token": "<pad>"})
    return tokenizer


def load_pretrained(
    directory: str | os.PathLike, dtype: torch.dtype | str = torch.float32
) -> tuple[PreTrainedModel, PreTrainedTokenizerBase]:
    """(model, tokenizer) from any local HF causal-LM directory; never touches the hub.

    Raises FileNotFoundError / ValueError naming `directory` when it is not such a directory.
    """
    from transformers import AutoModelForCausalLM

    path = Path(directory)
    _check_model_directory(path)
    tokenizer = load_tokenizer(path)
    try:
        model = AutoModelForCausalLM.from_pretrained(path, local_files_only=True, dtype=dtype)
    except (OSError, ValueError, KeyError) as err:
        raise ValueError(f"cannot load a causal LM from {path}: {err}") from err
    if len(tokenizer) > model.get_input_embeddings().num_embeddings:
        model.resize_token_embeddings(len(tokenizer))  # only when a pad token had to be added
    if model.config.pad_token_id is None:
        model.config.pad_token_id = tokenizer.pad_token_id
    if model.generation_config.pad_token_id is None:
        model.generation_config.pad_token_id = tokenizer.pad_token_id
    return model, tokenizer


def build_or_load(
    spec: ModelSpec, tokenizer: PreTrainedTokenizerBase | None, seed: int
) -> tuple[PreTrainedModel, PreTrainedTokenizerBase]:
    """`spec.path` set → (model, tokenizer) loaded from it (a known model name, e.g. smollm2-135m-instruct,
    resolves to its converted directory: rla_core/models/pretrained.py); else a tiny model for `tokenizer`."""
    if spec.path is not None:
        from rla_core.models.pretrained import resolve

        return load_pretrained(resolve(spec.path))
    if tokenizer is None:
        raise ValueError("building a tiny model (model path is None) needs a tokenizer")
    return build_model(spec, tokenizer, seed), tokenizer
