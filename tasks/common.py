"""Shared plumbing for Prefect tasks: stage skipping, timing, model loading, progress bars."""
from __future__ import annotations

import random
import time
from pathlib import Path
from typing import Any, Callable

import torch
from tqdm.auto import tqdm

from rla_core.config import Config
from rla_core.models.factory import load_pretrained
from tasks.object_store import open_store
from tasks.paths import RunPaths, run_config
from tasks.storage import done_summary, is_done, mark_done


def stage_seed(cfg: Config, iteration: int, stage: str) -> int:
    """A seed per (run seed, iteration, stage): re-running a stage reproduces it."""
    return random.Random(f"{cfg.run.seed}/{iteration}/{stage}").randrange(2**31)


def eval_seed(cfg: Config) -> int:
    """One sampling seed for every held-out evaluation of a run (warm-start and each iteration alike),
    so that differences between evaluations are not differences of sampling luck."""
    return stage_seed(cfg, 0, "evaluate")


def resumable(stage: str) -> Callable[[Callable[..., dict]], Callable[..., dict]]:
    """Skip a stage whose _DONE marker exists (returning its summary); else run it, time it and mark it.

    With an object store (storage.backend = s3) the completed outputs this machine lacks are fetched
    first (a stage done elsewhere is downloaded, then skipped), and the stage folder is uploaded after
    its marker is written. The wrapped function gets (paths, cfg, iteration, out_dir) and returns a
    JSON-able summary dict.
    """
    def wrap(fn: Callable[..., dict]) -> Callable[..., dict]:
        def run(run_dir: str, iteration: int) -> dict:
            paths, cfg = RunPaths.of(run_dir), run_config(run_dir)
            out_dir = paths.stage(iteration, stage)
            store = open_store(cfg, paths.root)
            store.hydrate(iteration)
            if is_done(out_dir):
                return {**done_summary(out_dir), "resumed": True}
            if cfg.run.torch_threads:
                torch.set_num_threads(cfg.run.torch_threads)
            out_dir.mkdir(parents=True, exist_ok=True)
            start = time.perf_counter()
            summary = fn(paths, cfg, iteration, out_dir)
            summary["seconds"] = time.perf_counter() - start
            mark_done(out_dir, summary)
            store.push_dir(out_dir, run_files_under=paths.iteration(iteration))  # COMPLETE, *.dvc too
            return summary

        # Not functools.wraps: Prefect binds arguments by the signature, which must stay (run_dir, iteration).
        run.__name__, run.__qualname__, run.__doc__ = fn.__name__, fn.__qualname__, fn.__doc__
        return run

    return wrap


def load_model(path: Path) -> tuple[Any, Any]:
    model, tokenizer = load_pretrained(path)
    model.eval()
    return model, tokenizer


def progress_bar(total: int, desc: str, unit: str = "episode") -> tqdm:
    return tqdm(total=total, desc=desc, unit=unit, leave=False, dynamic_ncols=True, mininterval=1.0)
