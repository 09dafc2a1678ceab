"""The data gate stage: Great Expectations suites on the task store, rollouts and both batches.

The report is written and logged to MLflow whether the gates pass or not; a failure raises
GateFailed, which stops the iteration before any model is updated.
"""
from __future__ import annotations

from pathlib import Path

from rla_core.adaptation.store import TaskStore
from rla_core.config import Config
from rla_core.schemas import Task, TrainingSample, Trajectory
from tasks.checks.gates import (GateFailed, check_judge_batch, check_policy_batch, check_reserved_content, check_rollouts,
                         check_task_store)
from tasks.paths import RunPaths
from tasks.checks.reserved import reserved_hashes, training_rows
from tasks.settings import setting_for
from tasks.stage import stage
from tasks.storage.files import read_records, read_records_shared, write_json
from tasks.summaries import ValidateSummary, prefixed
from tasks.tracking.run_log import tracker_for


def run_gates(paths: RunPaths, cfg: Config, k: int) -> list:
    heldout = [t.task_id for t in read_records(paths.heldout, Task)]
    vocab = cfg.models.vocab_size if cfg.models.policy.path is None else None
    it = paths.it(k)
    slots = TaskStore.load(it.store).slots()
    trajectories = read_records_shared(it.trajectories, Trajectory)
    results = [
        check_task_store(slots, heldout),
        check_rollouts(trajectories, heldout),
    ]
    results += setting_for(cfg).gates(paths, cfg, k, slots, heldout)  # e.g. coding: every problem's tests
    # An empty batch is legitimate (no mixed-outcome or in-band task this iteration): nothing to train.
    batches = {name: read_records_shared(it.batch(name), TrainingSample) for name in ("policy", "judge")}
    for check, name in ((check_policy_batch, "policy"), (check_judge_batch, "judge")):
        if batches[name]:
            results.append(check(batches[name], heldout, vocab_size=vocab))
    # First in the list: reserved content is the failure the report must name even when others fail too.
    results.insert(0, check_reserved_content(training_rows(paths, cfg, k, trajectories, batches),
                                             reserved_hashes(paths)))
    return results


@stage(bookkeeping=True, summary=ValidateSummary)
def validate(paths: RunPaths, cfg: Config, k: int, out: Path) -> dict:
    if not cfg.gates.enabled:
        return {"metrics": {}, "gates": "disabled"}
    results = run_gates(paths, cfg, k)
    report = {r.gate: r.to_dict() for r in results}
    write_json(paths.it(k).gates_report, report)
    tracker_for(str(paths.root)).log_dict(report, "gates/report.json", iteration=k)
    metrics = {f"{r.gate}_failed": float(r.failed) for r in results}
    failed = [r for r in results if not r.success]
    if failed:  # a failing stage returns nothing to log: its metrics go to MLflow from here
        tracker_for(str(paths.root)).log_metrics(prefixed("validate", metrics), step=k, iteration=k)
        raise GateFailed(failed[0])
    return {"metrics": metrics}  # logged once, with the stage's summary (tasks/tracking/run_log.py)
