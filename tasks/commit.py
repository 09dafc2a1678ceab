"""The commit stage: version the iteration's outputs with DVC, register checkpoints in MLflow, log
artifacts, and write the iteration's COMPLETE marker last."""
from __future__ import annotations

from pathlib import Path

from rla_core.config import Config
from tasks.object_store import dvc_remote_options
from tasks.paths import RunPaths, run_config
from tasks.report import iteration_report, render_html, render_text
from tasks.stage import stage
from tasks.storage import done_summary, read_json, write_text
from tasks.tracking_tasks import tracker_for
from tasks.versioning import data_version, init_run_repo, track


def versioned_paths(paths: RunPaths, k: int) -> list[Path]:
    """The iteration's task store, training batches and (when trained) checkpoints."""
    chosen = [paths.it(k).store, paths.it(k).data]
    for role in ("policy", "judge"):
        model = paths.it(k).model(role)
        if model.is_dir():
            chosen.append(model)
    return chosen


def log_artifacts(paths: RunPaths, k: int) -> None:
    """The iteration's trajectory report (text + HTML) and task-store diff/report on its MLflow run."""
    tracker = tracker_for(str(paths.root))
    report = iteration_report(paths, k, run_config(paths.root).reward.step_weight)
    tracker.log_text(render_text(report), "samples/trajectories.txt", iteration=k)
    tracker.log_text(render_html(report), "samples/trajectories.html", iteration=k)
    tracker.log_dict(read_json(paths.it(k).store_diff), "task_store/diff.json", iteration=k)
    tracker.log_dict(read_json(paths.it(k).adapt_report), "task_store/report.json", iteration=k)


@stage(retries=1, retry_delay_s=2)  # DVC and the MLflow registry may meet a transient lock
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
        update = done_summary(paths.it(k).trained(role))
        if update.get("trained"):
            registered[role] = tracker.register_checkpoint(paths.root / update["model_dir"], f"rla-{role}",
                                                           iteration=k, data_version=version)
    write_text(paths.it(k).complete, version + "\n")
    return {"data_version": version, "registered": registered, "metrics": {}}
