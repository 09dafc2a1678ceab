"""The sandbox runner's stop reason once a test's CPU time is known (`_cpu_reason`): the kernel's RLIMIT_CPU
kill can come before the runner's wall-clock check on a loaded machine, with rusage a few ms under the limit;
it is the CPU limit (a timeout), not a crash."""
from __future__ import annotations

import os
import signal
import subprocess
import sys

from rla_core.envs.coding import sandbox_runner

LIMITS = {"cpu_s": 2.0, "wall_s": 2.0}


def _status(code: str) -> int:
    """A real wait status: a child that ran `code`."""
    pid = os.fork()
    if pid == 0:
        try:
            exec(code)
        finally:
            os._exit(0)
    return os.waitpid(pid, 0)[1]


def test_an_unexplained_sigkill_at_the_cpu_rlimit_is_the_cpu_limit_and_other_ends_are_not():
    killed = _status("os.kill(os.getpid(), signal.SIGKILL)")
    failed = _status("os._exit(1)")
    assert os.WTERMSIG(killed) == signal.SIGKILL and os.waitstatus_to_exitcode(failed) == 1
    reason = sandbox_runner._cpu_reason
    assert reason(None, killed, 1.996, LIMITS) == "cpu"  # the kernel's kill, rusage a little under 2 s
    assert reason(None, killed, 0.4, LIMITS) is None  # a SIGKILL far from the limit: a crash
    assert reason(None, failed, 1.996, LIMITS) is None  # an exit of its own: not the limit
    assert reason("wall", killed, 1.996, LIMITS) == "wall"  # the runner's own wall kill stays a wall stop
    assert reason("wall", killed, 2.0, LIMITS) == "cpu" and reason(None, failed, 2.0, LIMITS) == "cpu"
    assert reason("memory", killed, 2.5, LIMITS) == "memory" and reason("output", failed, 3.0, LIMITS) == "output"
    assert sandbox_runner._cpu_rlimit({"cpu_s": 0.3}) == 1 and sandbox_runner._cpu_rlimit({"cpu_s": 2.5}) == 3


def test_the_kernel_kills_a_signal_ignoring_loop_at_the_cpu_rlimit_with_sigkill():
    """What `_cpu_reason` relies on: under RLIMIT_CPU (soft = hard, as `_set_limits` sets it) a loop that
    ignores SIGXCPU dies of SIGKILL with its CPU time at the limit."""
    code = ("import resource, signal\nsignal.signal(signal.SIGXCPU, signal.SIG_IGN)\n"
            "resource.setrlimit(resource.RLIMIT_CPU, (1, 1))\nwhile True:\n    pass\n")
    child = subprocess.Popen([sys.executable, "-c", code])
    _, status, usage = os.wait4(child.pid, 0)
    child.returncode = 0  # reaped here
    cpu = usage.ru_utime + usage.ru_stime
    assert os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGKILL
    assert sandbox_runner._cpu_reason(None, status, cpu, {"cpu_s": 1.0}) == "cpu", cpu
