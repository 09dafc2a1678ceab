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


def bind_environment(cfg: Config, run_root: str | Path, use_archive: bool = True) -> None:
    """Point the configured environment family at the run's own files: TextWorld builds and finds its
    games under `<run>/games/`, after unpacking `textworld.games_archive` there (not when `use_archive` is
    False: `rla data build`, which writes it). A no-op for families without files."""
    from rla_core.envs.base import get_environment
    from tasks.paths import RunPaths

    family = get_environment(cfg.environment.name)
    configure = getattr(family, "configure", None)
    if configure is not None:
        from rla_core.config import resolve_data_path
        from rla_core.errors import MissingFile

        tw = cfg.textworld
        archive = resolve_data_path(tw.games_archive) if (tw.games_archive and use_archive) else None
        if archive is not None and not archive.is_file():
            raise MissingFile(f"textworld.games_archive: not found: {tw.games_archive} (looked at {archive}); "
                              "`rla data build --config configs/textworld.yaml` writes it")
        configure(games=RunPaths.of(run_root).games, workers=tw.workers, observation_chars=tw.observation_chars,
                  goal_chars=tw.goal_chars, archive=archive)


def load_model(path: Path, device: str = "cpu") -> tuple[Any, Any]:
    """A saved model (eval mode) on `device` (`models.device` resolved: Config.models.torch_device()), and
    its tokenizer."""
    model, tokenizer = load_pretrained(path)
    model.eval()
    return (model if device == "cpu" else model.to(device)), tokenizer


def progress_bar(total: int, desc: str, unit: str = "episode") -> tqdm:
    return tqdm(total=total, desc=desc, unit=unit, leave=False, dynamic_ncols=True, mininterval=1.0)
