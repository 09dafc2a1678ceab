"""Checkpoint retention (`run.keep_checkpoints`): how many trained checkpoints of each role stay in the run
folder.

A SmolLM2 update leaves ~0.9 GB per role (fp32 weights and the optimizer's moments), so a run of a few
iterations fills a disk. With `keep_checkpoints: N`, the commit stage of iteration k deletes the `model/`
folders of each role's updates older than its N newest (the one the next iteration starts from is always
kept). In its place stays a `PRUNED` note; the `model.dvc` pointer stays too, so with `versioning.dvc` on a
pruned checkpoint comes back from the run's DVC cache or remote (`bring_back`, which `rla eval --iteration`
uses); without DVC it is gone. The MLflow registry keeps its own copy of every registered version.
"""
from __future__ import annotations

import shutil
from pathlib import Path

from rla_core.errors import MissingFile
from tasks.paths import ROLES, RunPaths
from tasks.storage.files import is_done, write_text
from tasks.summaries import TrainSummary, read_summary

PRUNED = "PRUNED"  # beside a deleted model/ folder: what deleted it and how to get it back


def _trained_checkpoints(paths: RunPaths, k: int, role: str) -> list[tuple[int, Path]]:
    """(iteration, checkpoint folder) of `role`'s updates in iterations k, k-1, ..., 1 (newest first)."""
    found = []
    for j in range(k, 0, -1):
        stage = paths.it(j).trained(role)
        if is_done(stage) and read_summary(stage, TrainSummary).trained:
            found.append((j, paths.it(j).model(role)))
    return found


def prune_checkpoints(paths: RunPaths, k: int, keep: int, versioned: bool) -> list[str]:
    """Delete the checkpoints of each role older than its `keep` newest as of iteration k; returns the
    deleted folders (relative to the run). Idempotent: an already pruned folder is skipped."""
    if keep < 1:
        raise ValueError(f"keep must be >= 1 (the next iteration starts from the newest), got {keep}")
    removed = []
    for role in ROLES:
        current = paths.model_dir(k + 1, role).resolve()
        for iteration, model in _trained_checkpoints(paths, k, role)[keep:]:
            if not model.is_dir() or model.resolve() == current:
                continue
            how = (f"the run's DVC cache or remote holds it: `rla eval --run {paths.root} --iteration {iteration}` "
                   f"brings it back, as does `dvc pull {model.name}.dvc` in this folder"
                   if versioned else "it was not versioned (versioning.dvc: false): it is gone")
            write_text(model.parent / PRUNED, f"{model.name}/ deleted after iteration {k} by run.keep_checkpoints="
                       f"{keep}; {how}\n")
            shutil.rmtree(model)
            removed.append(paths.rel(model))
    return removed


def is_pruned(model: Path) -> bool:
    return not model.is_dir() and (model.parent / PRUNED).is_file()


def bring_back(paths: RunPaths, model: Path) -> Path:
    """A pruned checkpoint folder restored from DVC (cache or remote); MissingFile when it was not versioned.
    A folder that is there is returned as it is."""
    if model.is_dir():
        return model
    from tasks.storage.versioning import restore

    if not model.with_name(model.name + ".dvc").is_file():
        note = (model.parent / PRUNED).read_text().strip() if is_pruned(model) else "missing"
        raise MissingFile(f"{paths.rel(model)}: {note}")
    restore(paths.root, model)
    (model.parent / PRUNED).unlink(missing_ok=True)
    return model
