"""One way to declare a stage: `@stage(...)` on its body.

A stage has one name, its function's: the same string names its folder, its Prefect task and its
timer metric (`time/<name>_s`) and its peak-memory metric (`memory/<name>_peak_rss_gib`: tasks/resources.py). Its retries and timeout are in the declaration. Calling the declared
stage with (run_dir, iteration) runs it as a Prefect task that

  1. fetches, from the object store, the completed outputs this machine lacks (storage.backend=s3);
  2. returns the stored summary (with "resumed": True) when the stage's `_DONE` marker exists;
  3. otherwise empties what an interrupted attempt left in the folder, runs the body as
     `body(paths, cfg, iteration, out_dir)`, times it, writes `_DONE` with the body's summary last (typed
     by the stage's summary class, its metrics prefixed with the stage's name: tasks/summaries.py), and
     uploads the folder. A crash anywhere (tasks/checks/faults.py injects them in tests) leaves a folder without
     `_DONE`, which the next attempt redoes from scratch: the same inputs and seeds give the same bytes.

Iteration stages write `iterations/iter_k/<name>/`; run stages (seed, warm-start, baseline, the
evaluation of a checkpoint) write the folder named in their declaration.
"""
from __future__ import annotations

import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Literal

import torch
from prefect import Task, task
from prefect.cache_policies import NO_CACHE

from rla_core.config import Config
from tasks.checks import faults
from tasks.common import bind_environment
from tasks.resources import peak_rss_gib, reset_peak_rss
from tasks.storage.object_store import open_store
from tasks.paths import RunPaths, run_config
from tasks.storage.files import done_summary, is_done, mark_done
from tasks.summaries import StageSummary, migrate, parse_summary, prefixed

Body = Callable[[RunPaths, Config, int, Path], dict]


@dataclass(frozen=True, eq=False)
class Stage:
    name: str
    body: Body
    scope: Literal["iteration", "run"] = "iteration"
    folder: str | None = None  # run stages: the folder under the run root ("{k}" = the iteration argument)
    retries: int = 0
    retry_delay_s: float = 0.0
    timeout_s: float | None = None
    # bookkeeping, not model or environment work (its seconds count as orchestration overhead)
    bookkeeping: bool = False
    # later iterations read this stage's latest folder (the task store, the models): fetched with them
    carried: bool = False
    # what the stage leaves for the stages after it: (file, record type, at least one record) — checked
    # by the preflight before a run resumes
    records: tuple[tuple[str, type, bool], ...] = ()
    # the class of what the body returns (tasks/summaries.py); metric names get the prefix `<name>/`
    # unless the stage is an evaluation (`prefix_metrics=False`: names start with a split)
    summary: type[StageSummary] = StageSummary
    prefix_metrics: bool = True
    task: Task = field(init=False, repr=False)

    def __post_init__(self) -> None:
        if (self.scope == "run") != (self.folder is not None):
            raise ValueError(f"stage {self.name}: a run stage names its folder, an iteration stage does not")

        def entry(run_dir: str, iteration: int = 0) -> dict:
            return self.run_here(run_dir, iteration)

        entry.__name__ = entry.__qualname__ = self.name  # Prefect's task key: one per stage
        entry.__doc__ = self.body.__doc__
        object.__setattr__(self, "task", task(entry, name=self.name, retries=self.retries,
                                              retry_delay_seconds=self.retry_delay_s, timeout_seconds=self.timeout_s,
                                              cache_policy=NO_CACHE, persist_result=False))

    def __call__(self, run_dir: str, iteration: int = 0) -> dict:
        """Run as a Prefect task (inside a flow: a task run named after the stage)."""
        return self.task(run_dir, iteration)

    def out_dir(self, paths: RunPaths, iteration: int = 0) -> Path:
        if self.scope == "run":
            return paths.root / self.folder.format(k=iteration)
        return paths.stage(iteration, self.name)

    def read(self, paths: RunPaths, iteration: int = 0) -> StageSummary:
        """The typed summary of this stage's completed folder (any age: tasks/summaries.py migrates)."""
        return parse_summary(self.name, done_summary(self.out_dir(paths, iteration)), self.summary)

    def parse(self, raw: dict) -> StageSummary:
        """A call's returned summary, typed."""
        return parse_summary(self.name, raw, self.summary)

    def run_here(self, run_dir: str, iteration: int = 0) -> dict:
        """Skip when done, else run, time, mark and publish the body (the steps in the module doc)."""
        paths, cfg = RunPaths.of(run_dir), run_config(run_dir)
        bind_environment(cfg, paths.root)
        out = self.out_dir(paths, iteration)
        store = open_store(cfg, paths.root)
        if self.scope == "iteration":
            store.hydrate(iteration)  # this iteration's inputs and the stores/models it starts from
        elif not is_done(out):
            store.pull_dir(out)
        if is_done(out):  # and in the store: an upload that failed after _DONE is sent now
            store.ensure_pushed(out, paths.iteration(iteration) if self.scope == "iteration" else None)
            return {**migrate(self.name, done_summary(out)), "resumed": True}
        if self.scope == "iteration" and cfg.run.torch_threads:
            torch.set_num_threads(cfg.run.torch_threads)
        # bit-identical re-runs: a multi-threaded CPU backward accumulates in a varying order otherwise
        torch.use_deterministic_algorithms(cfg.run.deterministic, warn_only=True)
        faults.point(self.name, "before", iteration)
        if out.exists():  # what an interrupted attempt left (no _DONE): start clean, so a re-run is identical
            shutil.rmtree(out)
        out.mkdir(parents=True)
        start, measured = time.perf_counter(), reset_peak_rss()
        with faults.inside(self.name, iteration):
            raw = self.body(paths, cfg, iteration, out)
        raw = {**raw, "metrics": prefixed(self.name, raw.get("metrics", {}), self.prefix_metrics)}
        summary = self.summary.model_validate({**raw, "seconds": time.perf_counter() - start,
                                               "peak_rss_gib": peak_rss_gib() if measured else None}).stored()
        mark_done(out, summary)
        faults.point(self.name, "after", iteration)
        if self.scope == "iteration":
            store.push_dir(out, run_files_under=paths.iteration(iteration))  # COMPLETE, *.dvc too
        else:
            store.push_dir(out)
        return summary


def stage(*, scope: Literal["iteration", "run"] = "iteration", folder: str | None = None, retries: int = 0,
          retry_delay_s: float = 0.0, timeout_s: float | None = None, bookkeeping: bool = False,
          carried: bool = False, records: tuple[tuple[str, type, bool], ...] = (),
          summary: type[StageSummary] = StageSummary, prefix_metrics: bool = True) -> Callable[[Body], Stage]:
    """Declare the decorated body as a stage named after the function (see the module doc and the
    fields of Stage)."""
    def declare(body: Body) -> Stage:
        return Stage(body.__name__, body, scope, folder, retries, retry_delay_s, timeout_s, bookkeeping, carried,
                     records, summary, prefix_metrics)

    return declare
