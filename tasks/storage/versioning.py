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

Beside the data's version, the two other inputs of a result are named here too: the code
(`git_state`: commit and dirty flag of the checkout this code runs from) and the config
(`config_hash`: sha256 of the identity of the run's resolved config.yaml).
"""
from __future__ import annotations

import hashlib
import json
import logging
import subprocess
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator, Sequence

import yaml
from dvc.config_schema import RelPath
from dvc.repo import Repo

from rla_core.config import RUN_FREE_KEYS, Config

REMOTE_NAME = "storage"
DVC_SUFFIX = ".dvc"

logging.getLogger("dvc").setLevel(logging.WARNING)  # `import dvc` installs INFO handlers


def default_remote(run_dir: str | Path) -> str:
    """`runs/.dvc-remote/<name>`: beside the run folder, so deleting a run keeps its data. Absolute here;
    `.dvc/config` holds it relative to itself (`../../.dvc-remote/<name>`, see `init_run_repo`)."""
    run_dir = Path(run_dir).resolve()
    return str(run_dir.parent / ".dvc-remote" / run_dir.name)


def _is_default_remote(run_dir: Path, remote: str | None) -> bool:
    return remote is None or ("://" not in remote and Path(remote).resolve() == Path(default_remote(run_dir)))


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
    idempotent, and updates the remote if it changed.

    The default remote (`remote` None, or the path `default_remote(run_dir)`) is written relative to
    `.dvc/config` (DVC resolves a relative local URL against the config file's folder): a run folder
    moved together with its `.dvc-remote/<name>` sibling keeps working, and a copy pushes to the remote
    beside the copy, never into the original's. An absolute default written by older versions is
    rewritten so; a remote given otherwise (s3://..., another folder) is written as given."""
    run_dir = Path(run_dir).resolve()
    run_dir.mkdir(parents=True, exist_ok=True)
    default = _is_default_remote(run_dir, remote)
    url = default_remote(run_dir) if default else remote
    if not (run_dir / ".dvc").is_dir():
        Repo.init(str(run_dir), no_scm=True).close()
    if "://" not in url:
        Path(url).mkdir(parents=True, exist_ok=True)
    with _open(run_dir) as repo, repo.config.edit() as conf:
        conf["core"]["no_scm"] = True
        conf["core"]["remote"] = REMOTE_NAME
        # RelPath: DVC's config writer stores it relative to the config file's folder
        conf["remote"][REMOTE_NAME] = {"url": RelPath(url) if default else url, **(options or {})}
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


def tracked_file_hash(run_dir: str | Path, path: str | Path) -> str:
    """md5 DVC recorded for `path`: from its own `.dvc` file, or, for a file inside a tracked
    directory (an iteration's `data/policy.jsonl` lies in the tracked `data/`), from that directory's
    manifest in the run's DVC cache; with the manifest gone from the cache, the md5 of the file itself
    (what DVC 3 records for a file: `hash: md5` of its bytes)."""
    run_dir = Path(run_dir).resolve()
    rel = _relative(run_dir, path)
    if _dvc_file(run_dir, rel).is_file():
        return tracked_hashes(run_dir, [rel])[rel.as_posix()]
    for parent in rel.parents:
        if parent != Path(".") and _dvc_file(run_dir, parent).is_file():
            dir_md5 = tracked_hashes(run_dir, [parent])[parent.as_posix()]
            with _open(run_dir) as repo:
                manifest = Path(repo.cache.local.oid_to_path(dir_md5))
            if not manifest.is_file():
                if (run_dir / rel).is_file():
                    return hashlib.md5((run_dir / rel).read_bytes()).hexdigest()
                raise FileNotFoundError(f"DVC cache of {run_dir} lacks the manifest {manifest.name} of {parent}")
            inside = rel.relative_to(parent).as_posix()
            for entry in json.loads(manifest.read_text()):
                if entry["relpath"] == inside:
                    return entry["md5"]
            raise FileNotFoundError(f"{rel} is not in the DVC-tracked {parent} (manifest {manifest.name})")
    raise FileNotFoundError(f"not tracked by DVC (no .dvc file for it or a folder above it): {run_dir / rel}")


_CHECKOUT = Path(__file__).resolve().parents[2]  # the project checkout this code runs from
UNKNOWN = "unknown"


def _git(*args: str) -> str:
    return subprocess.run(["git", "-C", str(_CHECKOUT), *args], capture_output=True, text=True, check=True,
                          timeout=30).stdout.strip()


def git_state() -> dict[str, str]:
    """{"git_commit": HEAD, "git_dirty": "true" | "false"} of the checkout this code runs from; dirty means
    tracked files differ from HEAD (untracked files do not count, as with `git describe --dirty`).
    Both "unknown" when git is missing or the code does not run from a git checkout of its own (an
    installed package, a copied tree): never an error."""
    try:
        top = Path(_git("rev-parse", "--show-toplevel")).resolve()
        if top != _CHECKOUT:  # a repository above an installed copy is not this code's checkout
            raise ValueError(f"{_CHECKOUT} is inside {top}, not a checkout of its own")
        commit = _git("rev-parse", "HEAD")
        dirty = _git("status", "--porcelain", "--untracked-files=no") != ""
    except (OSError, ValueError, subprocess.SubprocessError) as error:
        logging.getLogger(__name__).debug("no git state for %s: %s", _CHECKOUT, error)
        return {"git_commit": UNKNOWN, "git_dirty": UNKNOWN}
    return {"git_commit": commit, "git_dirty": str(dirty).lower()}


def config_identity(cfg: Config) -> dict[str, Any]:
    """The part of a run's config that defines its results: the config minus RUN_FREE_KEYS (run.iterations,
    run.output_dir, orchestration: what may change to continue a run), as a JSON-able tree."""
    tree = cfg.model_dump(mode="json")
    for key in RUN_FREE_KEYS:
        *parents, leaf = key.split(".")
        node = tree
        for part in parents:
            node = node.get(part, {})
        node.pop(leaf, None)
    return tree


def config_hash(cfg: Config) -> str:
    """sha256 (hex) of `config_identity(cfg)` as canonical JSON (sorted keys): the same for a run
    continued or extended, different for any setting that changes its results."""
    text = json.dumps(config_identity(cfg), sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()


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
