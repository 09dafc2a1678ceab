"""Atomic writes, the one helper every writer of the project uses (rla_core and tasks alike): a file or
a directory is built beside its final place and renamed into it, so a reader sees the old version or
the new one, never half of one, and a failed write leaves nothing behind. A full disk (ENOSPC, from
any library) is raised as DiskFull, a one-line user error naming the path."""
from __future__ import annotations

import contextlib
import errno
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

from rla_core.errors import DiskFull, is_disk_full


def _raise_disk_full(error: BaseException, path: Path) -> None:
    """A full disk, whatever library noticed it, becomes DiskFull: one line that names the path."""
    if isinstance(error, Exception) and not isinstance(error, DiskFull) and is_disk_full(error):
        raise DiskFull(errno.ENOSPC, f"no space left on the device while writing {path}; the previous "
                       "version there (if any) is kept: free space and re-run") from error


@contextlib.contextmanager
def atomic_file(path: str | os.PathLike) -> Iterator[Path]:
    """Yield a temporary path beside `path` to write into; on success it replaces `path` by rename, on
    error it is removed. Parent directories are created."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    handle, temp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    os.close(handle)
    try:
        yield Path(temp)
        os.replace(temp, path)
    except BaseException as error:
        Path(temp).unlink(missing_ok=True)
        _raise_disk_full(error, path)
        raise


def atomic_write_text(path: str | Path, text: str) -> Path:
    """Write `text` atomically (fsync'ed before the rename)."""
    with atomic_file(path) as temp:
        with open(temp, "w", encoding="utf-8") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
    return Path(path)


@contextlib.contextmanager
def atomic_directory(directory: str | os.PathLike) -> Iterator[Path]:
    """Yield a temporary sibling directory; on success it replaces `directory` by rename.

    An existing `directory` is moved aside first and removed only after the new one is in place.
    On error the temporary directory is deleted and `directory` is left as it was.
    """
    target = Path(directory).resolve()
    target.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{target.name}.tmp-", dir=target.parent))
    try:
        yield staging
    except BaseException as error:
        shutil.rmtree(staging, ignore_errors=True)
        _raise_disk_full(error, target)
        raise
    backup = None
    if target.exists():
        backup = Path(tempfile.mkdtemp(prefix=f".{target.name}.old-", dir=target.parent))
        os.replace(target, backup / target.name)
    os.replace(staging, target)
    if backup is not None:
        shutil.rmtree(backup, ignore_errors=True)
