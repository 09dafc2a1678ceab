"""Relocatable run folders: a copied or moved run (with its `.dvc-remote` sibling) serves and writes its
own MLflow artifacts and DVC remote, never the original's; config.yaml is logged once per run."""
from __future__ import annotations

import json
import shutil
import sqlite3
from contextlib import closing
from pathlib import Path

import pytest
import yaml
from configobj import ConfigObj
from dvc.repo import Repo

from rla_core.config import TrackingConfig, load_config
from tasks.tracking.tracker import (
    CONFIG_ARTIFACT,
    ITERATIONS_HISTORY_TAG,
    ITERATIONS_TAG,
    RUN_ID_FILE,
    Tracker,
    relocate_store,
)
from tasks.storage.versioning import init_run_repo, restore, track


def _snapshot(directory: Path) -> dict[str, bytes]:
    return {p.relative_to(directory).as_posix(): p.read_bytes() for p in sorted(directory.rglob("*")) if p.is_file()}


def _checkpoint(directory: Path, fill: int) -> Path:
    directory.mkdir(parents=True)
    (directory / "config.json").write_text(json.dumps({"hidden_size": fill}))
    (directory / "model.safetensors").write_bytes(bytes([fill]) * 512)
    return directory


def _remote_url(run_dir: Path) -> str:
    """The default remote's URL as written in `.dvc/config` (not as DVC resolves it)."""
    return ConfigObj(str(run_dir / ".dvc" / "config"))['remote "storage"']["url"]


@pytest.fixture(scope="module")
def original(tmp_path_factory) -> Path:
    """runs/demo with a default MLflow store (a registered checkpoint, an artifact) and a default DVC
    remote beside it (runs/.dvc-remote/demo) holding a tracked folder."""
    run_dir = tmp_path_factory.mktemp("site_a") / "runs" / "demo"
    tracker = Tracker(run_dir)
    tracker.log_text("first\n", "notes/first.txt")
    tracker.register_checkpoint(_checkpoint(run_dir.parent.parent / "ckpt1", 1), "rla-policy", iteration=1,
                                data_version="v1")
    data = run_dir / "data"
    data.mkdir()
    (data / "x.txt").write_text("version 1\n")
    init_run_repo(run_dir)
    track(run_dir, [data])
    return run_dir


def test_default_remote_is_relative_to_the_dvc_config(original):
    assert _remote_url(original) == "../../.dvc-remote/demo"
    with Repo(str(original)) as repo:
        assert repo.config["remote"]["storage"]["url"] == str(original.parent / ".dvc-remote" / "demo")


def test_copied_run_serves_and_writes_its_own_files(original, tmp_path):
    before = _snapshot(original.parent)  # the run folder and its .dvc-remote sibling
    copy_runs = tmp_path / "site_b" / "runs"
    shutil.copytree(original.parent, copy_runs)
    copy = copy_runs / "demo"
    copy_art = (copy / "mlartifacts").as_uri()

    tracker = Tracker(copy)
    assert tracker.run_id == (copy / RUN_ID_FILE).read_text().strip()
    assert tracker.client.get_experiment(tracker.experiment_id).artifact_location == copy_art
    assert tracker.client.get_run(tracker.run_id).info.artifact_uri.startswith(copy_art + "/")
    version = tracker.client.get_model_version("rla-policy", "1")
    assert version.source.startswith(copy_art + "/")
    with closing(sqlite3.connect(copy / "mlflow.db")) as db:  # not in the client's ModelVersion
        locations = [row[0] for row in db.execute("SELECT storage_location FROM model_versions")]
    assert locations and all(location.startswith(copy_art + "/") for location in locations)
    assert relocate_store(copy) == {}  # once rebased, a reopen changes nothing

    # serving the copy reads the copy's files: edit the copy's artifact, the download follows
    served = Path(copy / "mlartifacts" / version.source.removeprefix(copy_art + "/"))
    (served / "config.json").write_text('{"hidden_size": 99}')
    got = tracker.download_checkpoint("rla-policy", "1", tmp_path / "served")
    assert (got / "config.json").read_text() == '{"hidden_size": 99}'

    # new MLflow writes land in the copy
    tracker.log_text("second\n", "notes/second.txt")
    info = tracker.register_checkpoint(_checkpoint(tmp_path / "ckpt2", 2), "rla-policy", iteration=2,
                                       data_version="v2")
    assert info["source"].startswith(copy_art + "/")
    assert list(copy.joinpath("mlartifacts").rglob("second.txt"))
    assert (copy / "mlartifacts" / info["source"].removeprefix(copy_art + "/") / "model.safetensors").is_file()

    # DVC: the copy pushes to its own remote and restores from it
    init_run_repo(copy)
    assert _remote_url(copy) == "../../.dvc-remote/demo"
    (copy / "data" / "x.txt").write_text("version 2 (copy)\n")
    track(copy, [copy / "data"])
    assert any(p.is_file() for p in (copy_runs / ".dvc-remote" / "demo").rglob("*"))

    site = original.parent.parent
    away = site.with_name(site.name + "_away")
    site.rename(away)  # the original out of reach: the copy restores from its own remote
    try:
        shutil.rmtree(copy / "data")
        shutil.rmtree(copy / ".dvc" / "cache")
        restore(copy, "data")
        assert (copy / "data" / "x.txt").read_text() == "version 2 (copy)\n"
        assert Tracker(copy).download_checkpoint("rla-policy", "2", tmp_path / "served2").is_dir()
        assert not site.exists()  # nothing recreated at the original's place
    finally:
        away.rename(site)
    assert _snapshot(original.parent) == before  # the original's files byte-identical, remote included


def test_moved_run_and_old_absolute_remote(tmp_path):
    """A run folder moved with its remote, written by an older version (absolute DVC remote URL)."""
    runs = tmp_path / "old" / "runs"
    run_dir = runs / "demo"
    tracker = Tracker(run_dir)
    tracker.register_checkpoint(_checkpoint(tmp_path / "ckpt", 3), "rla-judge", iteration=1, data_version="v")
    (run_dir / "data").mkdir()
    (run_dir / "data" / "y.txt").write_text("y\n")
    init_run_repo(run_dir)
    with Repo(str(run_dir)) as repo, repo.config.edit() as conf:  # what older versions wrote
        conf["remote"]["storage"]["url"] = str(runs / ".dvc-remote" / "demo")
    assert _remote_url(run_dir) == str(runs / ".dvc-remote" / "demo")
    track(run_dir, ["data"])

    moved_runs = tmp_path / "new" / "runs"
    moved_runs.parent.mkdir()
    shutil.move(str(runs), str(moved_runs))
    moved = moved_runs / "demo"
    init_run_repo(moved)  # the absolute default becomes relative, to the moved remote
    assert _remote_url(moved) == "../../.dvc-remote/demo"
    shutil.rmtree(moved / "data")
    shutil.rmtree(moved / ".dvc" / "cache")
    restore(moved, "data")
    assert (moved / "data" / "y.txt").read_text() == "y\n"

    tracker = Tracker(moved)
    got = tracker.download_checkpoint("rla-judge", "1", tmp_path / "served")
    assert (got / "model.safetensors").read_bytes() == bytes([3]) * 512
    assert not (tmp_path / "old" / "runs").exists()  # nothing recreated at the old place


def test_user_given_remote_and_tracking_uri_stay(tmp_path, original):
    run_dir = tmp_path / "runs" / "given"
    init_run_repo(run_dir, "s3://bucket/prefix")
    assert _remote_url(run_dir) == "s3://bucket/prefix"
    elsewhere = tmp_path / "remote"
    init_run_repo(run_dir, str(elsewhere))
    assert _remote_url(run_dir) == str(elsewhere)

    # a copy opened through an explicit tracking URI keeps the store's URIs as they are
    copy = tmp_path / "copy" / "demo"
    shutil.copytree(original, copy)
    given = Tracker(copy, TrackingConfig(mlflow_uri=f"sqlite:///{copy / 'mlflow.db'}"))
    location = given.client.get_experiment(given.experiment_id).artifact_location
    assert location == (original / "mlartifacts").as_uri()
    assert Tracker(copy, TrackingConfig(artifact_location=str(tmp_path / "art"))).client.get_experiment(
        given.experiment_id).artifact_location == location


def test_config_logged_once_and_iterations_changes_recorded(tmp_path):
    from flows.train import prepare_run_dir
    from tasks.tracking.run_log import open_training_run

    def config(iterations: int):
        return load_config(overrides=[f"run.output_dir={tmp_path}", "run.name=cfg", f"run.iterations={iterations}"])

    run_dir = Path(prepare_run_dir(config(2)))
    open_training_run.fn(str(run_dir))
    stat = (run_dir / "config.yaml").stat()
    prepare_run_dir(config(2))  # nothing changed: the file is not rewritten
    assert (run_dir / "config.yaml").stat().st_mtime_ns == stat.st_mtime_ns
    assert (run_dir / "config.yaml").stat().st_ino == stat.st_ino
    open_training_run.fn(str(run_dir))

    prepare_run_dir(config(4))  # extended: the run's config.yaml holds the current run.iterations
    assert load_config([run_dir / "config.yaml"]).run.iterations == 4
    open_training_run.fn(str(run_dir))
    open_training_run.fn(str(run_dir))

    tracker = Tracker(run_dir, run_name="cfg")
    logged = tracker.client.download_artifacts(tracker.run_id, CONFIG_ARTIFACT, str(tmp_path / "dl"))
    assert yaml.safe_load(Path(logged).read_text())["run"]["iterations"] == 2  # the first config, logged once
    artifacts = [a.path for a in tracker.client.list_artifacts(tracker.run_id)]
    assert artifacts.count(CONFIG_ARTIFACT) == 1
    run = tracker.client.get_run(tracker.run_id)
    assert run.data.params["run.iterations"] == "2"
    assert run.data.tags[ITERATIONS_TAG] == "4"
    assert run.data.tags["override.run.iterations"] == "4"
    history = json.loads(run.data.tags[ITERATIONS_HISTORY_TAG])
    assert [entry["iterations"] for entry in history] == [2, 4]
    assert all(entry["time"].endswith("Z") for entry in history)
