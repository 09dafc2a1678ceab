"""Run-folder layout (tasks/paths.py) and atomic stage storage (tasks/storage/files.py)."""
from __future__ import annotations

import math
import os

import pytest

from rla_core.schemas import JudgedStep, JudgeSample, Step, Task, TrainingSample, Trajectory
from rla_core import fileio
from tasks.paths import COMPLETE, RunPaths
from tasks.storage.files import (
    DONE_MARKER, done_summary, is_done, mark_done, read_json, read_records,
    write_json, write_records, write_text,
)


def listing(directory) -> list[str]:
    """Every name in `directory`, hidden ones included (a leftover temp file starts with a dot)."""
    return sorted(os.listdir(directory))


# ---------------------------------------------------------------- storage
def test_write_text_creates_parents_replaces_and_leaves_no_temp_file(tmp_path):
    path = tmp_path / "a" / "b" / "out.txt"
    assert write_text(path, "first ≤ α\n") == path
    assert path.read_text() == "first ≤ α\n"
    write_text(path, "second")
    assert path.read_text() == "second"
    assert listing(path.parent) == ["out.txt"]


def test_failed_write_keeps_the_old_file(tmp_path, monkeypatch):
    path = write_text(tmp_path / "out.txt", "old")

    def broken_replace(src, dst):
        raise OSError("disk gone")

    monkeypatch.setattr(fileio.os, "replace", broken_replace)
    with pytest.raises(OSError, match="disk gone"):
        write_text(path, "new")
    monkeypatch.undo()
    assert path.read_text() == "old"


def test_failed_write_leaves_no_temp_file(tmp_path):
    path = write_text(tmp_path / "out.txt", "old")
    with pytest.raises(TypeError):
        write_text(path, 123)  # type: ignore[arg-type]  # handle.write fails after mkstemp
    assert listing(tmp_path) == ["out.txt"]


def test_json_round_trip(tmp_path):
    data = {"b": [1, 2.5, None], "a": {"x": "y"}}
    path = write_json(tmp_path / "d.json", data)
    assert read_json(path) == data
    assert path.read_text().index('"a"') < path.read_text().index('"b"')  # sorted keys: stable diffs


def test_records_round_trip_including_infinite_advantages(tmp_path):
    samples = [
        TrainingSample(prompt_ids=[1, 2], response_ids=[3], advantage=advantage, task_id="t", sample_index=j,
                       step_index=0, judge_sample=None if j % 2 else 1)
        for j, advantage in enumerate([0.5, math.inf, -math.inf, -1.25])
    ]
    path = write_records(tmp_path / "samples.jsonl", samples)
    assert path.read_text().count("\n") == 4
    back = read_records(path, TrainingSample)
    assert back == samples
    assert back[1].advantage == math.inf and back[2].advantage == -math.inf

    nan = samples[0].model_copy(update={"advantage": math.nan})
    assert math.isnan(read_records(write_records(tmp_path / "nan.jsonl", [nan]), TrainingSample)[0].advantage)
    assert listing(tmp_path) == ["nan.jsonl", "samples.jsonl"]


def test_records_round_trip_nested_schemas_and_empty_lists(tmp_path):
    step = Step(index=0, prompt_ids=[1], response_ids=[2, 3], response_text=" \\boxed{2}", action="look",
                observation="You see — nothing.", oracle_good=True)
    trajectory = Trajectory(task_id="t", slot_id="s", sample_index=0, goal="g", initial_observation="o",
                            steps=[step], success=False)
    judged = JudgedStep(task_id="t", sample_index=0, step_index=0, oracle_good=False,
                        samples=[JudgeSample(prompt_ids=[1], response_ids=[4], text="no \\boxed{-1}", verdict=-1)])
    task = Task(task_id="t", slot_id="s", spec={"nested": {"list": [1, "two"]}}, difficulty=3.0, version=2)
    for records, kind in (([trajectory], Trajectory), ([judged], JudgedStep), ([task], Task)):
        assert read_records(write_records(tmp_path / "r.jsonl", records), kind) == records
    empty = write_records(tmp_path / "empty.jsonl", [])
    assert empty.read_text() == "" and read_records(empty, Task) == []


def test_done_marker(tmp_path):
    stage = tmp_path / "stage"
    assert not is_done(stage)
    marker = mark_done(stage, {"model_dir": "m", "metrics": {"loss": 0.5}})
    assert marker == stage / DONE_MARKER and is_done(stage)
    assert done_summary(stage) == {"model_dir": "m", "metrics": {"loss": 0.5}}
    mark_done(stage)
    assert done_summary(stage) == {}
    write_json(stage / DONE_MARKER, [1, 2])  # not a dict: read as an empty summary
    assert done_summary(stage) == {}
    (tmp_path / "dir_only" / DONE_MARKER).mkdir(parents=True)  # a folder named _DONE is not a marker
    assert not is_done(tmp_path / "dir_only")


# ---------------------------------------------------------------- paths
def test_layout(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    paths = RunPaths.of("runs/demo")
    root = tmp_path.resolve() / "runs" / "demo"
    assert paths.root == root
    assert paths.config == root / "config.yaml"
    assert paths.seed_store == root / "seed" / "store" and paths.heldout == root / "seed" / "heldout.jsonl"
    assert paths.init_models == root / "models" / "init" and paths.bootstrap == root / "models" / "bootstrap"
    assert paths.iteration(7) == root / "iterations" / "iter_0007"
    assert paths.stage(12, "train_judge") == root / "iterations" / "iter_0012" / "train_judge"
    assert paths.rel(root / "iterations" / "iter_0001" / "adapt") == "iterations/iter_0001/adapt"


def test_every_iteration_file_lives_in_the_folder_of_a_declared_stage(tmp_path):
    from flows.rl_iteration import ITERATION

    it = RunPaths.of(tmp_path).it(3)
    files = [it.tasks, it.trajectories, it.judged, it.store, it.adapt_report, it.store_diff, it.data,
             it.batch("policy"), it.batch("judge"), it.gates_report, it.model("policy"), it.model("judge"),
             it.eval_metrics]
    names = {s.name for s in ITERATION}
    assert {f.relative_to(it.root).parts[0] for f in files} <= names
    assert it.complete == RunPaths.of(tmp_path).iteration(3) / COMPLETE


def test_unknown_role_is_named(tmp_path):
    paths = RunPaths.of(tmp_path)
    with pytest.raises(KeyError, match="train_critic"):
        paths.model_dir(2, "critic")


def test_model_dir_falls_back_to_bootstrap_then_follows_train_summaries(tmp_path):
    paths = RunPaths.of(tmp_path)
    assert paths.model_dir(1, "policy") == tmp_path / "models" / "bootstrap" / "policy"
    assert paths.model_dir(3, "judge") == tmp_path / "models" / "bootstrap" / "judge"

    # the summary's "model_dir" (relative to the run root) is followed, wherever it points
    mark_done(paths.stage(1, "train_policy"), {"model_dir": "checkpoints/policy-1", "trained": True})
    paths.stage(2, "train_policy").mkdir(parents=True)  # started, never finished: skipped
    mark_done(paths.stage(3, "train_policy"), {"model_dir": "checkpoints/policy-3", "trained": True})
    assert paths.model_dir(2, "policy") == tmp_path / "checkpoints" / "policy-1"
    assert paths.model_dir(3, "policy") == tmp_path / "checkpoints" / "policy-1"
    assert paths.model_dir(4, "policy") == tmp_path / "checkpoints" / "policy-3"
    assert paths.model_dir(4, "judge") == tmp_path / "models" / "bootstrap" / "judge"  # roles are separate

    mark_done(paths.stage(1, "train_judge"), {"model_dir": "iterations/iter_0001/train_judge/model", "trained": True})
    assert paths.model_dir(2, "judge") == tmp_path / "iterations" / "iter_0001" / "train_judge" / "model"


def test_store_dir_falls_back_to_the_seed_store(tmp_path):
    paths = RunPaths.of(tmp_path)
    assert paths.store_dir(1) == tmp_path / "seed" / "store"
    assert paths.store_dir(2) == tmp_path / "seed" / "store"  # iteration 1 did not adapt yet
    paths.stage(1, "adapt").mkdir(parents=True)
    assert paths.store_dir(2) == tmp_path / "seed" / "store"  # not done: not trusted
    mark_done(paths.stage(1, "adapt"))
    assert paths.store_dir(2) == tmp_path / "iterations" / "iter_0001" / "adapt" / "store"
    mark_done(paths.stage(2, "adapt"))
    assert paths.store_dir(3) == tmp_path / "iterations" / "iter_0002" / "adapt" / "store"
    assert paths.store_dir(1) == tmp_path / "seed" / "store"  # iteration 1 always starts from the seed


def test_completed_iterations_need_the_complete_marker(tmp_path):
    paths = RunPaths.of(tmp_path)
    assert paths.completed_iterations() == []  # no iterations folder yet
    for k in (1, 2, 3, 10):
        paths.iteration(k).mkdir(parents=True)
    for k in (1, 3, 10):
        write_text(paths.iteration(k) / COMPLETE, "")
    mark_done(paths.stage(2, "commit"))  # every stage done but no COMPLETE: not complete
    (paths.root / "iterations" / "iter_0004").write_text("a file, not an iteration")
    assert paths.completed_iterations() == [1, 3, 10]  # numeric order
    assert paths.is_complete(3) and not paths.is_complete(2) and not paths.is_complete(4)


def test_object_stores_use_the_same_registry():
    from rla_core.config import load_config
    from rla_core.errors import UnknownName
    from tasks.storage.object_store import STORES, LocalStore, open_store

    assert STORES.names() == ["local", "s3"]
    assert isinstance(open_store(load_config(None, []), "/tmp/x"), LocalStore)
    with pytest.raises(UnknownName, match="storage.backend"):
        STORES.get("ftp")



def test_shared_reads_parse_a_file_once_while_it_is_unchanged(tmp_path):
    from tasks.storage import files as storage

    path = tmp_path / "tasks.jsonl"
    tasks = [Task(task_id=f"t{i}", slot_id=f"s{i}", spec={"i": i}) for i in range(3)]
    storage.write_records(path, tasks)
    first = storage.read_records_shared(path, Task)
    second = storage.read_records_shared(path, Task)
    assert first == tasks and second == tasks
    assert first is not second and all(a is b for a, b in zip(first, second))  # parsed once
    storage.write_records(path, tasks[:2])
    os.utime(path, ns=(1, 1))  # a rewrite within the same clock tick is still seen (size or time differs)
    assert storage.read_records_shared(path, Task) == tasks[:2]
    for index in range(6):  # only the last few files are kept
        other = tmp_path / f"o{index}.jsonl"
        storage.write_records(other, tasks)
        storage.read_records_shared(other, Task)
    assert len(storage._SHARED) == storage._SHARED_FILES


def test_iteration_folder_names_are_made_and_read_in_one_place():
    from tasks.paths import iteration_folder, iteration_rel, parse_iteration

    assert [iteration_folder(k) for k in (1, 42, 10000)] == ["iter_0001", "iter_0042", "iter_10000"]
    assert iteration_rel(3) == "iterations/iter_0003"
    assert [parse_iteration(iteration_folder(k)) for k in (1, 42, 10000)] == [1, 42, 10000]
    for name in ("iter_1", "iter_00001", "iter_x", "iter_", "iter_００01", "iteration_0001", "iter_0001.tmp"):
        assert parse_iteration(name) is None, name


def test_the_start_folders_are_the_start_stages_folders():
    from tasks.paths import START_FOLDERS
    from tasks.pipeline import START_STAGES

    assert tuple(s.folder for s in START_STAGES) == START_FOLDERS


def test_the_stage_properties_are_declared_on_the_stages():
    from tasks.storage.object_store import CARRIED_STAGES
    from tasks.pipeline import ITERATION

    assert tuple(s.name for s in ITERATION if s.carried) == CARRIED_STAGES
    assert {s.name: [name for name, _, _ in s.records] for s in ITERATION if s.records} == {
        "select": ["tasks.jsonl"], "rollout": ["trajectories.jsonl"], "judge": ["judged.jsonl"],
        "data": ["policy.jsonl", "judge.jsonl"]}
