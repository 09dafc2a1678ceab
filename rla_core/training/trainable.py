"""Which weights an update trains (`train.trainable`): every weight, or the last N decoder blocks with the
final norm and the output head (with tied embeddings, the head is the embedding matrix, so it trains
too). On a CPU, full fine-tuning of a 135M-parameter model is the slow path: freezing the lower blocks
removes their weight gradients and optimizer state, and backpropagation stops at the lowest trained
block."""
from __future__ import annotations

import re

import torch

PATTERN = r"^(all|last_layers:[1-9][0-9]*)$"


def parse(spec: str) -> int | None:
    """None for "all", else N of "last_layers:N"."""
    match = re.fullmatch(r"last_layers:([1-9][0-9]*)", spec)
    if spec == "all":
        return None
    if not match:
        raise ValueError(f"train.trainable: {spec!r}; valid: all, last_layers:N (N >= 1)")
    return int(match.group(1))


def decoder_layers(model: torch.nn.Module) -> torch.nn.ModuleList:
    """The decoder blocks of an HF causal LM (Llama, Qwen2, ...: model.model.layers)."""
    layers = getattr(getattr(model, "model", None), "layers", None)
    if not isinstance(layers, torch.nn.ModuleList):
        raise ValueError(f"{type(model).__name__}: no model.layers; train.trainable=last_layers:N needs a "
                         "decoder-only HF model")
    return layers


def apply(model: torch.nn.Module, spec: str) -> dict[str, float]:
    """Set requires_grad for `spec`; returns {"trainable_params", "total_params"}. "all" changes nothing."""
    last = parse(spec)
    if last is not None:
        for param in model.parameters():
            param.requires_grad_(False)
        layers = decoder_layers(model)
        trained = list(layers[max(0, len(layers) - last):])
        norm = getattr(model.model, "norm", None)
        trained += [norm] if norm is not None else []
        trained += [model.get_output_embeddings()]
        for module in trained:
            for param in module.parameters():
                param.requires_grad_(True)
    return {"trainable_params": float(sum(p.numel() for p in model.parameters() if p.requires_grad)),
            "total_params": float(sum(p.numel() for p in model.parameters()))}
