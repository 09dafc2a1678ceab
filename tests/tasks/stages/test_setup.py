"""The seed stage with shipped data: held-out tasks from a file, reserved games never trained on (by game
content, not id), the judge benchmark copied into the run, bad task files named by file and line."""
from __future__ import annotations

import json
import random

import pytest

from rla_core.adaptation.store import TaskStore
from rla_core.config import PROJECT_ROOT, config_to_yaml, load_config
from rla_core.envs.base import SpecError
from rla_core.envs.household import HOUSEHOLD
from rla_core.judge.benchmark import BenchmarkStep
from rla_core.schemas import Task
from tasks.paths import RunPaths
from rla_core.bootstrap import generate_tasks
from tasks.settings.episodic import demo_tasks, demo_walks
from tasks.stages.setup import seed
from tasks.storage.files import read_json, read_records, write_records

KNOBS = {"goal_type": "put", "rooms": 1, "distractors": 0, "closed": 0}


def run_folder(tmp_path, **sets):
    overrides = [f"environment.knobs={json.dumps(KNOBS)}", "environment.train_slots=12", *(f"{k}={v}" for k, v in sets.items())]
    cfg = load_config(None, overrides)
    paths = RunPaths.of(tmp_path / "run")
    paths.root.mkdir(parents=True)
    paths.config.write_text(config_to_yaml(cfg))
    return paths


def test_heldout_file_and_reserved_games_are_never_in_the_seed_store(tmp_path):
    heldout = generate_tasks(HOUSEHOLD, KNOBS, 30, random.Random("h"), "heldout", set(), 12)
    dev = generate_tasks(HOUSEHOLD, KNOBS, 20, random.Random("d"), "dev", set(), 12)
    # the same games as some seed slots would be, under other ids and seed fields: a clash by content only
    clones = generate_tasks(HOUSEHOLD, KNOBS, 12, random.Random("0/train"), "x", set(), 12)
    dev += [t.model_copy(update={"task_id": f"clone{i}", "spec": {**t.spec, "seed": 99}}) for i, t in enumerate(clones)]
    write_records(tmp_path / "heldout.jsonl", heldout)
    write_records(tmp_path / "dev.jsonl", dev)
    bench = [BenchmarkStep(step_id="random/t/0/0", task_id="t", source="random", goal="g", observation="o",
                           response=" \\boxed{1}", action="look", next_observation="o", good=False, success=False)]
    write_records(tmp_path / "bench.jsonl", bench)
    paths = run_folder(tmp_path, **{"environment.heldout_file": tmp_path / "heldout.jsonl",
                                    "environment.reserved_files": f"[{tmp_path / 'dev.jsonl'}]",
                                    "eval.judge_benchmark": tmp_path / "bench.jsonl"})
    summary = seed.run_here(str(paths.root))
    assert (summary["train"], summary["heldout"]) == (12, 30)
    assert read_records(paths.heldout, Task) == heldout
    assert read_records(paths.judge_benchmark, BenchmarkStep) == bench
    reserved = set(read_json(paths.reserved))
    assert reserved == {HOUSEHOLD.content_hash(t.spec) for t in heldout + dev}
    seeded = {HOUSEHOLD.content_hash(t.spec) for t in TaskStore.load(paths.seed_store).active_tasks()}
    assert len(seeded) == 12 and not seeded & reserved
    unreserved = generate_tasks(HOUSEHOLD, KNOBS, 12, random.Random("0/train"), "slot", set(), 12)
    assert {HOUSEHOLD.content_hash(t.spec) for t in unreserved} & reserved  # the clones did bite


def test_dev_split_is_copied_into_the_run_and_reserved(tmp_path):
    """eval.dev_file and eval.dev_judge_benchmark land in seed/ (what every evaluation scores as dev/*); the
    dev games are reserved even when environment.reserved_files does not name them."""
    dev = generate_tasks(HOUSEHOLD, KNOBS, 12, random.Random("0/train"), "dev", set(), 12)  # the slots' own games
    write_records(tmp_path / "dev.jsonl", dev)
    bench = [BenchmarkStep(step_id="oracle/d/0/0", task_id="d", source="oracle", goal="g", observation="o",
                           response=" \\boxed{1}", action="look", next_observation="o", good=True, success=True)]
    write_records(tmp_path / "bench_dev.jsonl", bench)
    paths = run_folder(tmp_path, **{"eval.dev_file": tmp_path / "dev.jsonl",
                                    "eval.dev_judge_benchmark": tmp_path / "bench_dev.jsonl"})
    summary = seed.run_here(str(paths.root))
    assert summary["dev"] == 12 and read_records(paths.dev, Task) == dev
    assert read_records(paths.judge_benchmark_dev, BenchmarkStep) == bench
    dev_games = {HOUSEHOLD.content_hash(t.spec) for t in dev}
    assert dev_games <= set(read_json(paths.reserved))
    seeded = {HOUSEHOLD.content_hash(t.spec) for t in TaskStore.load(paths.seed_store).active_tasks()}
    assert len(seeded) == 12 and not seeded & dev_games
    plain = run_folder(tmp_path / "plain")  # no dev split: nothing copied
    assert seed.run_here(str(plain.root))["dev"] == 0 and not plain.dev.exists() and not plain.judge_benchmark_dev.exists()


def test_a_bad_task_file_is_named_with_its_line(tmp_path):
    tasks = generate_tasks(HOUSEHOLD, KNOBS, 3, random.Random("h"), "heldout", set(), 12)
    broken = tasks[1].model_copy(update={"spec": {**tasks[1].spec, "start_room": "attic"}})
    write_records(tmp_path / "heldout.jsonl", [tasks[0], broken, tasks[2]])
    paths = run_folder(tmp_path, **{"environment.heldout_file": tmp_path / "heldout.jsonl"})
    with pytest.raises(SpecError, match=r"heldout\.jsonl:2: task heldout0001.*start_room 'attic'"):
        seed.run_here(str(paths.root))
    missing = run_folder(tmp_path / "m", **{"environment.heldout_file": tmp_path / "nope.jsonl"})
    with pytest.raises(FileNotFoundError, match="nope.jsonl"):
        seed.run_here(str(missing.root))


def test_shipped_data_is_what_its_manifest_says():
    """data/household is versioned data: the files, their counts and their checksums agree."""
    import hashlib

    folder = PROJECT_ROOT / "data" / "household"
    manifest = json.loads((folder / "MANIFEST.json").read_text())
    for entry in manifest["files"].values():
        path = folder / entry["file"]
        assert hashlib.sha256(path.read_bytes()).hexdigest() == entry["sha256"], path
    heldout = read_records(folder / "heldout.jsonl", Task)
    dev = read_records(folder / "dev.jsonl", Task)
    assert (len(heldout), len(dev)) == (400, 200)
    assert not {HOUSEHOLD.content_hash(t.spec) for t in heldout} & {HOUSEHOLD.content_hash(t.spec) for t in dev}
    bench = read_records(folder / "judge_benchmark.jsonl", BenchmarkStep)
    assert {s.task_id for s in bench} <= {t.task_id for t in heldout}
    for source in ("warmstart", "random", "oracle"):
        mine = [s for s in bench if s.source == source]
        assert sum(s.good for s in mine) == sum(not s.good for s in mine) > 0  # balanced per policy


def test_exclude_train_games_keeps_the_warm_start_off_the_slots_games(tmp_path):
    paths = run_folder(tmp_path, **{"bootstrap.exclude_train_games": "true"})
    seed.run_here(str(paths.root))
    cfg = load_config([paths.config])
    free = demo_tasks(cfg, paths, 12, random.Random("0/demos"))
    # slots that hold half of the games the demonstrations would otherwise be drawn on (as a shared pool makes them)
    TaskStore.from_seed(free[::2]).save(paths.seed_store)
    slots = {HOUSEHOLD.content_hash(t.spec) for t in free[::2]}
    apart = demo_tasks(cfg, paths, 12, random.Random("0/demos"), exclude_slots=True)
    apart_games = {HOUSEHOLD.content_hash(t.spec) for t in apart}
    assert len(apart_games) == 12 and not apart_games & (slots | set(read_json(paths.reserved)))
    assert [t.spec for t in apart[:6]] == [t.spec for t in free[1::2]]  # the other draws are kept, in order
    walks = demo_walks(cfg, paths, 12, 0.0, "demos", exclude_slots=True)
    assert [w[0].goal for w in walks] == [HOUSEHOLD.make(t.spec).goal for t in apart]
