"""DVC versioning of a run folder that sits inside a git repo with its own DVC project at the root."""
from __future__ import annotations

import hashlib
import shutil
import subprocess
from pathlib import Path

import pytest
from dvc.repo import Repo

from rla_core.config import Config
from tasks.storage import versioning
from tasks.storage.versioning import (
    config_hash,
    data_version,
    default_remote,
    git_state,
    init_run_repo,
    restore,
    track,
    tracked_file_hash,
    tracked_hashes,
)


def _snapshot(directory: Path) -> dict[str, bytes]:
    return {p.relative_to(directory).as_posix(): p.read_bytes() for p in sorted(directory.rglob("*")) if p.is_file()}


@pytest.fixture()
def project(tmp_path) -> Path:
    """A git repo with a DVC project at its root and runs/ gitignored, like the real checkout."""
    root = tmp_path / "project"
    root.mkdir()
    subprocess.run(["git", "init", "-q", str(root)], check=True)
    (root / ".gitignore").write_text("runs/\n")
    Repo.init(str(root)).close()
    return root


@pytest.fixture()
def run_dir(project) -> Path:
    run = project / "runs" / "demo"
    store = run / "iterations" / "iter_0001" / "adapt" / "store"
    store.mkdir(parents=True)
    for i in range(3):
        (store / f"slot_{i}.json").write_text(f'{{"slot_id": "s{i}", "version": {i}}}')
    model = run / "models" / "bootstrap" / "policy"
    model.mkdir(parents=True)
    (model / "config.json").write_text('{"hidden_size": 16}')
    (model / "model.safetensors").write_bytes(bytes(range(256)) * 16)
    return run


def test_track_delete_restore_identical(project, run_dir):
    git_before = subprocess.run(["git", "status", "--porcelain"], cwd=project, capture_output=True, text=True).stdout
    init_run_repo(run_dir)
    store, model = run_dir / "iterations/iter_0001/adapt/store", run_dir / "models/bootstrap/policy"
    store_files, model_files = _snapshot(store), _snapshot(model)

    hashes = track(run_dir, ["iterations/iter_0001/adapt/store", model])  # relative to run_dir, or absolute
    assert set(hashes) == {"iterations/iter_0001/adapt/store", "models/bootstrap/policy"}
    assert all(md5.endswith(".dir") for md5 in hashes.values())
    assert (store.parent / "store.dvc").is_file() and (model.parent / "policy.dvc").is_file()
    assert tracked_hashes(run_dir) == hashes
    remote = Path(default_remote(run_dir))
    assert remote == project / "runs" / ".dvc-remote" / "demo"
    assert any(p.is_file() for p in remote.rglob("*"))

    # the run is its own SCM-less project: nothing lands in the outer git repo or DVC project
    assert "no_scm = True" in (run_dir / ".dvc" / "config").read_text()
    assert not (store.parent / ".gitignore").exists()
    git_after = subprocess.run(["git", "status", "--porcelain"], cwd=project, capture_output=True, text=True).stdout
    assert git_after == git_before
    with Repo(str(project)) as outer:
        assert list(outer.index.stages) == []

    # workspace and cache both gone: restore must come from the remote
    shutil.rmtree(store)
    shutil.rmtree(model)
    shutil.rmtree(run_dir / ".dvc" / "cache")
    assert restore(run_dir, "iterations/iter_0001/adapt/store") == store
    restore(run_dir, model)
    assert _snapshot(store) == store_files
    assert _snapshot(model) == model_files


def test_md5_and_data_version_follow_content(run_dir, tmp_path):
    remote = tmp_path / "elsewhere"
    init_run_repo(run_dir, remote=str(remote))
    target = "iterations/iter_0001/adapt/store"
    first = track(run_dir, [target])[target]
    version_1 = data_version(run_dir, [target])
    assert track(run_dir, [target])[target] == first  # unchanged content, same id
    assert data_version(run_dir, [target]) == version_1 and len(version_1) == 12

    slot = run_dir / target / "slot_0.json"
    slot.write_text('{"slot_id": "s0", "version": 7}')
    second = track(run_dir, [target])[target]
    assert second != first
    assert data_version(run_dir, [target]) != version_1
    assert any(p.is_file() for p in remote.rglob("*"))  # pushed to the configured remote

    slot.write_text("edited by hand")  # restore brings back the last tracked version
    restore(run_dir, target)
    assert slot.read_text() == '{"slot_id": "s0", "version": 7}'


def test_bad_paths_raise(run_dir, tmp_path):
    init_run_repo(run_dir)
    with pytest.raises(FileNotFoundError, match="missing"):
        track(run_dir, ["iterations/iter_0009"])
    with pytest.raises(ValueError, match="not inside"):
        track(run_dir, [tmp_path])
    with pytest.raises(FileNotFoundError, match="not tracked"):
        restore(run_dir, "models/bootstrap/policy")


def test_tracked_file_hash_reads_a_file_inside_a_tracked_folder(run_dir):
    """A batch (data/policy.jsonl) has no .dvc of its own: its md5 comes from the folder's manifest."""
    init_run_repo(run_dir)
    data = run_dir / "iterations" / "iter_0001" / "data"
    data.mkdir()
    (data / "policy.jsonl").write_text('{"advantage": 1.0}\n')
    (data / "judge.jsonl").write_text('{"advantage": -1.0}\n')
    store = run_dir / "iterations" / "iter_0001" / "adapt" / "store"
    hashes = track(run_dir, [data, store])
    assert tracked_file_hash(run_dir, store) == hashes["iterations/iter_0001/adapt/store"]
    policy_md5 = hashlib.md5((data / "policy.jsonl").read_bytes()).hexdigest()
    assert tracked_file_hash(run_dir, data / "policy.jsonl") == policy_md5
    assert tracked_file_hash(run_dir, data / "judge.jsonl") != tracked_file_hash(run_dir, data / "policy.jsonl")
    with pytest.raises(FileNotFoundError, match="not in the DVC-tracked"):
        tracked_file_hash(run_dir, data / "absent.jsonl")
    shutil.rmtree(run_dir / ".dvc" / "cache")  # no manifest: the file's own md5, which DVC records
    assert tracked_file_hash(run_dir, data / "policy.jsonl") == policy_md5
    with pytest.raises(FileNotFoundError, match="not tracked by DVC"):
        tracked_file_hash(run_dir, run_dir / "models" / "bootstrap" / "policy" / "config.json")


def test_git_state_of_this_checkout_or_unknown(tmp_path, monkeypatch):
    checkout = Path(versioning.__file__).resolve().parents[2]
    head = subprocess.run(["git", "-C", str(checkout), "rev-parse", "HEAD"], capture_output=True, text=True)
    state = git_state()
    if head.returncode == 0:
        dirty = subprocess.run(["git", "-C", str(checkout), "status", "--porcelain", "--untracked-files=no"],
                               capture_output=True, text=True, check=True).stdout.strip() != ""
        assert state == {"git_commit": head.stdout.strip(), "git_dirty": str(dirty).lower()}
    else:
        assert state == {"git_commit": "unknown", "git_dirty": "unknown"}
    monkeypatch.setattr(versioning, "_CHECKOUT", tmp_path)  # a copied tree: no repository
    assert git_state() == {"git_commit": "unknown", "git_dirty": "unknown"}
    nested = tmp_path / "repo"
    subprocess.run(["git", "init", "-q", str(nested)], check=True)
    monkeypatch.setattr(versioning, "_CHECKOUT", nested / "site-packages")  # inside another repository
    (nested / "site-packages").mkdir()
    assert git_state() == {"git_commit": "unknown", "git_dirty": "unknown"}
    monkeypatch.setenv("PATH", str(tmp_path / "no-bin"))  # no git at all
    assert git_state() == {"git_commit": "unknown", "git_dirty": "unknown"}


def test_config_hash_ignores_what_may_change_to_continue_a_run():
    cfg = Config()
    base = config_hash(cfg)
    assert len(base) == 64 and base == config_hash(Config())
    run = cfg.run.model_copy(update={"iterations": cfg.run.iterations + 7, "output_dir": "/elsewhere"})
    assert config_hash(cfg.model_copy(update={"run": run})) == base
    routed = cfg.orchestration.model_copy(update={"gpu_deployment": "rla-stage/gpu"})
    assert config_hash(cfg.model_copy(update={"orchestration": routed})) == base
    seed = cfg.run.model_copy(update={"seed": cfg.run.seed + 1})
    assert config_hash(cfg.model_copy(update={"run": seed})) != base
    rollout = cfg.rollout.model_copy(update={"n": cfg.rollout.n + 1})
    assert config_hash(cfg.model_copy(update={"rollout": rollout})) != base
