"""MLflow bookkeeping around the flows: the training run and per-iteration logs."""
from __future__ import annotations

import tempfile
import time
from pathlib import Path
from types import TracebackType

from prefect import task
from prefect.cache_policies import NO_CACHE

from rla_core.numerics import numerics_tags
from tasks.storage.object_store import configure_mlflow_s3, open_run_store
from tasks.paths import ROLES, RunPaths, run_config
from tasks.stage import Stage
from tasks.reports.overview import headline_metrics, overview_markdown, plot_overview, read_curves
from tasks.tracking.model_registry import best_tags, heldout_tags, model_name
from tasks.tracking.tracker import RUN_ID_FILE, Tracker

TRACK = dict(cache_policy=NO_CACHE, persist_result=False)


def tracker_for(run_dir: str) -> Tracker:
    cfg = run_config(run_dir)
    configure_mlflow_s3(cfg.storage)
    return Tracker(run_dir, cfg.tracking, run_name=cfg.run.name)




class IterationLog:
    """Logs each stage's metrics and seconds to the iteration's nested MLflow run (and the parent), and at
    the end the iteration's wall time and its orchestration overhead: wall − the compute stages' seconds
    (`time/iteration_s`, `time/orchestration_s`, `time/orchestration_share`; not for an iteration that
    resumed after an interruption, whose time is split over attempts)."""

    def __init__(self, tracker: Tracker, iteration: int) -> None:
        self.tracker, self.iteration = tracker, iteration
        self.metrics: dict[str, float] = {}
        self.started = time.perf_counter()
        self.compute_seconds = 0.0
        self.resumed = False  # a stage finished by an earlier attempt: this attempt's wall time is not the iteration's

    @classmethod
    def open(cls, run_dir: str, iteration: int) -> "IterationLog":
        tracker = tracker_for(run_dir)
        tracker.start_iteration(iteration)  # RUNNING again when an interrupted iteration resumes
        return cls(tracker, iteration)

    def stage(self, stage: Stage, summary: dict) -> dict:
        """Log a finished stage's summary; a bookkeeping stage's seconds (the gates, the commit) count as
        orchestration, not compute."""
        typed = stage.parse(summary)
        metrics = dict(typed.metrics)
        if typed.seconds is not None:
            metrics[f"time/{stage.name}_s"] = typed.seconds
            if not stage.bookkeeping:
                self.compute_seconds += typed.seconds
        if typed.peak_rss_gib is not None:
            metrics[f"memory/{stage.name}_peak_rss_gib"] = typed.peak_rss_gib
        self.resumed |= typed.resumed
        self.tracker.log_metrics(metrics, step=self.iteration, iteration=self.iteration)
        self.metrics.update(metrics)
        return summary

    def __enter__(self) -> "IterationLog":
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None,
                 trace: TracebackType | None) -> None:
        if kind is None and not self.resumed:
            wall = time.perf_counter() - self.started
            timing = {"time/iteration_s": wall, "time/orchestration_s": wall - self.compute_seconds,
                      "time/orchestration_share": (wall - self.compute_seconds) / wall if wall > 0 else 0.0}
            self.tracker.log_metrics(timing, step=self.iteration, iteration=self.iteration)
            self.metrics.update(timing)
        self.tracker.end_iteration(self.iteration, status="FINISHED" if kind is None else "FAILED")


@task(name="open-training-run", **TRACK)
def open_training_run(run_dir: str) -> str:
    """Create (or re-attach to) the training's parent MLflow run and log the config."""
    tracker = tracker_for(run_dir)
    tracker.start()
    tracker.log_config(run_config(run_dir))
    tracker.set_tags(numerics_tags())  # the CPU and float path its numbers are bit-identical on
    open_run_store(run_dir).push_file(tracker.run_dir / RUN_ID_FILE)  # another machine re-attaches to it
    return tracker.run_id


@task(name="log-overview", **TRACK)
def log_overview(run_dir: str) -> dict[str, float]:
    """The parent run's at-a-glance view (tasks/reports/overview.py): its description (before/after table),
    overview.png and the short headline metrics (step = the last completed iteration)."""
    paths = RunPaths.of(run_dir)
    curves = read_curves(paths)
    tracker = tracker_for(run_dir)
    tracker.set_tags({"mlflow.note.content": overview_markdown(paths, curves)})
    with tempfile.TemporaryDirectory() as scratch:  # MLflow keeps the figure; the run folder does not
        figure = plot_overview(paths, Path(scratch) / "overview.png", curves)
        if figure is not None:
            tracker.log_artifact(figure)
    headline = headline_metrics(paths, curves)
    tracker.log_metrics(headline, step=curves.iterations[-1] if curves.iterations else 0)
    return headline


@task(name="close-training-run", **TRACK)
def close_training_run(run_dir: str, status: str = "FINISHED") -> None:
    tracker_for(run_dir).finish(status)


@task(name="log-baseline", **TRACK)
def log_baseline(run_dir: str, metrics: dict) -> None:
    """The warm-start's held-out and dev metrics on the training run, at step 0 (before iteration 1)."""
    tracker_for(run_dir).log_metrics(metrics, step=0)


EVAL_PREFIX = "eval/"  # `rla eval`'s metrics beside the in-loop evaluation's, never mixed into its curves


@task(name="log-evaluation", **TRACK)
def log_evaluation(run_dir: str, iteration: int, metrics: dict) -> dict[str, str]:
    """`rla eval`'s metrics of the models after `iteration` on MLflow, prefixed `eval/`
    (`eval/heldout/success_rate`, `eval/bench/balanced_acc`, ...) at step = iteration: on the iteration's
    nested run and the training run (for iteration 0, the warm-start, on the training run only). Logged
    once: a repeated `rla eval` that returns the stored evaluation adds no second point. The versions
    registered at that iteration (0: the warm-start's) get the metrics as tags (`dev.success_rate`,
    `heldout.success_rate`, ...; identical to the in-loop ones when the iteration was evaluated there) and
    their model's `best` alias is recomputed (from the dev tags). Returns {role: version tagged}."""
    tracker = tracker_for(run_dir)
    target = iteration or None
    prefixed = {f"{EVAL_PREFIX}{key}": value for key, value in metrics.items() if isinstance(value, (int, float))}
    if not tracker.has_metrics(list(prefixed), step=iteration, iteration=target):
        tracker.log_metrics(prefixed, step=iteration, iteration=target)
    tagged = {}
    for role in ROLES:
        found = tracker.find_version(model_name(role), iteration)
        if found is not None:
            tracker.set_version_tags(found["name"], found["version"], heldout_tags(metrics))
            tracker.update_aliases(found["name"], best_tags(role))
            tagged[role] = found["version"]
    return tagged
