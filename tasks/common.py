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


def load_model(path: Path) -> tuple[Any, Any]:
    model, tokenizer = load_pretrained(path)
    model.eval()
    return model, tokenizer


def progress_bar(total: int, desc: str, unit: str = "episode") -> tqdm:
    return tqdm(total=total, desc=desc, unit=unit, leave=False, dynamic_ncols=True, mininterval=1.0)
