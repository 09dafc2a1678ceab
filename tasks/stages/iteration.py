"""The stages of an RL iteration up to the training data (docs/design.md, "The loop"): select, rollout,
judge, adapt, data.

Each stage reads its inputs from the run folder (tasks.paths.IterationPaths), calls the run's setting
(tasks/settings/), writes its outputs atomically and returns a small JSON summary; tasks/stage.py skips
it when already done.
"""
from __future__ import annotations

import random
from pathlib import Path

from rla_core.adaptation.cycle import AdaptReport
from rla_core.adaptation.store import TaskStore
from rla_core.config import Config
from rla_core.schemas import JudgedStep, Task, TrainingSample, Trajectory
from tasks.common import stage_seed
from tasks.paths import RunPaths
from tasks.stages.rewriting import make_rewrite
from tasks.settings import setting_for
from tasks.stage import stage
from tasks.storage.files import write_records
from tasks.summaries import AdaptSummary, SelectSummary


@stage(records=(("tasks.jsonl", Task, True),), summary=SelectSummary)
def select(paths: RunPaths, cfg: Config, k: int, out: Path) -> dict:
    """K tasks to roll out: last iteration's pending candidates and active slots (rollout.candidates: within K
    or, in runs from before the key, on top of it)."""
    store = TaskStore.load(paths.store_dir(k))
    tasks = store.select(cfg.rollout.tasks_per_iteration, random.Random(stage_seed(cfg, k, "select")), iteration=k,
                         within_k=cfg.rollout.candidates == "within_k")
    write_records(paths.it(k).tasks, tasks)
    pending = {c.task.task_id for c in store.pending()}
    return {"tasks": len(tasks), "candidates": sum(t.task_id in pending for t in tasks)}


@stage(records=(("trajectories.jsonl", Trajectory, True),))
def rollout(paths: RunPaths, cfg: Config, k: int, out: Path) -> dict:
    """N episodes of every selected task at the policy's temperature (coding: N programs, run on the GT tests)."""
    return setting_for(cfg).rollout(paths, cfg, k)


@stage(records=(("judged.jsonl", JudgedStep, False),))
def judge(paths: RunPaths, cfg: Config, k: int, out: Path) -> dict:
    """m judge samples for every step of every trajectory; p₊/p₋ against the oracle labels (coding: U unit
    tests per problem from the statement alone, run on every program)."""
    return setting_for(cfg).judge(paths, cfg, k)


@stage(carried=True, summary=AdaptSummary)
def adapt(paths: RunPaths, cfg: Config, k: int, out: Path) -> dict:
    """Validate last iteration's candidates, then propose rewrites for tasks outside the band."""
    return setting_for(cfg).adapt(paths, cfg, k, make_rewrite(cfg, paths) if cfg.environment.adapt else None)


@stage(records=(("policy.jsonl", TrainingSample, False), ("judge.jsonl", TrainingSample, False)))
def data(paths: RunPaths, cfg: Config, k: int, out: Path) -> dict:
    """Policy samples (mixed-outcome tasks) and judge samples (in-band tasks); rejected candidates excluded."""
    return setting_for(cfg).data(paths, cfg, k, read_adapt_report(paths, k))


def read_adapt_report(paths: RunPaths, k: int) -> AdaptReport:
    return AdaptReport.model_validate_json(paths.it(k).adapt_report.read_text())
