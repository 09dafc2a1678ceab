"""The commit stage: version the iteration's outputs with DVC, register checkpoints in MLflow with their
lineage, log artifacts, and write the iteration's COMPLETE marker last.

Lineage of a registered version (its tags): run, iteration, data_version (also in COMPLETE); git_commit
and git_dirty of the code; config_hash of the run's config identity; dvc.store, dvc.batch and dvc.model,
the md5s DVC recorded for the iteration's task store, this role's training batch and the checkpoint;
parent_version, the version of the same model this one was trained from ("bootstrap" for the
warm-start); and, when the iteration was evaluated, its held-out metrics (`heldout.success_rate`, ...).
The iteration's MLflow run carries data_version, git_commit, git_dirty and config_hash too.
"""
from __future__ import annotations

from pathlib import Path

from rla_core.config import Config
from tasks.object_store import dvc_remote_options
from tasks.paths import ROLES, RunPaths, run_config
from tasks.reproduce import publish_iteration_record
from tasks.report import iteration_report, render_html, render_text
from tasks.stage import stage
from tasks.storage import done_summary, read_json, write_text
from tasks.tracking import Tracker, heldout_tags, model_name
from tasks.tracking_tasks import tracker_for
from tasks.versioning import config_hash, data_version, git_state, init_run_repo, track, tracked_file_hash


def versioned_paths(paths: RunPaths, k: int) -> list[Path]:
    """The iteration's task store, training batches, (when trained) checkpoints and, for TextWorld, the
    run's game cache (every game built so far, content-addressed)."""
    chosen = [paths.it(k).store, paths.it(k).data]
    if paths.games.is_dir():
        chosen.append(paths.games)
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


def parent_version(paths: RunPaths, tracker: Tracker, k: int, role: str) -> str:
    """The registered version of `role` that iteration k trained from: the version of the iteration
    whose update it started from (the previous one, or earlier when an iteration left the model as it
    was), "bootstrap" for the warm-start, "unregistered" when that iteration's version is not found."""
    start = paths.model_dir(k, role).resolve()
    for prev in range(k - 1, 0, -1):
        if paths.it(prev).model(role).resolve() == start:
            found = tracker.find_version(model_name(role), prev)
            return found["version"] if found else "unregistered"
    return "bootstrap"


def dvc_tags(paths: RunPaths, k: int, role: str, model_dir: Path) -> dict[str, str]:
    """md5s DVC recorded for the iteration's task store, `role`'s training batch and its checkpoint."""
    it = paths.it(k)
    return {"dvc.store": tracked_file_hash(paths.root, it.store),
            "dvc.batch": tracked_file_hash(paths.root, it.batch(role)),
            "dvc.model": tracked_file_hash(paths.root, model_dir)}


def evaluated_metrics(paths: RunPaths, k: int) -> dict[str, float]:
    """The iteration's in-loop held-out metrics, {} when it was not evaluated."""
    return read_json(paths.it(k).eval_metrics) if paths.it(k).eval_metrics.is_file() else {}


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
    lineage = {**git_state(), "config_hash": config_hash(cfg)}
    tracker.set_tags({"data_version": version, **lineage}, iteration=k)
    heldout = heldout_tags(evaluated_metrics(paths, k))
    registered = {}
    for role in ROLES:
        update = done_summary(paths.it(k).trained(role))
        if update.get("trained"):
            model_dir = paths.root / update["model_dir"]
            tags = {**lineage, **(dvc_tags(paths, k, role, model_dir) if cfg.versioning.dvc else {}),
                    "parent_version": parent_version(paths, tracker, k, role), **heldout}
            registered[role] = tracker.register_checkpoint(model_dir, model_name(role), iteration=k,
                                                           data_version=version, tags=tags)
            if registered[role] is not None:
                tracker.update_aliases(model_name(role))
    if cfg.versioning.dvc:  # before COMPLETE: a record that failed to publish is retried with the stage
        publish_iteration_record(paths, cfg, k)
    write_text(paths.it(k).complete, version + "\n")
    return {"data_version": version, "registered": registered, "metrics": {}}
