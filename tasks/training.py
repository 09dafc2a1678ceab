"""Prefect tasks that update models (policy, then judge) and evaluate on held-out tasks."""
from __future__ import annotations

from pathlib import Path

from prefect import task
from prefect.cache_policies import NO_CACHE

from rla_core.config import Config
from rla_core.rollout.runner import rollout_metrics
from rla_core.schemas import Task
from rla_core.training.base import get_trainer
from tasks.common import load_model, resumable, stage_seed
from tasks.iteration import judge_all, load_batch, rollout_tasks
from tasks.paths import RunPaths
from tasks.storage import read_records, write_json, write_records

STAGE = dict(cache_policy=NO_CACHE, persist_result=False)


def train_role(paths: RunPaths, cfg: Config, k: int, out: Path, role: str, lr: float, enabled: bool) -> dict:
    """One model's update on its batch; the optimizer state comes from the previous update of that model."""
    start_dir = paths.model_dir(k, role)
    samples = load_batch(paths, k, role)
    if not enabled or not samples:
        why = "disabled" if not enabled else "no samples"
        return {"model_dir": paths.rel(start_dir), "trained": False, "why": why, "metrics": {}}
    model, tokenizer = load_model(start_dir)
    state = start_dir / "optimizer.pt"
    trainer = get_trainer(cfg.train.backend)(model, cfg.train, lr, state if state.is_file() else None)
    reference = None
    if cfg.train.reference == "initial":
        reference, _ = load_model(paths.bootstrap / role)
    metrics = trainer.train(samples, reference, stage_seed(cfg, k, f"train_{role}"))
    trainer.save(out / "model", tokenizer=tokenizer)
    return {"model_dir": paths.rel(out / "model"), "trained": True,
            "metrics": {f"{role}/{name}": value for name, value in metrics.items()}}


@task(name="train-policy", **STAGE)
@resumable("train_policy")
def train_policy(paths: RunPaths, cfg: Config, k: int, out: Path) -> dict:
    return train_role(paths, cfg, k, out, "policy", cfg.train.lr, enabled=True)


@task(name="train-judge", **STAGE)
@resumable("train_judge")
def train_judge(paths: RunPaths, cfg: Config, k: int, out: Path) -> dict:
    return train_role(paths, cfg, k, out, "judge", cfg.train.judge_lr, enabled=cfg.judge.train)


def evaluate_models(paths: RunPaths, cfg: Config, policy_dir: Path, judge_dir: Path, out: Path,
                    seed: int) -> dict[str, float]:
    """Held-out success rate of a policy (greedy by default) and p₊/p₋ of a judge on those episodes."""
    tasks = read_records(paths.heldout, Task)
    trajectories, _ = rollout_tasks(paths, cfg, tasks, policy_dir, cfg.eval.episodes_per_task,
                                    cfg.eval.temperature, seed, "held-out eval")
    judged, judge_metrics = judge_all(cfg, trajectories, judge_dir, seed, "held-out judge", cfg.eval.judge_m)
    write_records(out / "heldout_trajectories.jsonl", trajectories)
    metrics = {f"heldout/{n}": v for n, v in rollout_metrics(trajectories).items()}
    metrics.update({f"heldout/judge_{n}": v for n, v in judge_metrics.items()})
    metrics["heldout/episodes"] = float(len(trajectories))
    write_json(out / "metrics.json", metrics)
    return metrics


@task(name="evaluate", **STAGE)
@resumable("evaluate")
def evaluate(paths: RunPaths, cfg: Config, k: int, out: Path) -> dict:
    """Evaluate every `eval_every` iterations and at the last one; otherwise record a skip."""
    every, last = cfg.run.eval_every, cfg.run.iterations
    if not (k == last or (every and k % every == 0)):
        return {"evaluated": False, "metrics": {}}
    metrics = evaluate_models(paths, cfg, paths.model_dir(k + 1, "policy"), paths.model_dir(k + 1, "judge"), out,
                              stage_seed(cfg, k, "evaluate"))
    return {"evaluated": True, "metrics": metrics}
