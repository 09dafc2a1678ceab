"""Which weights an update trains (`train.trainable`): every weight; the last N decoder blocks with the
final norm and the output head (with tied embeddings, the head is the embedding matrix, so it trains
too); or low-rank adapters of rank R on every linear layer of every decoder block (LoRA: W x + s·B A x
with A [R, in], B [out, R] zero at the start, s = 2, W frozen).

On a CPU, full fine-tuning of a 135M-parameter model is the slow path: freezing the lower blocks removes
their weight gradients and optimizer state. When the head is tied to the input embedding (SmolLM2), the
exact gradient of that weight also has an input side: the embedding's output requires grad, and the
backward pass runs through every frozen block to add the input tokens' rows (measured on SmolLM2, 16 × 200
tokens, last 6 of 30 blocks: backward 12-20 s, and a tied-weight gradient 2.7× larger than its head side).
`stop_gradient` detaches the embedding's output, so no graph is recorded below the lowest trained block
(backward 2.9-3.6 s) and the tied weight gets its head side only; it is off by default because the exact
gradient gave the better warm start on the dev split (docs/design.md). LoRA
keeps the gradient flowing through every block but trains and stores a few hundred thousand numbers.
Adapters are merged into W before a model is saved (`merge`), so every checkpoint is a plain HF model
that any stage loads as before; each update starts fresh adapters on the merged weights (their optimizer
state is not carried over)."""
from __future__ import annotations

import math
import re

import torch

PATTERN = r"^(all|last_layers:[1-9][0-9]*|lora:[1-9][0-9]*)$"
LORA_SCALE = 2.0  # alpha / R with alpha = 2R


def parse(spec: str) -> int | None:
    """None for "all", else N of "last_layers:N" (see `lora_rank` for "lora:R")."""
    match = re.fullmatch(r"last_layers:([1-9][0-9]*)", spec)
    if spec == "all" or lora_rank(spec) is not None:
        return None
    if not match:
        raise ValueError(f"train.trainable: {spec!r}; valid: all, last_layers:N, lora:R (N, R >= 1)")
    return int(match.group(1))


def lora_rank(spec: str) -> int | None:
    match = re.fullmatch(r"lora:([1-9][0-9]*)", spec)
    return int(match.group(1)) if match else None


class LoRALinear(torch.nn.Module):
    """A frozen linear layer plus a trainable low-rank update (see the module doc)."""

    def __init__(self, base: torch.nn.Linear, rank: int, generator: torch.Generator) -> None:
        super().__init__()
        self.base = base
        self.lora_a = torch.nn.Parameter(torch.empty(rank, base.in_features, dtype=torch.float32))
        self.lora_b = torch.nn.Parameter(torch.zeros(base.out_features, rank, dtype=torch.float32))
        bound = 1.0 / math.sqrt(base.in_features)  # kaiming-uniform(a=sqrt(5)) of a [rank, in] weight
        with torch.no_grad():
            self.lora_a.uniform_(-bound, bound, generator=generator)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        update = torch.nn.functional.linear(torch.nn.functional.linear(x, self.lora_a), self.lora_b)
        return self.base(x) + LORA_SCALE * update

    def merged(self) -> torch.nn.Linear:
        with torch.no_grad():
            delta = LORA_SCALE * (self.lora_b.float() @ self.lora_a.float())
            self.base.weight += delta.to(self.base.weight.dtype)
        return self.base


def _add_lora(model: torch.nn.Module, rank: int, seed: int) -> None:
    generator = torch.Generator().manual_seed(seed)
    for block in decoder_layers(model):
        for name, module in list(block.named_modules()):
            if isinstance(module, torch.nn.Linear):
                parent = block.get_submodule(name.rsplit(".", 1)[0]) if "." in name else block
                setattr(parent, name.rsplit(".", 1)[-1], LoRALinear(module, rank, generator))


def merge(model: torch.nn.Module) -> torch.nn.Module:
    """Fold every adapter into its layer (no-op without adapters): the model is a plain HF model again."""
    for name, module in list(model.named_modules()):
        if isinstance(module, LoRALinear):
            parent_name, _, attr = name.rpartition(".")
            setattr(model.get_submodule(parent_name) if parent_name else model, attr, module.merged())
    return model


def decoder_layers(model: torch.nn.Module) -> torch.nn.ModuleList:
    """The decoder blocks of an HF causal LM (Llama, Qwen2, ...: model.model.layers)."""
    layers = getattr(getattr(model, "model", None), "layers", None)
    if not isinstance(layers, torch.nn.ModuleList):
        raise ValueError(f"{type(model).__name__}: no model.layers; train.trainable=last_layers:N needs a "
                         "decoder-only HF model")
    return layers


def _detached(module: torch.nn.Module, args: tuple, output: torch.Tensor) -> torch.Tensor:
    return output.detach()


def stop_gradient_below(model: torch.nn.Module) -> None:
    """Detach the input embeddings' output in every forward (once per model, however often called): below
    the lowest trained block nothing trains, so no graph is recorded there and no gradient flows there."""
    embeddings = model.get_input_embeddings()
    if getattr(embeddings, "_rla_stop_gradient", None) is None:
        embeddings._rla_stop_gradient = embeddings.register_forward_hook(_detached)


def apply(model: torch.nn.Module, spec: str, seed: int = 0, stop_gradient: bool = False) -> dict[str, float]:
    """Set requires_grad for `spec` (lora:R: add the adapters, A drawn from `seed`); returns
    {"trainable_params", "total_params"}. "all" changes nothing. For last_layers:N below the model's depth,
    `stop_gradient` detaches the input of the lowest trained block (module doc; False: the exact gradient,
    the default)."""
    last, rank = parse(spec), lora_rank(spec)
    if rank is not None:
        for param in model.parameters():
            param.requires_grad_(False)
        _add_lora(model, rank, seed)
    elif last is not None:
        for param in model.parameters():
            param.requires_grad_(False)
        layers = decoder_layers(model)
        trained = list(layers[max(0, len(layers) - last):])
        if stop_gradient and last < len(layers):
            stop_gradient_below(model)
        norm = getattr(model.model, "norm", None)
        trained += [norm] if norm is not None else []
        trained += [model.get_output_embeddings()]
        for module in trained:
            for param in module.parameters():
                param.requires_grad_(True)
    return {"trainable_params": float(sum(p.numel() for p in model.parameters() if p.requires_grad)),
            "total_params": float(sum(p.numel() for p in model.parameters()))}
