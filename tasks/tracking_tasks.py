"""MLflow bookkeeping around the flows: the training run, per-iteration logs, baseline evaluation."""
from __future__ import annotations

from pathlib import Path
from types import TracebackType

from prefect import task
from prefect.cache_policies import NO_CACHE

from tasks.common import eval_seed
from tasks.object_store import configure_mlflow_s3, fetch_done, open_run_store, publish
from tasks.paths import RunPaths, run_config
from tasks.storage import done_summary, mark_done
from tasks.tracking import RUN_ID_FILE, Tracker
from tasks.training import evaluate_models

TRACK = dict(cache_policy=NO_CACHE, persist_result=False)


def tracker_for(run_dir: str) -> Tracker:
    cfg = run_config(run_dir)
    configure_mlflow_s3(cfg.storage)
    return Tracker(run_dir, cfg.tracking, run_name=cfg.run.name)


class IterationLog:
    """Logs each stage's metrics and seconds to the iteration's nested MLflow run (and the parent)."""

    def __init__(self, tracker: Tracker, iteration: int) -> None:
        self.tracker, self.iteration = tracker, iteration
        self.metrics: dict[str, float] = {}

    @classmethod
    def open(cls, run_dir: str, iteration: int) -> "IterationLog":
        tracker = tracker_for(run_dir)
        tracker.start_iteration(iteration)  # RUNNING again when an interrupted iteration resumes
        return cls(tracker, iteration)

    def stage(self, name: str, summary: dict) -> dict:
        metrics = {k: v for k, v in summary.get("metrics", {}).items() if isinstance(v, (int, float))}
        if "seconds" in summary:
            metrics[f"time/{name}_s"] = summary["seconds"]
        self.tracker.log_metrics(metrics, step=self.iteration, iteration=self.iteration)
        self.metrics.update(metrics)
        return summary

    def __enter__(self) -> "IterationLog":
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None,
                 trace: TracebackType | None) -> None:
        self.tracker.end_iteration(self.iteration, status="FINISHED" if kind is None else "FAILED")


@task(name="open-training-run", **TRACK)
def open_training_run(run_dir: str) -> str:
    """Create (or re-attach to) the training's parent MLflow run and log the config."""
    tracker = tracker_for(run_dir)
    tracker.start()
    tracker.log_config(run_config(run_dir))
    open_run_store(run_dir).push_file(tracker.run_dir / RUN_ID_FILE)  # another machine re-attaches to it
    return tracker.run_id


@task(name="close-training-run", **TRACK)
def close_training_run(run_dir: str, status: str = "FINISHED") -> None:
    tracker_for(run_dir).finish(status)


def _evaluate_into(run_dir: str, out: Path, policy_dir: Path, judge_dir: Path) -> dict:
    if fetch_done(run_dir, out):
        return done_summary(out)
    cfg = run_config(run_dir)
    metrics = evaluate_models(RunPaths.of(run_dir), cfg, policy_dir, judge_dir, out, eval_seed(cfg))
    mark_done(out, metrics)
    publish(run_dir, out)
    return metrics


@task(name="evaluate-baseline", **TRACK)
def evaluate_baseline(run_dir: str) -> dict:
    """Held-out metrics of the warm-started policy and judge, logged at step 0."""
    paths = RunPaths.of(run_dir)
    metrics = _evaluate_into(run_dir, paths.root / "baseline", paths.bootstrap / "policy", paths.bootstrap / "judge")
    tracker_for(run_dir).log_metrics(metrics, step=0)
    return metrics


@task(name="evaluate-checkpoint", **TRACK)
def evaluate_checkpoint(run_dir: str, iteration: int) -> dict:
    """Held-out metrics of the models after `iteration` (0 = the warm-start), in eval/iter_k/."""
    paths = RunPaths.of(run_dir)
    out = paths.root / "eval" / f"iter_{iteration:04d}"
    return _evaluate_into(run_dir, out, paths.model_dir(iteration + 1, "policy"),
                          paths.model_dir(iteration + 1, "judge"))
