"""`rla reproduce`: restore iteration k's inputs from the run's DVC remote into a scratch folder, re-run
its stages there (in-process, without Prefect) and compare every output file and metric with the record
(tasks/storage/reproduce.py: records, restoring, comparing, the report)."""
from __future__ import annotations

import shutil
import time
from pathlib import Path, PurePosixPath

from tasks.paths import CONFIG_FILE, START_FOLDERS, RunPaths, iteration_folder
from tasks.pipeline import ITERATION, START_STAGES
from tasks.storage.reproduce import (REPORT, START, scratch_config, compare, explain, folder_outputs,
                             read_record, record_name, restore_from_record)
from tasks.storage.files import json_safe, write_json
from tasks.summaries import migrate
from tasks.storage.versioning import default_remote, init_run_repo


def _rerun(scratch: Path, k: int) -> dict:
    """Run iteration k's stages (k = 0: the start's) in the scratch folder, in-process; returns
    folder_outputs per stage folder."""
    paths = RunPaths.of(scratch)
    if k == START:
        for run_stage in START_STAGES:
            run_stage.run_here(str(scratch))
        return {folder: folder_outputs(paths.root / folder) for folder in START_FOLDERS}
    for step in ITERATION:
        step.run_here(str(scratch), k)
    return {step.name: folder_outputs(paths.stage(k, step.name)) for step in ITERATION}


def reproduce(run_dir: Path, k: int, remote: str | None = None, into: Path | None = None,
              options: dict[str, str] | None = None) -> dict:
    """Restore iteration k's inputs from the remote into a scratch folder, re-run it, compare with the
    record, and write the result to `<scratch>/reproduce.json`. Returns {"scratch", "record", "diffs",
    "files", "metrics", "report" (see explain), "report_file", "restore_seconds", "compare_seconds",
    "seconds"}."""
    remote = remote or default_remote(run_dir)
    record = read_record(remote, k, options)
    # a record published before the stage-prefix rule holds the old metric names (tasks/summaries.py)
    record["outputs"] = {folder: migrate(PurePosixPath(folder).name, outputs)
                         for folder, outputs in record["outputs"].items()}
    scratch = into or run_dir.parent / f"{run_dir.name}.reproduce-{iteration_folder(k)}"
    if scratch.exists():
        shutil.rmtree(scratch)
    scratch.mkdir(parents=True)
    (scratch / CONFIG_FILE).write_text(scratch_config(record, scratch))
    start = time.perf_counter()
    restore_from_record(record, scratch, remote, options, inputs_only=True)
    init_run_repo(scratch, str(scratch / ".dvc-remote"))  # writes of the re-run stay in the scratch folder
    restored_s = time.perf_counter() - start
    got = _rerun(scratch, k)
    compared = time.perf_counter()
    recorded = record["outputs"]
    result = {"scratch": str(scratch), "record": record_name(k), "diffs": compare(recorded, got),
              "files": sum(len(v["files"]) for v in recorded.values()),
              "metrics": sum(len(v["metrics"]) for v in recorded.values()),
              "report": explain(record, got, scratch, Path(run_dir).resolve(), remote, options),
              "report_file": str(scratch / REPORT), "restore_seconds": restored_s,
              "compare_seconds": time.perf_counter() - compared, "seconds": time.perf_counter() - start}
    write_json(scratch / REPORT, json_safe(result))
    return result
