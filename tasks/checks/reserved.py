"""Reserved content: the held-out and dev tasks (and the judge benchmarks drawn from them) that no training
may touch, compared by content hash (the game or problem itself), never by task id.

The seed stage records the reserved hashes in seed/reserved.json. The rewriters refuse an attempt that lands
on one (tasks/stages/rewriting.py), the validate stage's `reserved_content` gate checks every rolled-out task and
every training sample before an update, and `exposure` counts what reached training in any run folder (for
auditing runs made before the gate existed).
"""
from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

from rla_core.adaptation.store import TaskStore
from rla_core.config import Config
from rla_core.envs.base import get_environment
from rla_core.errors import MissingFile
from rla_core.schemas import Task, TrainingSample, Trajectory
from tasks.paths import RunPaths
from tasks.storage.files import read_json, read_records

# (what the row is, its task id, the content hash of that task or None when the task is unknown)
Row = tuple[str, str, str | None]


def reserved_hashes(paths: RunPaths) -> frozenset[str]:
    """The content hashes no training may touch, as the seed stage recorded them."""
    if not paths.reserved.is_file():
        raise MissingFile(f"{paths.reserved}: the seed stage's reserved content hashes are missing")
    return frozenset(read_json(paths.reserved))


def content_hashes(cfg: Config, tasks: Iterable[Task]) -> dict[str, str]:
    """{task id: content hash} under the run's environment family."""
    family = get_environment(cfg.environment.name)
    return {task.task_id: family.content_hash(task.spec) for task in tasks}


def training_rows(paths: RunPaths, cfg: Config, k: int, trajectories: list[Trajectory] | None = None,
                  batches: dict[str, list[TrainingSample]] | None = None) -> list[Row]:
    """One row per task of the store after adaptation (active and pending), per rolled-out task and per
    training sample of iteration k (policy and judge), with the content hash of its task; a sample or
    trajectory whose task the iteration did not select gets None."""
    it = paths.it(k)
    store = TaskStore.load(it.store)
    stored = store.active_tasks() + [c.task for c in store.pending()]
    hashes = content_hashes(cfg, read_records(it.tasks, Task))
    stored_hashes = content_hashes(cfg, stored)
    rows: list[Row] = [("store", t.task_id, stored_hashes[t.task_id]) for t in stored]
    if trajectories is None:
        trajectories = read_records(it.trajectories, Trajectory)
    if batches is None:
        batches = {role: read_records(it.batch(role), TrainingSample) if it.batch(role).is_file() else []
                   for role in ("policy", "judge")}
    rows += [("rollout", task_id, hashes.get(task_id)) for task_id in sorted({t.task_id for t in trajectories})]
    for role, samples in batches.items():
        rows += [(f"{role}_sample", s.task_id, hashes.get(s.task_id)) for s in samples]
    return rows


def exposure(run_dir: str | Path, cfg: Config) -> dict[str, float]:
    """How much reserved content reached training in a run: rolled-out reserved tasks, the iterations
    that rolled one out, and the policy and judge samples of them (each iteration whose data stage is done)."""
    paths = RunPaths.of(run_dir)
    reserved = reserved_hashes(paths)
    counts = {"iterations": 0.0, "iterations_with_reserved": 0.0, "store": 0.0, "rollout": 0.0,
              "policy_sample": 0.0, "judge_sample": 0.0}
    k = 1
    while paths.it(k).batch("policy").is_file():
        rows = [row for row in training_rows(paths, cfg, k) if row[2] in reserved]
        counts["iterations"] += 1
        counts["iterations_with_reserved"] += float(bool(rows))
        for kind, _, _ in rows:
            counts[kind] += 1
        k += 1
    return counts


def main(argv: list[str] | None = None) -> int:
    """`python -m tasks.checks.reserved RUN_DIR...`: the reserved content each run rolled out and trained on, as JSON."""
    import argparse
    import json

    from tasks.common import bind_environment
    from tasks.paths import run_config

    parser = argparse.ArgumentParser(prog="python -m tasks.checks.reserved", description=main.__doc__)
    parser.add_argument("runs", nargs="+", help="run folders")
    for run_dir in parser.parse_args(argv).runs:
        cfg = run_config(run_dir)
        bind_environment(cfg, run_dir)
        print(json.dumps({"run": str(run_dir), **exposure(run_dir, cfg)}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
