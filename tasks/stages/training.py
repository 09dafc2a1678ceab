"""The stages that update the models: train_policy, then train_judge."""
from __future__ import annotations

import os
import random
from pathlib import Path

import torch

from rla_core.compute import cap_samples, compute_metrics
from rla_core.training import trainable
from rla_core.config import Config, TrainConfig
from rla_core.models.precision import autocast
from rla_core.schemas import TrainingSample, Trajectory
from rla_core.training.base import get_trainer
from tasks.common import load_model, stage_seed
from tasks.stages.engines import sleep_engines
from tasks.paths import RunPaths, run_config
from tasks.stage import stage
from tasks.storage.files import read_records, write_records
from tasks.summaries import TrainSummary


def load_batch(paths: RunPaths, k: int, role: str) -> list[TrainingSample]:
    """The training samples the data stage built for `role` in iteration k."""
    return read_records(paths.it(k).batch(role), TrainingSample)


def write_batches(paths: RunPaths, cfg: Config, k: int, policy: list[TrainingSample], judge_data: list[TrainingSample],
                  data_metrics: dict[str, float], trajectories: list[Trajectory], judge_outputs: list[list[int]]) -> dict:
    """The data stage's output, in every setting: both batches under train.max_samples (one seeded subset
    per model), the data/* metrics, and the iteration's compute/* metrics counted on what trains."""
    cap = cfg.train.max_samples
    policy = cap_samples(policy, cap, random.Random(stage_seed(cfg, k, "cap/policy")))
    judge_data = cap_samples(judge_data, cap, random.Random(stage_seed(cfg, k, "cap/judge")))
    write_records(paths.it(k).batch("policy"), policy)
    write_records(paths.it(k).batch("judge"), judge_data)
    compute = compute_metrics(trajectories, judge_outputs, policy, judge_data)
    # every setting's data stage reports its sample counts (a setting's own count, when it has one, wins)
    data_metrics = {"policy/samples": float(len(policy)), "judge/samples": float(len(judge_data)), **data_metrics}
    return {"metrics": {**data_metrics, **compute}}  # the stage adds `data/`


def train_role(paths: RunPaths, cfg: Config, k: int, out: Path, role: str, lr: float, enabled: bool) -> dict:
    """One model's update on its batch; the optimizer state comes from the previous update of that model.

    With train.backend = deepspeed and a torchrun/deepspeed launcher, every rank runs `train_rank`
    (same samples and seed on each; the backend splits each mini-batch over the ranks).
    """
    start_dir = paths.model_dir(k, role)
    samples = load_batch(paths, k, role)
    if not enabled or not samples:
        why = "disabled" if not enabled else "no samples"
        return {"model_dir": paths.rel(start_dir), "trained": False, "why": why, "metrics": {}}
    sleep_engines()  # live rollout engines hand their accelerator memory to the trainer
    ds = cfg.train.deepspeed
    if cfg.train.backend == "deepspeed" and ds.launcher != "inprocess":
        from rla_core.training.ds_launch import launch

        payload = {"run_dir": str(paths.root), "k": k, "out": str(out), "role": role, "lr": lr,
                   "train": cfg.train.model_dump(mode="json")}
        metrics = launch("tasks.stages.training:train_rank", payload, ds, out / "launch")[0]
    else:
        metrics = _train_here(paths, cfg, k, out, role, lr, samples)
    return {"model_dir": paths.rel(out / "model"), "trained": True,
            "metrics": metrics}  # the stage adds `train_<role>/`


def _train_here(paths: RunPaths, cfg: Config, k: int, out: Path, role: str, lr: float,
                samples: list) -> dict[str, float]:
    start_dir = paths.model_dir(k, role)
    model, tokenizer = load_model(start_dir, cfg.models.torch_device())
    counts = trainable.apply(model, cfg.train.trainable, seed=stage_seed(cfg, k, f"lora_{role}"),
                             stop_gradient=cfg.train.stop_gradient)
    state = start_dir / "optimizer.pt"
    fresh = trainable.lora_rank(cfg.train.trainable) is not None  # new adapters: no moments to carry over
    trainer = get_trainer(cfg.train.backend)(model, cfg.train, lr, state if state.is_file() and not fresh else None)
    reference = None
    if cfg.train.reference == "initial":
        reference, _ = load_model(paths.bootstrap / role, cfg.models.torch_device())
    # models.dtype: bfloat16 arithmetic where configured, the weights and optimizer stay float32
    with autocast(cfg.models.compute_dtype(role), cfg.models.torch_device()):
        metrics = trainer.train(samples, reference, stage_seed(cfg, k, f"train_{role}"))
    trainable.merge(model)  # lora:R: the adapters folded in, a plain HF checkpoint
    trainer.save(out / "model", tokenizer=tokenizer)
    if cfg.train.trainable != "all":
        metrics = {**metrics, **counts}
    return metrics


def train_rank(payload: dict) -> dict[str, float]:
    """Launch target of one rank (rla_core.training.ds_launch): the same update as in-process."""
    ranks_here = int(os.environ.get("LOCAL_WORLD_SIZE", "1"))
    torch.set_num_threads(max(1, (os.cpu_count() or 1) // ranks_here))  # ranks must not oversubscribe cores
    paths = RunPaths.of(payload["run_dir"])
    cfg = run_config(payload["run_dir"])
    torch.use_deterministic_algorithms(cfg.run.deterministic, warn_only=True)
    cfg = cfg.model_copy(update={"train": TrainConfig.model_validate(payload["train"])})
    k, role = payload["k"], payload["role"]
    return _train_here(paths, cfg, k, Path(payload["out"]), role, payload["lr"], load_batch(paths, k, role))


@stage(carried=True, summary=TrainSummary)
def train_policy(paths: RunPaths, cfg: Config, k: int, out: Path) -> dict:
    return train_role(paths, cfg, k, out, "policy", cfg.train.lr, enabled=True)


@stage(carried=True, summary=TrainSummary)
def train_judge(paths: RunPaths, cfg: Config, k: int, out: Path) -> dict:
    return train_role(paths, cfg, k, out, "judge", cfg.train.judge_lr, enabled=cfg.judge.train)
