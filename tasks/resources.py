"""Peak resident memory of this process, stage by stage (Linux).

The kernel keeps a process's peak resident set size (VmHWM in /proc/self/status); writing "5" to
/proc/self/clear_refs resets it to the current size (Linux ≥ 4.0). A stage resets it before its body and
reads it after, so each stage reports its own peak, not the process's so far. Memory of child processes
(sandbox workers, DeepSpeed ranks, vLLM) is not included. Where either file is missing or cannot be
written, the stage reports nothing (None).
"""
from __future__ import annotations

from pathlib import Path

STATUS, CLEAR_REFS = Path("/proc/self/status"), Path("/proc/self/clear_refs")


def reset_peak_rss() -> bool:
    """Reset this process's peak RSS to its current RSS; False when this system cannot."""
    try:
        CLEAR_REFS.write_text("5")
        return True
    except OSError:
        return False


def peak_rss_gib() -> float | None:
    """This process's peak resident set size since start or the last reset, in GiB; None if unknown."""
    try:
        for line in STATUS.read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 2 ** 20  # kB
    except (OSError, ValueError, IndexError):
        return None
    return None
