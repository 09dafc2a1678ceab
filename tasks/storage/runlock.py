"""One process at a time per run folder: `hold(run_dir)` takes an exclusive `flock` on `<run>/.rla.lock`.

The kernel drops the lock when its holder dies (even by SIGKILL), so a crashed run never leaves a stale
lock behind. The file names its holder (pid, host, command, since when) so that a second `rla run` on
the same folder stops at once with a message saying who has it. Holding is re-entrant inside one
process: the CLI takes the lock before Prefect starts, and the flows that run in the same process take
it again without blocking on themselves.
"""
from __future__ import annotations

import contextlib
import fcntl
import json
import os
import socket
import sys
import time
from collections.abc import Iterator
from pathlib import Path

from rla_core.errors import UserError

LOCK_FILE = ".rla.lock"

_held: dict[Path, list] = {}  # resolved lock path -> [file object, depth]


class RunLocked(UserError):
    """Another process is running on this run folder."""


def lock_path(run_dir: str | Path) -> Path:
    return Path(run_dir).resolve() / LOCK_FILE


def holder(run_dir: str | Path) -> dict:
    """What the lock file says about its last holder ({} when unreadable)."""
    try:
        data = json.loads(lock_path(run_dir).read_text())
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def _describe(info: dict) -> str:
    if not info:
        return "another process"
    since = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(info.get("since", 0)))
    return f"pid {info.get('pid')} on {info.get('host')} (`{info.get('command', '?')}`, since {since})"


@contextlib.contextmanager
def hold(run_dir: str | Path) -> Iterator[Path]:
    """Hold the run folder's lock for the block; raise RunLocked at once if another process holds it."""
    path = lock_path(run_dir)
    if path in _held:
        _held[path][1] += 1
        try:
            yield path
        finally:
            _held[path][1] -= 1
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    handle = open(path, "a+")
    try:
        fcntl.flock(handle.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        handle.close()
        raise RunLocked(f"{path.parent} is in use by {_describe(holder(run_dir))}; wait for it to finish "
                        "or stop it (two runs on one folder would overwrite each other)") from None
    try:
        handle.seek(0)
        handle.truncate()
        handle.write(json.dumps({"pid": os.getpid(), "host": socket.gethostname(), "since": time.time(),
                                 "command": " ".join(["rla", *sys.argv[1:]])[:300]}))
        handle.flush()
        _held[path] = [handle, 1]
        yield path
    finally:
        if _held.get(path, [None, 0])[1] <= 1:
            _held.pop(path, None)
            fcntl.flock(handle.fileno(), fcntl.LOCK_UN)
            handle.close()
