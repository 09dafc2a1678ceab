"""The trainer interface (policy and judge alike) and the registry of backends by name.

A backend is constructed as `Trainer(model, train_cfg, lr, optimizer_state_path)` and then
`train(samples, reference_model, rng_seed)` runs the update of docs/design.md, "The formulas", Loss and
Mini-batches, on those samples.
Built-in backends register themselves when their module is imported; `get_trainer` imports them
on first use, so importing this module stays light.
"""
from __future__ import annotations

import os
from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

import torch

from rla_core.config import TrainConfig
from rla_core.registry import Registry
from rla_core.schemas import TrainingSample

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase

# Loss metrics of every backend, mini-batch means: "loss" (the per-sample loss), then the parts that
# `clipped_policy_loss` returns; `train` reports their means over the optimizer steps.
LOSS_METRICS = ("loss", "pg_loss", "kl", "clip_fraction", "ratio_mean")



class Trainer(ABC):
    """One model's optimiser across iterations: train on samples, save weights + optimiser state."""

    def __init__(
        self,
        model: torch.nn.Module,
        train_cfg: TrainConfig,
        lr: float,
        optimizer_state_path: str | os.PathLike | None = None,
    ) -> None:
        self.model = model
        self.train_cfg = train_cfg
        self.lr = lr

    @abstractmethod
    def train(
        self,
        samples: Sequence[TrainingSample],
        reference_model: torch.nn.Module | None = None,
        rng_seed: int = 0,
    ) -> dict[str, float]:
        """Update the model on `samples`; metrics: loss, pg_loss, kl, clip_fraction, grad_norm,
        samples, dropped_too_long, optimizer_steps."""

    @abstractmethod
    def save(
        self, directory: str | os.PathLike, tokenizer: PreTrainedTokenizerBase | None = None
    ) -> None:
        """Write the model (HF format), optimizer.pt and, if given, the tokenizer, atomically."""

    @abstractmethod
    def load_optimizer(self, path: str | os.PathLike) -> None:
        """Restore the optimiser state written by `save` (its optimizer.pt)."""


# Built-in backends are imported on first use, so that DeepSpeed loads only when chosen.
TRAINERS: Registry[type[Trainer]] = Registry(
    "trainer backend", "train.backend",
    {"torch": "rla_core.training.torch_backend", "deepspeed": "rla_core.training.deepspeed_backend"})


def register_trainer(name: str) -> Callable[[type[Trainer]], type[Trainer]]:
    """Class decorator: make a Trainer subclass available as `get_trainer(name)`."""
    return TRAINERS.register(name)


def get_trainer(name: str) -> type[Trainer]:
    """The Trainer class registered as `name`; the error lists every valid name."""
    return TRAINERS.get(name)
