"""No orphans: a small watcher process that stops what an `rla` command started once the command dies.

Prefect's ephemeral API server (uvicorn), torchrun launchers and sandboxes are children of the `rla`
process. When `rla` is stopped by SIGKILL (or the OOM killer) nothing in it runs, so its children are
re-parented and keep running. `start()` launches this module as a child watcher that

  * remembers the command's descendants (polled every `POLL_S` seconds, by pid and start time, so a
    recycled pid is never mistaken for one of them);
  * ignores SIGINT/SIGTERM meant for the command's process group (it must outlive the command);
  * when the command is gone, terminates every remembered descendant that still runs (SIGTERM, then
    SIGKILL after `GRACE_S`), then exits.

On a normal exit the command's children are already stopped and the watcher only exits.
"""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

POLL_S = 0.5
GRACE_S = 5.0
ENV_DISABLE = "RLA_NO_REAPER"


_watcher: dict[int, subprocess.Popen] = {}  # this process's pid -> its watcher (one per process)


def start() -> subprocess.Popen | None:
    """Launch the watcher for this process, once (None when disabled by RLA_NO_REAPER=1)."""
    if os.environ.get(ENV_DISABLE) == "1":
        return None
    if os.getpid() in _watcher and _watcher[os.getpid()].poll() is None:
        return _watcher[os.getpid()]
    _watcher[os.getpid()] = subprocess.Popen(
        [sys.executable, "-m", "flows.reaper", str(os.getpid())], stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)})
    return _watcher[os.getpid()]


def _stop(processes: list) -> None:
    import psutil

    alive = []
    for process in processes:
        try:
            process.terminate()
            alive.append(process)
        except psutil.Error:
            pass
    _, still = psutil.wait_procs(alive, timeout=GRACE_S)
    for process in still:
        try:
            process.kill()
        except psutil.Error:
            pass


def watch(parent_pid: int) -> None:
    import psutil

    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    me = os.getpid()
    try:
        parent = psutil.Process(parent_pid)
    except psutil.Error:
        return
    known: dict[tuple[int, float], psutil.Process] = {}
    while True:
        try:
            if not parent.is_running() or parent.status() == psutil.STATUS_ZOMBIE:
                break
            for child in parent.children(recursive=True):
                if child.pid != me:
                    known.setdefault((child.pid, child.create_time()), child)
        except psutil.Error:
            break
        time.sleep(POLL_S)
    survivors = []
    for (pid, created), process in known.items():
        try:
            if process.is_running() and process.create_time() == created:
                survivors.append(process)
        except psutil.Error:
            pass
    _stop(survivors)


if __name__ == "__main__":
    watch(int(sys.argv[1]))
