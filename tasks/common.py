"""Shared plumbing for stage bodies: seeds, model loading, progress bars (stages are declared in tasks/stage.py)."""
from __future__ import annotations

import random
from pathlib import Path
from typing import Any

from tqdm.auto import tqdm

from rla_core.config import Config
from rla_core.models.factory import load_pretrained


def stage_seed(cfg: Config, iteration: int, stage: str) -> int:
    """A seed per (run seed, iteration, stage): re-running a stage reproduces it."""
    return random.Random(f"{cfg.run.seed}/{iteration}/{stage}").randrange(2**31)


def eval_seed(cfg: Config) -> int:
    """One sampling seed for every held-out evaluation of a run (warm-start and each iteration alike),
    so that differences between evaluations are not differences of sampling luck."""
    return stage_seed(cfg, 0, "evaluate")


def bind_environment(cfg: Config, run_root: str | Path) -> None:
    """Point the configured environment family at the run's own files: TextWorld builds and finds its
    games under `<run>/games/` (a no-op for families without files)."""
    from rla_core.envs.base import get_environment
    from tasks.paths import RunPaths

    family = get_environment(cfg.environment.name)
    configure = getattr(family, "configure", None)
    if configure is not None:
        tw = cfg.textworld
        configure(games=RunPaths.of(run_root).games, workers=tw.workers, observation_chars=tw.observation_chars,
                  goal_chars=tw.goal_chars)


def load_model(path: Path) -> tuple[Any, Any]:
    model, tokenizer = load_pretrained(path)
    model.eval()
    return model, tokenizer


def progress_bar(total: int, desc: str, unit: str = "episode") -> tqdm:
    return tqdm(total=total, desc=desc, unit=unit, leave=False, dynamic_ncols=True, mininterval=1.0)
