"""S3 storage (tasks/storage/object_store.py) against a local moto S3 server: the store's primitives, then a
micro training run whose stage outputs, DVC remote and MLflow artifacts all live in the bucket, and
a resume from an empty local folder that downloads completed stages instead of recomputing them."""
from __future__ import annotations

import hashlib
import importlib.util
import os
import shutil
import socket
import subprocess
import sys
import time
import types
import urllib.request
from pathlib import Path

import pytest
from prefect.testing.utilities import prefect_test_harness

from rla_core.config import StorageConfig, load_config
from tasks.storage.object_store import S3Store, StorageError, needed_folders, s3_client
from tasks.paths import RunPaths
from tasks.storage.files import DONE_MARKER, mark_done


def _micro_overrides() -> list[str]:
    """MICRO of the end-to-end test (one definition of the micro run sizes)."""
    spec = importlib.util.spec_from_file_location("_flows_conftest", Path(__file__).parents[2] / "flows" / "conftest.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return list(module.MICRO)


MICRO = _micro_overrides()
BUCKET = "rla-test"
AWS_ENV = {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing", "AWS_DEFAULT_REGION": "us-east-1"}


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture(scope="module")
def endpoint():
    """A moto S3 server on 127.0.0.1 (subprocess, stopped by PID) with fake credentials in the env."""
    saved = {key: os.environ.get(key) for key in [*AWS_ENV, "MLFLOW_S3_ENDPOINT_URL", "AWS_PROFILE"]}
    os.environ.update(AWS_ENV)
    os.environ.pop("AWS_PROFILE", None)
    port = _free_port()
    url = f"http://127.0.0.1:{port}"
    server = subprocess.Popen([sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                urllib.request.urlopen(f"{url}/moto-api/", timeout=1)
                break
            except OSError:
                if time.monotonic() > deadline or server.poll() is not None:
                    raise RuntimeError(f"moto server did not start on {url}") from None
                time.sleep(0.2)
        s3_client(url, None).create_bucket(Bucket=BUCKET)
        yield url
    finally:
        server.terminate()
        try:
            server.wait(timeout=10)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


def _store(root: Path, endpoint: str, prefix: str = "unit", bucket: str = BUCKET) -> S3Store:
    return S3Store(root.resolve(), StorageConfig(backend="s3", bucket=bucket, prefix=prefix, endpoint_url=endpoint),
                   "run")


def _stage(root: Path) -> Path:
    folder = root / "iterations" / "iter_0001" / "rollout"
    (folder / "sub").mkdir(parents=True)
    (folder / "trajectories.jsonl").write_text('{"a": 1}\n')
    (folder / "sub" / "weights.bin").write_bytes(bytes(range(256)) * 8)
    (folder / ".half.tmp").write_text("a temp file is never uploaded")
    mark_done(folder, {"seconds": 1.5})
    return folder


def _tree(folder: Path) -> dict[str, bytes]:
    return {p.relative_to(folder).as_posix(): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


# ---------------------------------------------------------------- the store
def test_push_list_exists_and_pull_into_an_empty_folder(endpoint, tmp_path):
    store = _store(tmp_path / "a", endpoint, prefix="roundtrip")
    folder = _stage(tmp_path / "a")
    assert store.push_dir(folder) == 3
    rel = "iterations/iter_0001/rollout"
    assert store.listing(rel) == {f"{rel}/trajectories.jsonl": 9, f"{rel}/sub/weights.bin": 2048,
                                  f"{rel}/{DONE_MARKER}": (folder / DONE_MARKER).stat().st_size}
    assert store.exists(f"{rel}/{DONE_MARKER}") and not store.exists(f"{rel}/.half.tmp")

    other = _store(tmp_path / "b", endpoint, prefix="roundtrip")
    assert other.pull_dir(tmp_path / "b" / rel)
    expected = {k: v for k, v in _tree(folder).items() if not k.startswith(".")}
    assert _tree(tmp_path / "b" / rel) == expected


def test_marker_is_uploaded_last_after_the_run_files(endpoint, tmp_path, monkeypatch):
    root = tmp_path / "run"
    store = _store(root, endpoint, prefix="order")
    folder = _stage(root)
    (folder.parent / "COMPLETE").write_text("abc\n")
    (folder.parent / "data.dvc").write_text("outs: []\n")
    sent: list[str] = []
    original = store.upload

    def recorded(path):
        sent.append(store.key(path).split("/", 2)[2])  # key without "order/run/"
        original(path)

    monkeypatch.setattr(store, "upload", recorded)
    store.push_dir(folder, run_files_under=folder.parent)
    assert sent[-1] == f"iterations/iter_0001/rollout/{DONE_MARKER}"
    assert set(sent[-3:-1]) == {"iterations/iter_0001/COMPLETE", "iterations/iter_0001/data.dvc"}
    assert len(sent) == 5


def test_a_folder_without_its_marker_in_s3_is_not_pulled(endpoint, tmp_path):
    store = _store(tmp_path / "a", endpoint, prefix="partial")
    folder = _stage(tmp_path / "a")
    store.upload(folder / "trajectories.jsonl")  # an upload interrupted before the marker
    other = _store(tmp_path / "b", endpoint, prefix="partial")
    assert not other.pull_dir(tmp_path / "b" / "iterations" / "iter_0001" / "rollout")
    assert not (tmp_path / "b" / "iterations").exists()
    assert other.hydrate(1) == 0


def test_missing_bucket_and_unreachable_endpoint_fail_in_one_line(endpoint, tmp_path):
    with pytest.raises(StorageError) as missing:
        _store(tmp_path, endpoint, bucket="no-such-bucket").check()
    assert "no-such-bucket" in str(missing.value) and endpoint in str(missing.value)
    assert "\n" not in str(missing.value)
    closed = f"http://127.0.0.1:{_free_port()}"
    with pytest.raises(StorageError, match=f"'{BUCKET}'.*{closed}"):
        _store(tmp_path, closed).check()


def test_needed_folders_keep_only_what_the_iteration_reads():
    done = ["seed", "models/bootstrap", "eval/iter_0001"] + [
        f"iterations/iter_{k:04d}/{stage}" for k in (1, 2, 3) for stage in ("rollout", "adapt", "train_policy",
                                                                              "train_judge")]
    done.append("iterations/iter_0004/select")
    remote = {f"{folder}/{DONE_MARKER}": 2 for folder in done}
    summaries = {"iterations/iter_0003/train_policy": {"model_dir": "iterations/iter_0003/train_policy/model"},
                 # not trained at iteration 3: the judge model is still the one of iteration 1
                 "iterations/iter_0003/train_judge": {"model_dir": "iterations/iter_0001/train_judge/model"}}
    chosen = needed_folders(remote, 4, summaries.__getitem__)
    assert sorted(chosen) == sorted(["seed", "models/bootstrap", "eval/iter_0001", "iterations/iter_0004/select",
                                     "iterations/iter_0003/adapt", "iterations/iter_0003/train_policy",
                                     "iterations/iter_0003/train_judge", "iterations/iter_0001/train_judge"])
    assert needed_folders(remote, None, summaries.__getitem__) == ["eval/iter_0001", "models/bootstrap", "seed"]


def test_training_with_a_missing_bucket_fails_before_any_work(endpoint, tmp_path):
    from flows.train import prepare_run_dir

    cfg = load_config(None, [f"run.output_dir={tmp_path}", "run.name=nobucket", "storage.backend=s3",
                             "storage.bucket=missing-bucket", f"storage.endpoint_url={endpoint}"])
    with pytest.raises(StorageError, match="missing-bucket"):
        prepare_run_dir(cfg)
    assert not (tmp_path / "nobucket").exists()


# ---------------------------------------------------------------- a micro run on S3
def _overrides(endpoint: str, output_dir: Path) -> list[str]:
    # A shorter warm-start than MICRO's (most of its time): this file tests storage, not learning.
    return MICRO + ["bootstrap.policy_steps=30", "bootstrap.judge_steps=15",
                    f"run.output_dir={output_dir}", "run.name=s3micro", "storage.backend=s3",
                    f"storage.bucket={BUCKET}", "storage.prefix=runs", f"storage.endpoint_url={endpoint}",
                    f"tracking.artifact_location=s3://{BUCKET}/mlflow", f"versioning.remote=s3://{BUCKET}/dvc"]


def _keys(endpoint: str, prefix: str) -> list[str]:
    pages = s3_client(endpoint, None).get_paginator("list_objects_v2").paginate(Bucket=BUCKET, Prefix=prefix)
    return [item["Key"] for page in pages for item in page.get("Contents", [])]


def _md5(path: Path) -> str:
    return hashlib.md5(path.read_bytes()).hexdigest()


@pytest.fixture(scope="module")
def s3_run(endpoint, tmp_path_factory):
    from flows.train import train

    with prefect_test_harness(server_startup_timeout=120):
        result = train(None, _overrides(endpoint, tmp_path_factory.mktemp("machine_a")))
        yield RunPaths.of(result["run_dir"])


def test_stage_outputs_and_run_files_are_in_the_bucket(s3_run, endpoint):
    keys = set(_keys(endpoint, "runs/s3micro/"))
    from flows.rl_iteration import ITERATION

    for stage in ITERATION:
        assert f"runs/s3micro/iterations/iter_0001/{stage.name}/{DONE_MARKER}" in keys, stage.name
    for folder in ("seed", "models/init", "models/bootstrap", "baseline"):
        assert f"runs/s3micro/{folder}/{DONE_MARKER}" in keys, folder
    run_files = ("config.yaml", "mlflow_run_id.txt", "iterations/iter_0001/COMPLETE",
                 "iterations/iter_0001/adapt/store.dvc", "iterations/iter_0001/data.dvc")
    assert {f"runs/s3micro/{name}" for name in run_files} <= keys
    weights = next(p for p in (s3_run.bootstrap / "policy").iterdir() if p.suffix == ".safetensors")
    remote = s3_client(endpoint, None).get_object(Bucket=BUCKET, Key=f"runs/s3micro/{s3_run.rel(weights)}")
    assert hashlib.md5(remote["Body"].read()).hexdigest() == _md5(weights)


def test_mlflow_artifacts_land_in_the_bucket(s3_run, endpoint):
    keys = _keys(endpoint, "mlflow/")
    assert any(key.endswith("/artifacts/config.yaml") for key in keys), keys[:10]
    assert any(key.endswith("/artifacts/gates/report.json") for key in keys)  # an iteration run's artifact
    assert any(key.endswith("/artifacts/samples/trajectories.txt") for key in keys)
    assert not (s3_run.root / "mlartifacts").exists()


def test_dvc_pushes_to_s3_and_pulls_back_identical_files(s3_run, endpoint):
    from tasks.storage.versioning import restore, tracked_hashes

    store = s3_run.stage(1, "adapt") / "store"
    before = {p.name: _md5(p) for p in store.iterdir()}
    hashes = tracked_hashes(s3_run.root, [store])
    assert any(key.startswith("dvc/files/md5/") for key in _keys(endpoint, "dvc/"))
    shutil.rmtree(s3_run.root / ".dvc" / "cache")  # nothing left locally: objects must come from S3
    shutil.rmtree(store)
    restore(s3_run.root, store)
    assert {p.name: _md5(p) for p in store.iterdir()} == before
    assert tracked_hashes(s3_run.root, [store]) == hashes


def test_resume_from_an_empty_folder_downloads_instead_of_recomputing(s3_run, endpoint, tmp_path, monkeypatch):
    from flows.train import prepare_run_dir, train
    from tasks.stages import iteration, training
    from tasks.settings import episodic

    def recomputed(*args, **kwargs):
        raise AssertionError("a completed stage was recomputed instead of downloaded")

    for owner, name in ((episodic, "supervised_finetune"), (episodic.EpisodicSetting, "evaluate_models"),
                        (episodic, "rollout_tasks"), (training, "get_trainer")):
        monkeypatch.setattr(owner, name, recomputed)
    overrides = _overrides(endpoint, tmp_path)
    # A stage of a completed iteration, asked for on a machine that has only the config.
    run_dir = prepare_run_dir(load_config(None, overrides))
    fresh = RunPaths.of(run_dir)
    shutil.rmtree(fresh.iteration(1))
    summary = iteration.rollout.run_here(run_dir, 1)
    assert summary["resumed"]
    for rel in ("iterations/iter_0001/rollout/trajectories.jsonl", "models/bootstrap/policy/config.json"):
        assert _md5(fresh.root / rel) == _md5(s3_run.root / rel)
    # The whole training flow from an empty folder: everything is found done in S3.
    shutil.rmtree(fresh.root)
    result = train(None, overrides)  # still inside the s3_run fixture's Prefect harness
    assert result["iterations"] == {} and RunPaths.of(result["run_dir"]).is_complete(1)
    judge_config = "models/bootstrap/judge/config.json"
    assert _md5(fresh.root / judge_config) == _md5(s3_run.root / judge_config)


# ---------------------------------------------------------------- faults
def _failing_sends(store: S3Store, operation: str, failures: int):
    """Make the next `failures` HTTP sends of `operation` fail as a dropped connection (inside botocore,
    so its own retries and ours both see a real transport error). Returns (counter, unregister)."""
    from botocore.exceptions import EndpointConnectionError

    count = {"sends": 0}

    def drop(request, **_):
        count["sends"] += 1
        if count["sends"] <= failures:
            raise EndpointConnectionError(endpoint_url=request.url)

    event = f"before-send.s3.{operation}"
    store.client.meta.events.register(event, drop)
    return count, lambda: store.client.meta.events.unregister(event, drop)


def test_transient_s3_errors_are_retried_with_backoff_and_nothing_is_lost(endpoint, tmp_path, monkeypatch):
    import tasks.storage.object_store as object_store

    waits: list[float] = []
    monkeypatch.setattr(object_store, "RETRY_DELAYS_S", (0.01, 0.02, 0.04))
    monkeypatch.setattr(object_store, "time", types.SimpleNamespace(sleep=waits.append))  # ours only
    store = _store(tmp_path / "a", endpoint, prefix="flaky")
    folder = _stage(tmp_path / "a")
    # 5 dropped sends: botocore's 3 attempts fail once (our first back-off), then 2 more fail and the 6th goes
    count, unregister = _failing_sends(store, "PutObject", failures=5)
    try:
        assert store.push_dir(folder) == 3
    finally:
        unregister()
    assert count["sends"] == 5 + 3  # the 3 files, after the 5 failures
    assert waits == [0.01]  # botocore gave up once (3 sends), we backed off once; its retries did the rest
    other = _store(tmp_path / "b", endpoint, prefix="flaky")
    assert other.pull_dir(tmp_path / "b" / "iterations" / "iter_0001" / "rollout")
    assert _tree(tmp_path / "b" / "iterations" / "iter_0001" / "rollout") == {
        k: v for k, v in _tree(folder).items() if not k.startswith(".")}


def test_s3_down_for_good_fails_in_one_line_and_the_retry_of_the_stage_uploads_it(endpoint, tmp_path, monkeypatch):
    import tasks.storage.object_store as object_store

    monkeypatch.setattr(object_store, "RETRY_DELAYS_S", (0.0, 0.0))
    monkeypatch.setattr(object_store, "time", types.SimpleNamespace(sleep=lambda s: None))
    store = _store(tmp_path / "a", endpoint, prefix="down")
    folder = _stage(tmp_path / "a")
    before = _tree(folder)
    count, unregister = _failing_sends(store, "PutObject", failures=10**6)
    try:
        with pytest.raises(StorageError) as error:
            store.push_dir(folder)
    finally:
        unregister()
    message = str(error.value)
    assert "\n" not in message and "after 3 attempts" in message and "s3://rla-test/down/run/" in message
    assert _tree(folder) == before  # nothing local was touched
    rel = "iterations/iter_0001/rollout"
    assert not store.exists(f"{rel}/{DONE_MARKER}")  # so no other machine takes it as complete
    # the store is back: the stage's next attempt finds _DONE here but not in S3, and uploads the folder
    assert store.ensure_pushed(folder) == 3
    assert store.exists(f"{rel}/{DONE_MARKER}")
    assert store.ensure_pushed(folder) == 0


def test_forbidden_is_not_retried(endpoint, tmp_path, monkeypatch):
    import tasks.storage.object_store as object_store
    from botocore.exceptions import ClientError

    calls = []

    def forbidden():
        calls.append(1)
        raise ClientError({"Error": {"Code": "403", "Message": "Forbidden"}}, "PutObject")

    monkeypatch.setattr(object_store, "time", types.SimpleNamespace(sleep=lambda s: None))
    with pytest.raises(ClientError):
        object_store.with_retries("upload", forbidden)
    assert len(calls) == 1
