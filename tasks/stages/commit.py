"""The commit stage: version the iteration's outputs with DVC, register checkpoints in MLflow with their
lineage, log artifacts, and write the iteration's COMPLETE marker last.

Lineage of a registered version (its tags): run, iteration, data_version (also in COMPLETE); git_commit
and git_dirty of the code; config_hash of the run's config identity; dvc.store, dvc.batch and dvc.model,
the md5s DVC recorded for the iteration's task store, this role's training batch and the checkpoint;
parent_version, the version of the same model this one was trained from (the warm-start's version of
iteration 0 for the first update); and, when the iteration was evaluated, its metrics (`dev.success_rate`,
`heldout.success_rate`, ...). The iteration's MLflow run carries data_version, git_commit, git_dirty and
config_hash too.

The warm-start itself (models/bootstrap) is registered as iteration 0 by `register_start`, tagged with the
baseline's metrics, so that `best` (ranked on dev, tasks/tracking/tracker.py) can be the warm-start.
"""
from __future__ import annotations

import logging
from pathlib import Path

from prefect import task

from rla_core.config import Config
from tasks.storage.object_store import dvc_remote_options
from tasks.paths import ROLES, RunPaths, run_config
from tasks.storage.reproduce import START, publish_iteration_record, version_start
from tasks.storage.retention import prune_checkpoints
from tasks.reports.trajectories import iteration_report, render_html, render_text
from tasks.stage import stage
from tasks.storage.files import is_done, read_json, write_text
from tasks.summaries import CommitSummary, TrainSummary, read_summary
from tasks.tracking.model_registry import best_tags, heldout_tags, lineage_description, model_name
from tasks.tracking.tracker import Tracker
from tasks.tracking.run_log import TRACK, tracker_for
from tasks.storage.versioning import (config_hash, data_version, git_state, init_run_repo, track, tracked_file_hash,
                              tracked_hashes)

log = logging.getLogger(__name__)


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
    was), "unregistered" when that iteration's version is not found; for the warm-start, its version of
    iteration 0 ("bootstrap" when it is not registered: a run started before the warm-start was)."""
    start = paths.model_dir(k, role).resolve()
    for prev in range(k - 1, 0, -1):
        if paths.it(prev).model(role).resolve() == start:
            found = tracker.find_version(model_name(role), prev)
            return found["version"] if found else "unregistered"
    found = tracker.find_version(model_name(role), START)
    return found["version"] if found else "bootstrap"


def dvc_tags(paths: RunPaths, k: int, role: str, model_dir: Path) -> dict[str, str]:
    """md5s DVC recorded for the iteration's task store, `role`'s training batch and its checkpoint."""
    it = paths.it(k)
    return {"dvc.store": tracked_file_hash(paths.root, it.store),
            "dvc.batch": tracked_file_hash(paths.root, it.batch(role)),
            "dvc.model": tracked_file_hash(paths.root, model_dir)}


def evaluated_metrics(paths: RunPaths, k: int) -> dict[str, float]:
    """The iteration's in-loop evaluation metrics (held-out and dev), {} when it was not evaluated."""
    return read_json(paths.it(k).eval_metrics) if paths.it(k).eval_metrics.is_file() else {}


@stage(retries=1, retry_delay_s=2, bookkeeping=True, summary=CommitSummary)  # DVC and the MLflow registry may meet a transient lock
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
        update = read_summary(paths.it(k).trained(role), TrainSummary)
        if update.trained:
            model_dir = paths.root / update.model_dir
            tags = {**lineage, **(dvc_tags(paths, k, role, model_dir) if cfg.versioning.dvc else {}),
                    "parent_version": parent_version(paths, tracker, k, role), **heldout}
            registered[role] = tracker.register_checkpoint(
                model_dir, model_name(role), iteration=k, data_version=version, tags=tags,
                description=lineage_description(role, k, version, tags))
            if registered[role] is not None:
                tracker.update_aliases(model_name(role), best_tags(role))
    if cfg.versioning.dvc:  # before COMPLETE: a record that failed to publish is retried with the stage
        publish_iteration_record(paths, cfg, k)
    pruned = prune_checkpoints(paths, k, cfg.run.keep_checkpoints, cfg.versioning.dvc) \
        if cfg.run.keep_checkpoints else []
    write_text(paths.it(k).complete, version + "\n")
    return {"data_version": version, "registered": registered, "pruned": pruned, "metrics": {}}


def start_tags(paths: RunPaths, cfg: Config) -> dict[str, str]:
    """Tags of the warm-start's versions: git_commit, git_dirty, config_hash; with DVC, dvc.seed and
    dvc.model, the md5s DVC recorded for the seed folder (task store, held-out and dev tasks) and the
    warm-start folder (models/bootstrap, every role); parent_version "init" (trained from models/init); and
    the baseline's metrics (`dev.*`, `heldout.*`, `bench.*`)."""
    tags = {**git_state(), "config_hash": config_hash(cfg), "parent_version": "init"}
    if cfg.versioning.dvc:
        seed, model = paths.seed_store.parent, paths.bootstrap
        try:
            hashes = tracked_hashes(paths.root, [seed, model])
            tags.update({"dvc.seed": hashes[paths.rel(seed)], "dvc.model": hashes[paths.rel(model)]})
        except FileNotFoundError as missing:  # a machine that fetched the start's folders, not its pointers
            log.warning("warm-start versions registered without dvc.* tags: %s", missing)
    return {**tags, **heldout_tags(read_json(paths.baseline / "metrics.json"))}


@task(name="register-start", **TRACK)
def register_start(run_dir: str) -> dict[str, dict | None]:
    """The warm-start (models/bootstrap/<role>) as each role's version of iteration 0, with its data_version
    (of the `version_start` stage), lineage and baseline metrics (`start_tags`), then the role's aliases
    recomputed: `best` stays the warm-start until a later version scores higher on dev. Idempotent (a
    re-run finds the version). Returns {role: registered version or None}."""
    paths, cfg = RunPaths.of(run_dir), run_config(run_dir)
    started = version_start.out_dir(paths)
    version = version_start.read(paths).data_version if is_done(started) else ""
    tracker, tags = tracker_for(run_dir), start_tags(paths, cfg)
    registered: dict[str, dict | None] = {}
    for role in ROLES:
        registered[role] = tracker.register_checkpoint(
            paths.bootstrap / role, model_name(role), iteration=START, data_version=version, tags=tags,
            description=lineage_description(role, START, version, tags))
        if registered[role] is not None:
            tracker.update_aliases(model_name(role), best_tags(role))
    return registered
