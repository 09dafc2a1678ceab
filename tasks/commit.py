"""The commit stage: version the iteration's outputs with DVC, register checkpoints in MLflow, log
artifacts, and write the iteration's COMPLETE marker last."""
from __future__ import annotations

from pathlib import Path

from prefect import task
from prefect.cache_policies import NO_CACHE

from rla_core.config import Config
from tasks.common import resumable
from tasks.object_store import dvc_remote_options
from tasks.paths import COMPLETE, RunPaths, run_config
from tasks.report import iteration_report, render_html, render_text
from tasks.storage import done_summary, read_json, write_text
from tasks.tracking_tasks import tracker_for
from tasks.versioning import data_version, init_run_repo, track


def versioned_paths(paths: RunPaths, k: int) -> list[Path]:
    """The iteration's task store, training batches and (when trained) checkpoints."""
    chosen = [paths.stage(k, "adapt") / "store", paths.stage(k, "data")]
    for role in ("policy", "judge"):
        model = paths.stage(k, f"train_{role}") / "model"
        if model.is_dir():
            chosen.append(model)
    return chosen


def log_artifacts(paths: RunPaths, k: int) -> None:
    """The iteration's trajectory report (text + HTML) and task-store diff/report on its MLflow run."""
    tracker = tracker_for(str(paths.root))
    report = iteration_report(paths, k, run_config(paths.root).reward.step_weight)
    tracker.log_text(render_text(report), "samples/trajectories.txt", iteration=k)
    tracker.log_text(render_html(report), "samples/trajectories.html", iteration=k)
    tracker.log_dict(read_json(paths.stage(k, "adapt") / "diff.json"), "task_store/diff.json", iteration=k)
    tracker.log_dict(read_json(paths.stage(k, "adapt") / "report.json"), "task_store/report.json", iteration=k)


@task(name="commit", cache_policy=NO_CACHE, persist_result=False, retries=1, retry_delay_seconds=2)
@resumable("commit")
def commit(paths: RunPaths, cfg: Config, k: int, out: Path) -> dict:
    version = ""
    if cfg.versioning.dvc:
        init_run_repo(paths.root, cfg.versioning.remote, dvc_remote_options(cfg))
        chosen = versioned_paths(paths, k)
        track(paths.root, chosen)
        version = data_version(paths.root, chosen)
    log_artifacts(paths, k)
    tracker = tracker_for(str(paths.root))
    registered = {}
    for role in ("policy", "judge"):
        stage = done_summary(paths.stage(k, f"train_{role}"))
        if stage.get("trained"):
            registered[role] = tracker.register_checkpoint(paths.root / stage["model_dir"], f"rla-{role}",
                                                           iteration=k, data_version=version)
    write_text(paths.iteration(k) / COMPLETE, version + "\n")
    return {"data_version": version, "registered": registered, "metrics": {}}
