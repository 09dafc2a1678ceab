"""Injected faults for crash-safety tests: `RLA_FAULT=kill:<stage>:<point>[:<iteration>]` makes the
process SIGKILL itself at that point of that stage (every iteration when the iteration is left out).

Points:
  before       the stage is about to run (nothing of it written yet: a stage boundary);
  inside       half-way through the body: after `RLA_FAULT_DELAY_S` seconds (default 0.5) of the body,
               or, if the body finishes first, after its outputs are written but before `_DONE`;
  after        `_DONE` written, the object-store upload and the caller's bookkeeping not yet done.

SIGKILL, not an exception: nothing in the process runs after it (no `finally`, no Prefect state
update, no MLflow end-of-run), exactly like the OOM killer or a pulled plug. Unset, nothing happens.
"""
from __future__ import annotations

import os
import signal
import threading
from contextlib import contextmanager
from typing import Iterator

ENV = "RLA_FAULT"
ENV_DELAY = "RLA_FAULT_DELAY_S"
POINTS = ("before", "inside", "after")


def _armed(stage: str, point: str, iteration: int) -> bool:
    spec = os.environ.get(ENV, "")
    if not spec:
        return False
    parts = spec.split(":")
    if len(parts) not in (3, 4) or parts[0] != "kill" or parts[2] not in POINTS:
        raise ValueError(f"{ENV}={spec!r}: expected kill:<stage>:<{'|'.join(POINTS)}>[:<iteration>]")
    return parts[1] == stage and parts[2] == point and (len(parts) == 3 or int(parts[3]) == iteration)


def kill_self() -> None:
    os.kill(os.getpid(), signal.SIGKILL)


def point(stage: str, where: str, iteration: int) -> None:
    """Die here if RLA_FAULT names this stage, point and iteration."""
    if _armed(stage, where, iteration):
        kill_self()


@contextmanager
def inside(stage: str, iteration: int) -> Iterator[None]:
    """Around a stage body: the `inside` fault fires on a timer during the body, or at its end."""
    if not _armed(stage, "inside", iteration):
        yield
        return
    timer = threading.Timer(float(os.environ.get(ENV_DELAY, "0.5")), kill_self)
    timer.daemon = True
    timer.start()
    yield
    kill_self()  # the body was faster than the timer: die with its outputs written and no _DONE
