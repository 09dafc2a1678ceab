"""The training flow: prepare the run (seed, models, warm-start, baseline eval, the warm-start registered as
iteration 0), then iterations.

Re-running the same run continues after the last completed iteration (and inside an interrupted one,
after its last completed stage). Raising run.iterations extends a finished run.
"""
from __future__ import annotations

from pathlib import Path

from prefect import flow

from flows.rl_iteration import rl_iteration
from rla_core.config import Config, ConfigError, config_to_yaml, load_config, load_run_config, run_mismatch
from rla_core.errors import BadValue
from tasks.stages.commit import register_start
from tasks.storage.object_store import open_store
from tasks.paths import CONFIG_FILE, RunPaths
from tasks.storage.reproduce import version_start
from tasks.storage.runlock import hold
from tasks.stages.setup import bootstrap, init_models, seed
from tasks.storage.files import write_text
from tasks.tracking.tracker import TrackingUnavailable
from tasks.tracking.run_log import close_training_run, log_baseline, log_evaluation, log_overview, open_training_run
from tasks.stages.evaluation import baseline, evaluate_checkpoint


def _mark_failed(run_dir: str) -> None:
    """The training's MLflow run FAILED, unless MLflow itself is what failed (the error says so)."""
    try:
        close_training_run(run_dir, "FAILED")
    except TrackingUnavailable:
        pass


def run_folder(cfg: Config) -> Path:
    return Path(cfg.run.output_dir) / cfg.run.name


def prepare_run_dir(cfg: Config) -> str:
    """Create runs/<name>/config.yaml, or check that an existing run has the same config.

    Only run.iterations (to extend a run) and orchestration (where stages run, not what they compute)
    may differ; anything else needs a new run.name.
    """
    paths = RunPaths.of(Path(cfg.run.output_dir) / cfg.run.name)
    store = open_store(cfg, paths.root)
    store.check()  # a missing bucket or bad credentials fail here, before any work
    if store.pull_file(CONFIG_FILE) and (refusal := run_mismatch(str(paths.root), load_run_config(paths.config), cfg)):
        raise ConfigError(refusal)
    paths.root.mkdir(parents=True, exist_ok=True)
    text = config_to_yaml(cfg)  # stages read the run's config from here (run.iterations: the last iteration)
    if not paths.config.is_file() or paths.config.read_text() != text:  # rewritten only when it changed
        write_text(paths.config, text)
    store.push_file(paths.config)
    store.hydrate()  # completed run-level folders and COMPLETE markers this machine lacks
    return str(paths.root)


def _seed(cfg: Config) -> str:
    run_dir = prepare_run_dir(cfg)
    open_training_run(run_dir)
    seed(run_dir)
    init_models(run_dir)
    return run_dir


def _prepare(cfg: Config) -> tuple[str, dict]:
    run_dir = _seed(cfg)
    bootstrap(run_dir)
    metrics = baseline.parse(baseline(run_dir)).metrics
    version_start(run_dir)  # iteration 0 under DVC, its record in the remote
    log_baseline(run_dir, metrics)
    register_start(run_dir)  # the warm-start as version 0 of each model: `best` until beaten on dev
    return run_dir, metrics


@flow(name="rla-seed", log_prints=True)
def seed_run(config_files: list[str] | None = None, overrides: list[str] | None = None) -> dict:
    """Seed task store + held-out tasks → tokenizer and tiny models."""
    cfg = load_config(config_files, overrides)
    with hold(run_folder(cfg)):
        run_dir = _seed(cfg)
        return {"run_dir": run_dir, **seed.read(RunPaths.of(run_dir)).stored()}


@flow(name="rla-prepare", log_prints=True)
def prepare(config_files: list[str] | None = None, overrides: list[str] | None = None) -> dict:
    """Seed (skipped when done) → supervised warm-start → baseline held-out and dev evaluation → the
    warm-start registered as iteration 0."""
    cfg = load_config(config_files, overrides)
    with hold(run_folder(cfg)):
        run_dir, baseline = _prepare(cfg)
        return {"run_dir": run_dir, "baseline": baseline}


@flow(name="rla-train", log_prints=True)
def train(config_files: list[str] | None = None, overrides: list[str] | None = None) -> dict:
    """Prepare (skipped when done) → iterations 1..run.iterations (completed ones skipped)."""
    cfg = load_config(config_files, overrides)
    with hold(run_folder(cfg)):
        run_dir, baseline = _prepare(cfg)
        paths = RunPaths.of(run_dir)
        per_iteration = {}
        try:
            for k in range(1, cfg.run.iterations + 1):
                if not paths.is_complete(k):
                    per_iteration[k] = rl_iteration(run_dir, k)
        except Exception:
            _mark_failed(run_dir)
            raise
        log_overview(run_dir)
        close_training_run(run_dir)
        return {"run_dir": run_dir, "baseline": baseline, "iterations": per_iteration}


@flow(name="rla-iterate", log_prints=True)
def iterate(config_files: list[str] | None = None, overrides: list[str] | None = None,
            iteration: int | None = None) -> dict:
    """Prepare (skipped when done) → one iteration of the config's run: `iteration`, by default the one
    after the latest completed (an interrupted one resumes). A schedule on this keeps extending a run."""
    cfg = load_config(config_files, overrides)
    with hold(run_folder(cfg)):
        run_dir, _ = _prepare(cfg)
        paths = RunPaths.of(run_dir)
        done = paths.completed_iterations()
        k = iteration or (done[-1] + 1 if done else 1)
        if k > 1 and not paths.is_complete(k - 1):
            raise BadValue(f"iteration {k} needs iteration {k - 1} complete in {paths.root}; completed: {done}")
        try:
            metrics = rl_iteration(run_dir, k)
        except Exception:
            _mark_failed(run_dir)
            raise
        log_overview(run_dir)
        close_training_run(run_dir)
        return {"run_dir": run_dir, "iteration": k, "metrics": metrics}


@flow(name="rla-evaluate", log_prints=True)
def evaluate_run(config_files: list[str] | None = None, overrides: list[str] | None = None,
                 iteration: int | None = None) -> dict:
    """Held-out evaluation of the models after `iteration` (default: the latest completed), in
    eval/iter_<k>/: the stored result when that folder is done, else computed exactly as the evaluation
    logged for that iteration (same seed and passes: identical numbers). Logged to MLflow under `eval/`
    on the iteration's nested run and the training run, step = iteration (0 = the warm-start: training
    run only), and as held-out tags on the versions registered at that iteration (tasks/tracking/run_log.py
    log_evaluation)."""
    cfg = load_config(config_files, overrides)
    paths = RunPaths.of(Path(cfg.run.output_dir) / cfg.run.name)
    done = paths.completed_iterations()
    if iteration is None:
        iteration = done[-1] if done else 0
    if iteration and iteration not in done:
        raise BadValue(f"iteration {iteration} is not complete in {paths.root}; completed: {done}")
    metrics = evaluate_checkpoint.parse(evaluate_checkpoint(str(paths.root), iteration)).metrics
    log_evaluation(str(paths.root), iteration, metrics)
    return metrics
