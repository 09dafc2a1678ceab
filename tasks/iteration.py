"""The stages of an RL iteration up to the training data (docs/design.md, "The loop"): select, rollout,
judge, adapt, data.

Each stage reads its inputs from the run folder (tasks.paths.IterationPaths), calls rla_core, writes its
outputs atomically and returns a small JSON summary; tasks/stage.py skips it when already done.
"""
from __future__ import annotations

import random
from pathlib import Path

from rla_core.adaptation.cycle import AdaptReport, trainable
from rla_core.adaptation.cycle import adapt as adapt_store
from rla_core.adaptation.store import TaskStore
from rla_core.compute import judge_responses
from rla_core.config import Config
from rla_core.rewards import judge_samples, policy_samples
from rla_core.schemas import JudgedStep, Task, Trajectory
from tasks import coding
from tasks.common import stage_seed
from tasks.engines import judge_all, rollout_tasks
from tasks.paths import RunPaths
from tasks.rewriting import make_rewrite
from tasks.stage import stage
from tasks.training import write_batches
from tasks.storage import read_records, write_json, write_records, write_text


@stage()
def select(paths: RunPaths, cfg: Config, k: int, out: Path) -> dict:
    """K active slots plus every pending candidate created in the previous iteration."""
    store = TaskStore.load(paths.store_dir(k))
    tasks = store.select(cfg.rollout.tasks_per_iteration, random.Random(stage_seed(cfg, k, "select")), iteration=k,
                         within_k=cfg.rollout.candidates == "within_k")
    write_records(paths.it(k).tasks, tasks)
    pending = {c.task.task_id for c in store.pending()}
    return {"tasks": len(tasks), "candidates": sum(t.task_id in pending for t in tasks)}


@stage()
def rollout(paths: RunPaths, cfg: Config, k: int, out: Path) -> dict:
    """N episodes of every selected task at the policy's temperature (coding: N programs, run on the GT tests)."""
    if coding.is_coding(cfg):
        return coding.rollout(paths, cfg, k)
    tasks = read_records(paths.it(k).tasks, Task)
    trajectories, metrics = rollout_tasks(paths, cfg, tasks, paths.model_dir(k, "policy"), cfg.rollout.n,
                                          cfg.rollout.temperature, stage_seed(cfg, k, "rollout"), f"rollout {k}")
    write_records(paths.it(k).trajectories, trajectories)
    return {"metrics": {f"train/{name}": value for name, value in metrics.items()}}


@stage()
def judge(paths: RunPaths, cfg: Config, k: int, out: Path) -> dict:
    """m judge samples for every step of every trajectory; p₊/p₋ against the oracle labels (coding: U unit
    tests per problem from the statement alone, run on every program)."""
    if coding.is_coding(cfg):
        return coding.judge(paths, cfg, k)
    trajectories = read_records(paths.it(k).trajectories, Trajectory)
    judged, metrics = judge_all(paths, cfg, trajectories, paths.model_dir(k, "judge"), stage_seed(cfg, k, "judge"),
                                f"judge {k}")
    write_records(paths.it(k).judged, judged)
    return {"metrics": {f"judge/train_{name}": value for name, value in metrics.items()}}


@stage()
def adapt(paths: RunPaths, cfg: Config, k: int, out: Path) -> dict:
    """Validate last iteration's candidates, then propose rewrites for tasks outside the band."""
    if coding.is_coding(cfg):
        return coding.adapt(paths, cfg, k, make_rewrite(cfg, paths) if cfg.environment.adapt else None)
    store = TaskStore.load(paths.store_dir(k))
    trajectories = read_records(paths.it(k).trajectories, Trajectory)
    judged = read_records(paths.it(k).judged, JudgedStep)
    env = cfg.environment
    rewrite = make_rewrite(cfg, paths) if env.adapt else None
    new_store, report, metrics = adapt_store(store, trajectories, judged, k, env.alpha_low, env.alpha_high, rewrite,
                                       env.rewriter, random.Random(stage_seed(cfg, k, "adapt")))
    new_store.save(paths.it(k).store)
    write_text(paths.it(k).adapt_report, report.model_dump_json(indent=2) + "\n")
    write_json(paths.it(k).store_diff, store.diff(new_store))
    counts = {f"env/{name}": float(value) for name, value in new_store.counts().items()}
    return {"metrics": {**metrics, **counts}, "rejected": report.rejected}


@stage()
def data(paths: RunPaths, cfg: Config, k: int, out: Path) -> dict:
    """Policy samples (mixed-outcome tasks) and judge samples (in-band tasks); rejected candidates excluded."""
    if coding.is_coding(cfg):
        return coding.data(paths, cfg, k, set(read_adapt_report(paths, k).rejected))
    rolled_out, all_judged = read_records(paths.it(k).trajectories, Trajectory), read_records(paths.it(k).judged, JudgedStep)
    trajectories, judged = trainable(read_adapt_report(paths, k), rolled_out, all_judged)
    policy, policy_metrics = policy_samples(trajectories, judged, cfg.reward.step_weight)
    judge_data, judge_metrics = judge_samples(trajectories, judged, cfg.reward.step_weight,
                                              cfg.environment.alpha_low, cfg.environment.alpha_high,
                                              cfg.judge.outcome_balance)
    return write_batches(paths, cfg, k, policy, judge_data, {**policy_metrics, **judge_metrics}, rolled_out,
                         judge_responses(all_judged))


def read_adapt_report(paths: RunPaths, k: int) -> AdaptReport:
    return AdaptReport.model_validate_json(paths.it(k).adapt_report.read_text())
