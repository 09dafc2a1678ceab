"""DVC versioning of a run folder: the task stores and checkpoints of every iteration.

Each run folder `runs/<name>/` is its own DVC project, initialised with `no_scm`: the outer git repo
ignores `runs/`, and DVC must neither commit to it nor mistake a project at the repo root for this
one (DVC takes the nearest `.dvc/` above a path, which is the run folder's own). `track` is
`dvc add` + `dvc push`: the `.dvc` files stay beside the outputs, objects go to the run's cache and
to its remote (default: the local folder `runs/.dvc-remote/<name>`). `restore` brings a tracked path
back after it was deleted, from the cache or else from the remote.

The in-process API (`dvc.repo.Repo`) is used, not the CLI: ~0.3 s per add+push instead of ~1 s of
interpreter start per command. A fresh `Repo` is opened per call and closed after, so no state
(cache listings, index) outlives a call; DVC's own file lock serialises concurrent writers.
"""
from __future__ import annotations

import hashlib
import logging
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator, Sequence

import yaml
from dvc.repo import Repo

REMOTE_NAME = "storage"
DVC_SUFFIX = ".dvc"

logging.getLogger("dvc").setLevel(logging.WARNING)  # `import dvc` installs INFO handlers


def default_remote(run_dir: str | Path) -> str:
    """`runs/.dvc-remote/<name>`: beside the run folder, so deleting a run keeps its data."""
    run_dir = Path(run_dir).resolve()
    return str(run_dir.parent / ".dvc-remote" / run_dir.name)


@contextmanager
def _open(run_dir: Path) -> Iterator[Repo]:
    # _wait_for_lock: another stage writing to the same run waits instead of failing after ~3 s.
    repo = Repo(str(run_dir), _wait_for_lock=True)
    try:
        yield repo
    finally:
        repo.close()


def init_run_repo(run_dir: str | Path, remote: str | None = None, options: dict[str, str] | None = None) -> Path:
    """Make `run_dir` a DVC project without SCM whose default remote is `remote` (a local folder or
    any DVC URL, e.g. s3://bucket/prefix, with remote `options` such as {"endpointurl": ...});
    idempotent, and updates the remote if it changed."""
    run_dir = Path(run_dir).resolve()
    run_dir.mkdir(parents=True, exist_ok=True)
    url = remote or default_remote(run_dir)
    if not (run_dir / ".dvc").is_dir():
        Repo.init(str(run_dir), no_scm=True).close()
    if "://" not in url:
        Path(url).mkdir(parents=True, exist_ok=True)
    with _open(run_dir) as repo, repo.config.edit() as conf:
        conf["core"]["no_scm"] = True
        conf["core"]["remote"] = REMOTE_NAME
        conf["remote"][REMOTE_NAME] = {"url": url, **(options or {})}
    return run_dir


def _relative(run_dir: Path, path: str | Path) -> Path:
    """Path inside the run folder, relative to it; absolute paths must lie inside it."""
    path = Path(path)
    absolute = path if path.is_absolute() else run_dir / path
    absolute = absolute.resolve()
    try:
        return absolute.relative_to(run_dir)
    except ValueError:
        raise ValueError(f"{path} is not inside the run folder {run_dir}") from None


def _dvc_file(run_dir: Path, rel: Path) -> Path:
    return run_dir / rel.parent / f"{rel.name}{DVC_SUFFIX}"


def track(run_dir: str | Path, paths: Sequence[str | Path], push: bool = True) -> dict[str, str]:
    """`dvc add` each path (file or directory) and push its objects to the remote.

    Returns {path relative to run_dir: md5}; a directory's md5 ends in `.dir`. Re-tracking an
    unchanged path is cheap (hashes are cached by mtime/size) and returns the same md5."""
    run_dir = Path(run_dir).resolve()
    rels = [_relative(run_dir, path) for path in paths]
    missing = [str(rel) for rel in rels if not (run_dir / rel).exists()]
    if missing:
        raise FileNotFoundError(f"cannot track missing paths in {run_dir}: {missing}")
    if not rels:
        return {}
    with _open(run_dir) as repo:
        stages = repo.add([str(run_dir / rel) for rel in rels])
        if push:
            repo.push(targets=[str(_dvc_file(run_dir, rel)) for rel in rels])
    hashes = {}
    for rel, stage in zip(rels, stages):
        hashes[rel.as_posix()] = stage.outs[0].hash_info.value
    return hashes


def tracked_hashes(run_dir: str | Path, paths: Sequence[str | Path] | None = None) -> dict[str, str]:
    """{path: md5} read from the `.dvc` files of `paths`, or of every tracked path when None."""
    run_dir = Path(run_dir).resolve()
    if paths is None:
        internal = run_dir / ".dvc"
        files = [f for f in run_dir.rglob(f"*{DVC_SUFFIX}") if f.is_file() and internal not in f.parents]
    else:
        files = [_dvc_file(run_dir, _relative(run_dir, path)) for path in paths]
    hashes = {}
    for file in sorted(files):
        if not file.is_file():
            raise FileNotFoundError(f"not tracked by DVC (no {file.name}): {file.with_suffix('')}")
        out = yaml.safe_load(file.read_text())["outs"][0]
        rel = (file.parent / out["path"]).relative_to(run_dir)
        hashes[rel.as_posix()] = out["md5"]
    return hashes


def data_version(run_dir: str | Path, paths: Sequence[str | Path] | None = None) -> str:
    """Short id of the tracked contents: sha256 over sorted "path:md5" lines, first 12 hex digits.

    Same data at the same paths -> same id; any byte changed in a tracked path -> a new id."""
    hashes = tracked_hashes(run_dir, paths)
    text = "\n".join(f"{path}:{md5}" for path, md5 in sorted(hashes.items()))
    return hashlib.sha256(text.encode()).hexdigest()[:12]


def restore(run_dir: str | Path, path: str | Path) -> Path:
    """Bring a tracked path back to the state in its `.dvc` file (after deletion or edits): from
    the local cache when it has the objects, else pulled from the remote. Returns the path."""
    run_dir = Path(run_dir).resolve()
    rel = _relative(run_dir, path)
    target = str(_dvc_file(run_dir, rel))
    if not Path(target).is_file():
        raise FileNotFoundError(f"not tracked by DVC (no {Path(target).name}): {run_dir / rel}")
    with _open(run_dir) as repo:
        # pull = fetch the objects missing from the cache (none if it is intact) + checkout
        repo.pull(targets=[target], force=True)
    return run_dir / rel
