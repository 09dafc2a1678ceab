"""Launch target for the multi-rank test (not collected by pytest): one DeepSpeed trainer per rank.

payload: model_dir, train_cfg (TrainConfig dump), lr, samples (TrainingSample dumps), seed.
Returns this rank's per-step global losses and grad norms (every rank reports the same numbers).
"""
from __future__ import annotations

from typing import Any

import torch

from rla_core.config import TrainConfig
from rla_core.models.factory import load_pretrained
from rla_core.schemas import TrainingSample
from rla_core.training import get_trainer


def step_metrics(trainer, samples, seed: int) -> list[dict[str, float]]:
    """TorchTrainer.train's order, one metrics dict per optimizer step."""
    trainer.model.eval()
    batches = trainer.minibatches(samples, seed)
    scored = iter(trainer.score([s for batch in batches for s in batch]))
    return [trainer.optimizer_step([next(scored) for _ in batch]) for batch in batches]


def train_steps(payload: dict[str, Any]) -> dict[str, Any]:
    torch.set_num_threads(1)
    model, _ = load_pretrained(payload["model_dir"])
    cfg = TrainConfig.model_validate(payload["train_cfg"])
    trainer = get_trainer("deepspeed")(model, cfg, payload["lr"])
    samples = [TrainingSample.model_validate(item) for item in payload["samples"]]
    steps = step_metrics(trainer, samples, payload["seed"])
    return {
        "rank": trainer.rank, "world_size": trainer.world_size,
        "share_sizes": [len(batch) for batch in trainer.minibatches(samples, payload["seed"])],
        "loss": [step["loss"] for step in steps], "grad_norm": [step["grad_norm"] for step in steps],
    }
