"""`rla ablation`: the paper's four rows (and the full loop with λ = 0) × several seeds at equal compute, one training run each.

runs/<name>/
  mlflow.db  mlartifacts/     one MLflow store: a parent run "<name>", a child training run per (row, seed)
  <row>-seed<s>/              an ordinary run folder (resumable like any `rla run`)
  ablation.csv / .md / .png   the per-run numbers, the table with paired differences, the curves

A seed's warm-start (seed store, models, baseline evaluation) is computed by its first row and copied
to its other rows: rows differ only in λ, judge training and adaptation, which none of those use.
With `warm_start` (`--warm-start DIR`) the first row copies it from the earlier ablation folder DIR
instead (tasks/checks/warm_start.py: same config apart from λ and the rows' switches), e.g. for a dev
sweep of λ. Re-running the same command skips every completed row and iteration.
"""
from __future__ import annotations

import shutil
import time
from pathlib import Path

from prefect import flow

from flows.train import train
from rla_core.ablation import Row, check_base, mean_se, parse_rows, row_overrides
from rla_core.config import Config, TrackingConfig, load_config
from tasks.checks.warm_start import WARM_START, warm_start_source
from tasks.reports.ablation import RunResult, read_run, summary_markdown, write_report
from tasks.paths import RunPaths
from tasks.settings import judge_scores, setting_for
from tasks.storage.files import is_done
from tasks.tracking.tracker import PARENT_TAG, Tracker


def _row_overrides(cfg: Config, root: Path, row: Row, seed: int) -> list[str]:
    return row_overrides(setting_for(cfg).judge_weight(cfg), cfg.tracking.experiment, str(root), row, seed)


def share_warm_start(source: Path, target: Path) -> list[str]:
    """Copy the completed warm-start folders of `source` that `target` lacks; returns what was copied."""
    copied = []
    for rel in WARM_START:
        if is_done(source / rel) and not is_done(target / rel):
            shutil.rmtree(target / rel, ignore_errors=True)
            shutil.copytree(source / rel, target / rel)
            copied.append(rel)
    if copied:  # and the judge benchmark scores computed there: a fixed judge is not scored again
        judge_scores.copy_cache(RunPaths.of(source), RunPaths.of(target))
    return copied


def _child_run(parent: Tracker, run_dir: Path, cfg: Config, row: Row, seed: int, source: Path | None) -> None:
    """Create (or find) the row's training run in the shared store, nested under the ablation run; a warm
    start copied from another ablation is named in the tag rla.ablation.warm_start."""
    child = Tracker(run_dir, cfg.tracking, run_name=cfg.run.name)
    tags = {PARENT_TAG: parent.run_id, "rla.ablation.row": row.key, "rla.ablation.seed": str(seed)}
    if source is not None:
        tags["rla.ablation.warm_start"] = str(source)
    for key, value in tags.items():
        child.client.set_tag(child.run_id, key, value)


@flow(name="rla-ablation", log_prints=True)
def ablation(config_files: list[str] | None, overrides: list[str], seeds: int, rows: str = "abcd",
             name: str = "ablation", warm_start: str | None = None) -> dict:
    """Every (row, seed) training run, then the summary files, logged to the ablation's parent run."""
    base = load_config(config_files, overrides)
    chosen = parse_rows(rows)
    check_base(base, chosen, setting_for(base).judge_weight(base))
    root = (Path(base.run.output_dir) / name).resolve()
    root.mkdir(parents=True, exist_ok=True)
    parent = Tracker(root, TrackingConfig(experiment=base.tracking.experiment), run_name=name)
    parent.start()
    seed_list = [base.run.seed + i for i in range(seeds)]
    try:
        results = _run_all(config_files, overrides, base, root, parent, chosen, seed_list,
                           Path(warm_start).resolve() if warm_start else None)
    except BaseException:
        parent.finish("FAILED")
        raise
    keys = [r.key for r in chosen]
    files = write_report(root, results, keys)
    for path in files.values():
        parent.log_artifact(path, "ablation")
    parent.log_metrics(summary_metrics(results, keys), step=0)
    parent.finish()
    return {"root": str(root), "table": summary_markdown(results, keys),
            "files": {k: str(v) for k, v in files.items()}}


def summary_metrics(results: list[RunResult], rows: list[str]) -> dict[str, float]:
    """Per row: mean and standard error of the final held-out success and of its gain over the warm-start."""
    metrics = {}
    for key in rows:
        mine = [r for r in results if r.row == key and r.success]
        for name, values in (("final", [r.final for r in mine]), ("gain", [r.final - r.baseline for r in mine])):
            if values:
                metrics[f"{key}/heldout_{name}_mean"], metrics[f"{key}/heldout_{name}_se"] = mean_se(values)
    return metrics


def _run_all(config_files: list[str] | None, overrides: list[str], base: Config, root: Path, parent: Tracker,
             chosen: list[Row], seed_list: list[int], warm_start: Path | None = None) -> list[RunResult]:
    total, done, started = len(seed_list) * len(chosen), 0, time.perf_counter()
    results: list[RunResult] = []
    for seed in seed_list:
        source = warm_start_source(warm_start, seed) if warm_start is not None else None
        first: Path | None = source
        for row in chosen:
            row_overrides = overrides + _row_overrides(base, root, row, seed)
            cfg = load_config(config_files, row_overrides)
            run_dir = root / cfg.run.name
            if first is not None:
                share_warm_start(first, run_dir)
            _child_run(parent, run_dir, cfg, row, seed, source)
            eta = (time.perf_counter() - started) / done * (total - done) if done else float("nan")
            print(f"[ablation {done + 1}/{total}] row ({row.key}) {row.label}, seed {seed}"
                  + (f"; about {eta / 60:.0f} min left" if done else ""))
            train(config_files, row_overrides)
            first = first or run_dir
            done += 1
            results.append(read_run(run_dir, row.key, seed))
    return results
