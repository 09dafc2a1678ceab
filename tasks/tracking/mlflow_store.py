"""A run folder's own MLflow store when the folder was moved or copied: its artifact URIs are rebased onto
the folder's current place (`relocate_store`), and MLflow's per-process artifact-repository cache, keyed by
run id alone, is kept from serving a copy's run from the original's folder (`drop_cached_artifact_repo`)."""
from __future__ import annotations

import logging
import sqlite3
import urllib.parse
import urllib.request
from contextlib import closing
from pathlib import Path

DB_FILE = "mlflow.db"  # the default store, inside the run folder
ARTIFACT_DIR = "mlartifacts"  # its artifact root, beside it

log = logging.getLogger(__name__)


# Columns of MLflow 3's sqlite schema that hold artifact URIs (checked on a real run folder's mlflow.db)
_URI_COLUMNS = (("experiments", "artifact_location"), ("runs", "artifact_uri"), ("model_versions", "source"),
                ("model_versions", "storage_location"), ("logged_models", "artifact_location"))


def _file_path(uri: str | None) -> Path | None:
    """Local path of a `file:` URI, else None."""
    if not uri:
        return None
    parsed = urllib.parse.urlparse(uri)
    if parsed.scheme != "file" or parsed.netloc not in ("", "localhost"):
        return None
    return Path(urllib.request.url2pathname(parsed.path))


def _foreign_roots(conn: sqlite3.Connection, run_dir: Path) -> set[str]:
    """The experiments' default artifact roots (`file:` URIs of a `mlartifacts/` folder) that lie
    outside `run_dir`: where the store was created before the folder moved."""
    roots = set()
    for (location,) in conn.execute("SELECT artifact_location FROM experiments"):
        path = _file_path(location)
        if path is not None and path.name == ARTIFACT_DIR and not path.is_relative_to(run_dir):
            roots.add(location.rstrip("/"))
    return roots


def relocate_store(run_dir: str | Path) -> dict[str, int]:
    """Rebase the artifact URIs of the run folder's own store (`<run_dir>/mlflow.db`) onto
    `<run_dir>/mlartifacts` when they point into a `mlartifacts/` folder elsewhere (the folder was moved or
    copied): experiments.artifact_location, runs.artifact_uri, model_versions.source and
    storage_location (and logged_models.artifact_location), in one sqlite transaction. Returns
    {table.column: rows changed}; {} when nothing pointed elsewhere (the usual case: one SELECT)."""
    run_dir = Path(run_dir).resolve()
    db = run_dir / DB_FILE
    if not db.is_file():
        return {}
    new_root = (run_dir / ARTIFACT_DIR).as_uri()
    with closing(sqlite3.connect(str(db), timeout=60, isolation_level=None)) as conn:
        try:
            if not _foreign_roots(conn, run_dir):
                return {}
        except sqlite3.OperationalError:  # not (yet) an MLflow store
            return {}
        conn.execute("BEGIN IMMEDIATE")  # the write lock first; then read again: another process may have done it
        try:
            old_roots = _foreign_roots(conn, run_dir)
            tables = {name for (name,) in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
            changed: dict[str, int] = {}
            for table, column in _URI_COLUMNS:
                if table not in tables:
                    continue
                for old in old_roots:
                    cursor = conn.execute(
                        f"UPDATE {table} SET {column} = ? || substr({column}, ?) "
                        f"WHERE {column} = ? OR substr({column}, 1, ?) = ?",
                        (new_root, len(old) + 1, old, len(old) + 1, old + "/"))
                    changed[f"{table}.{column}"] = changed.get(f"{table}.{column}", 0) + cursor.rowcount
            conn.execute("COMMIT")
        except BaseException:
            conn.execute("ROLLBACK")
            raise
    if old_roots:
        log.warning("MLflow store %s was created elsewhere: artifact URIs rebased from %s to %s (%d rows)",
                    db, ", ".join(sorted(old_roots)), new_root, sum(changed.values()))
    return changed


def drop_cached_artifact_repo(run_id: str, artifact_uri: str) -> None:
    """Forget MLflow's per-process artifact repository of `run_id` (cached by run id alone) when it
    serves another URI than `artifact_uri`, the run's in the store at hand."""
    try:
        from mlflow.tracking._tracking_service import utils as tracking_utils

        cache = tracking_utils._artifact_repos_cache
    except (ImportError, AttributeError):  # MLflow internals moved: nothing cached that we know of
        return
    repo = cache.get(run_id)
    if repo is not None and getattr(repo, "artifact_uri", artifact_uri) != artifact_uri:
        cache.pop(run_id, None)
