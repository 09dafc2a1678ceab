"""The training flow: prepare the run (seed, models, warm-start, baseline eval), then iterations.

Re-running the same run continues after the last completed iteration (and inside an interrupted one,
after its last completed stage). Raising run.iterations extends a finished run.
"""
from __future__ import annotations

from pathlib import Path

from prefect import flow

from flows.rl_iteration import rl_iteration
from rla_core.config import Config, ConfigError, config_to_yaml, load_config
from tasks.paths import RunPaths
from tasks.setup import bootstrap, init_models, seed_tasks
from tasks.storage import done_summary, write_text
from tasks.tracking_tasks import close_training_run, evaluate_baseline, evaluate_checkpoint, open_training_run


def prepare_run_dir(cfg: Config) -> str:
    """Create runs/<name>/config.yaml, or check that an existing run has the same config.

    Only run.iterations may differ (to extend a run); anything else needs a new run.name.
    """
    paths = RunPaths.of(Path(cfg.run.output_dir) / cfg.run.name)
    if paths.config.is_file():
        old = load_config([paths.config])
        if old.model_copy(update={"run": old.run.model_copy(update={"iterations": 0})}) != \
                cfg.model_copy(update={"run": cfg.run.model_copy(update={"iterations": 0})}):
            raise ConfigError(f"{paths.root} already holds a run with a different config; "
                              "choose another run.name (only run.iterations may change to continue a run)")
    paths.root.mkdir(parents=True, exist_ok=True)
    write_text(paths.config, config_to_yaml(cfg))
    return str(paths.root)


def _seed(cfg: Config) -> str:
    run_dir = prepare_run_dir(cfg)
    open_training_run(run_dir)
    seed_tasks(run_dir)
    init_models(run_dir)
    return run_dir


def _prepare(cfg: Config) -> tuple[str, dict]:
    run_dir = _seed(cfg)
    bootstrap(run_dir)
    return run_dir, evaluate_baseline(run_dir)


@flow(name="rla-seed", log_prints=True)
def seed(config_files: list[str] | None = None, overrides: list[str] | None = None) -> dict:
    """Seed task store + held-out tasks → tokenizer and tiny models."""
    run_dir = _seed(load_config(config_files, overrides))
    return {"run_dir": run_dir, **done_summary(RunPaths.of(run_dir).seed_store.parent)}


@flow(name="rla-prepare", log_prints=True)
def prepare(config_files: list[str] | None = None, overrides: list[str] | None = None) -> dict:
    """Seed (skipped when done) → supervised warm-start → baseline held-out evaluation."""
    run_dir, baseline = _prepare(load_config(config_files, overrides))
    return {"run_dir": run_dir, "baseline": baseline}


@flow(name="rla-train", log_prints=True)
def train(config_files: list[str] | None = None, overrides: list[str] | None = None) -> dict:
    """Prepare (skipped when done) → iterations 1..run.iterations (completed ones skipped)."""
    cfg = load_config(config_files, overrides)
    run_dir, baseline = _prepare(cfg)
    paths = RunPaths.of(run_dir)
    per_iteration = {}
    try:
        for k in range(1, cfg.run.iterations + 1):
            if not paths.is_complete(k):
                per_iteration[k] = rl_iteration(run_dir, k)
    except Exception:
        close_training_run(run_dir, "FAILED")
        raise
    close_training_run(run_dir)
    return {"run_dir": run_dir, "baseline": baseline, "iterations": per_iteration}


@flow(name="rla-evaluate", log_prints=True)
def evaluate_run(config_files: list[str] | None = None, overrides: list[str] | None = None,
                 iteration: int | None = None) -> dict:
    """Held-out evaluation of the models after `iteration` (default: the latest completed)."""
    cfg = load_config(config_files, overrides)
    paths = RunPaths.of(Path(cfg.run.output_dir) / cfg.run.name)
    done = paths.completed_iterations()
    if iteration is None:
        iteration = done[-1] if done else 0
    if iteration and iteration not in done:
        raise ValueError(f"iteration {iteration} is not complete in {paths.root}; completed: {done}")
    return evaluate_checkpoint(str(paths.root), iteration)
