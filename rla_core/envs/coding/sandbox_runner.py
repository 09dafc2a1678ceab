"""The in-sandbox runner (stdlib only; `rla_core/envs/coding/sandbox.py` starts it as the sandbox's PID 1 with
the system Python, passing this file's text with -c).

Protocol. On stdin: a 4-byte little-endian length and a marshalled header — {"probe": True}, or
{"limits": {...}, "items": [[program bytes, [stdin bytes, ...]], ...]} — then, item after item, the raw
UTF-8 bytes of the item's program followed by those of each of its tests' stdin. On stdout, per test in
order: one JSON line {"item", "index", "exit", "reason", "cpu_s", "wall_s", "stdout_bytes",
"stderr_bytes"} followed by that many raw bytes of stdout, then of stderr (each capped at the output
limit). A probe answers with one JSON line.

Per test it forks a child that enters a fresh scratch folder, a new session and the rlimits, drops every
inherited descriptor but its own stdin/stdout/stderr (so the report channel, fd 1 of the runner, and the
job pipe are out of its reach), then compiles and runs the program in the forked interpreter (no second
interpreter start-up). The runner feeds it a memfd as stdin, reads its output (capped), watches the wall
clock, the resident memory of everything in the namespace and the files in the writable folders, and
afterwards SIGKILLs every process but itself (kill(-1) from PID 1), empties /scratch and /dev/shm (and
strips their ACLs and extended attributes) and checks that its own rlimits, nice value, scheduling policy
and CPU affinity are as they were at start (a process of the same uid may lower them with prlimit,
setpriority, sched_setscheduler or sched_setaffinity, and children would inherit them). Should anything
differ, or a folder not empty, it stops: the harness then runs the programs after that one (and that one
too, unless it was the first of the sandbox) again in a fresh sandbox.

What one program could learn about the others of its batch: nothing the runner holds. Items are read
from the pipe one at a time, just before they run, into a private anonymous mapping of the item's size
(never a Python object of the runner); outputs are read into two more such buffers and written out from
them; they are zeroed (MADV_DONTNEED) or unmapped after each use, and each test process unmaps its
copies at once, keeping only its program's text. So a test process that reads its whole address space
finds neither the other items' programs, inputs and outputs nor its own program's other inputs, and its
address-space limit is spent the same whatever else is in the batch.

Why the program cannot forge a report: the runner is PID 1 of its PID namespace, so signals from inside
without a handler (SIGKILL, SIGSTOP) do not reach it; it is non-dumpable, so the program (same uid) can
neither ptrace it nor open /proc/1/fd/1 or /proc/1/mem (ptrace is also refused by seccomp)."""
# Over 400 lines: a stdlib-only program that runs as the sandbox's PID 1: it must be one file.
import _json
import _signal as signal  # the C module: `signal` would import enum, functools, collections
import atexit
import builtins
import ctypes
import errno
import gc
import io
import marshal
import mmap
import os
import resource
import select
import sys
import time

# Start-up time is paid once per sandbox, so the runner imports only C modules and small ones (no re,
# json, traceback: ~20 ms together). The header arrives marshalled; reports leave as JSON lines + bytes.
SCRATCH = "/scratch"
WRITABLE = (SCRATCH, "/dev/shm")  # the only writable folders (size-capped tmpfs), emptied after each test
MEMORY_POLL_S = 0.025
_KEEP: list = []
_BUFFERS: list = []  # the job and output buffers (mmap), unmapped in each test process before the program runs
_LIBC = ctypes.CDLL(None, use_errno=True)
PR_SET_DUMPABLE = 4
NAME_TAKEN = (errno.EEXIST, errno.ENOTEMPTY, errno.ENOTDIR, errno.EISDIR)
RLIMITS = tuple(sorted(getattr(resource, name) for name in dir(resource) if name.startswith("RLIMIT_")))


class Buffer:
    """A private anonymous mapping: copy-on-write across fork, zeroed by MADV_DONTNEED."""

    def __init__(self, size: int):
        self.map = mmap.mmap(-1, max(size, 1), flags=mmap.MAP_PRIVATE)
        self.view = memoryview(self.map)
        self.filled = 0
        _BUFFERS.append(self)

    def clear(self) -> None:
        self.map.madvise(mmap.MADV_DONTNEED)
        self.filled = 0

    def close(self) -> None:
        """Unmap (zeroing first, should a view still hold it open)."""
        self.clear()
        _BUFFERS.remove(self)
        self.view.release()
        self.map.close()


def main() -> None:
    signal.signal(signal.SIGINT, signal.SIG_DFL)  # as PID 1 a default-handled signal from inside is dropped
    jobs = os.dup(0)  # the job pipe, read item by item; every fd above 2 is closed in the test processes
    null = os.open("/dev/null", os.O_RDONLY)
    os.dup2(null, 0)
    os.close(null)
    header = marshal.loads(_read(jobs, int.from_bytes(_read(jobs, 4), "little")))
    _harden()
    if header.get("probe"):
        _write(1, (_json_object(_probe()) + "\n").encode())
        return
    limits, items = header["limits"], header["items"]
    streams = Buffer(limits["output_bytes"] + 1), Buffer(limits["output_bytes"] + 1)
    gc.freeze()  # a forked child's collector then leaves the inherited objects (and their pages) alone
    start_state = _process_state()
    for item, (program_bytes, stdin_bytes) in enumerate(items):
        size = program_bytes + sum(stdin_bytes)
        frame = Buffer(size)  # of this item's size: its test processes' address space holds no other's
        if not _read_into(jobs, frame.view[:size]):
            sys.stderr.write("runner: the job ended before its last item\n")
            return
        spans, offset = [], program_bytes
        for length in stdin_bytes:
            spans.append((offset, offset + length))
            offset += length
        for index, span in enumerate(spans):
            run_test(item, index, frame, (0, program_bytes), span, streams, limits)
            if not all(_wipe(folder) for folder in WRITABLE):
                sys.stderr.write("runner: a writable folder could not be emptied; stopping\n")
                return
            if _process_state() != start_state:
                sys.stderr.write("runner: a test changed the runner's rlimits, priority or CPU affinity; "
                                 "stopping\n")
                return
        frame.close()


def _read(fd: int, size: int) -> bytes:
    data = b""
    while len(data) < size:
        chunk = os.read(fd, size - len(data))
        if not chunk:
            raise EOFError("job header cut short")
        data += chunk
    return data


def _read_into(fd: int, view: memoryview) -> bool:
    """Fill `view` from the pipe (no copy through a Python object); False at a premature end."""
    got = 0
    while got < len(view):
        count = os.readv(fd, [view[got:]])
        if not count:
            return False
        got += count
    return True


def _write(fd: int, data) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]


def _process_state() -> tuple:
    """What another process of our uid can change about us without ptrace, and the test processes would
    inherit: rlimits (prlimit), nice value (setpriority), scheduling policy, CPU affinity."""
    return (tuple(resource.getrlimit(which) for which in RLIMITS), os.getpriority(os.PRIO_PROCESS, 0),
            os.sched_getscheduler(0), tuple(sorted(os.sched_getaffinity(0))))


def _harden() -> None:
    """OOM killer prefers the sandbox; nobody of the same uid may ptrace us or open our /proc files."""
    with open("/proc/self/oom_score_adj", "w") as handle:
        handle.write("1000")
    _set_dumpable(False)


def _set_dumpable(dumpable: bool) -> None:
    if _LIBC.prctl(PR_SET_DUMPABLE, int(dumpable), 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_DUMPABLE) failed")


def _json_object(report: dict) -> str:
    """A flat dict of str/int/float/bool/None/list-of-str as one JSON object (without the json module)."""
    def value(item: object) -> str:
        if item is None or isinstance(item, bool):
            return {None: "null", True: "true", False: "false"}[item]
        if isinstance(item, (int, float)):
            return repr(item)
        if isinstance(item, list):
            return "[" + ", ".join(map(value, item)) + "]"
        return _json.encode_basestring_ascii(str(item))

    return "{" + ", ".join(f"{_json.encode_basestring_ascii(k)}: {value(v)}" for k, v in report.items()) + "}"


def run_test(item: int, index: int, frame: Buffer, program: tuple[int, int], stdin: tuple[int, int],
             streams: tuple[Buffer, Buffer], limits: dict) -> None:
    """Fork, run the item's program on its test `index`, watch it; send that test's report."""
    workdir = f"{SCRATCH}/{index}"
    os.mkdir(workdir, 0o700)
    stdin_fd = os.memfd_create("stdin")
    _write(stdin_fd, frame.view[stdin[0]:stdin[1]])
    os.lseek(stdin_fd, 0, os.SEEK_SET)
    out_r, out_w = os.pipe()
    err_r, err_w = os.pipe()
    started = time.monotonic()
    pid = os.fork()
    if pid == 0:
        _child(frame, program, workdir, stdin_fd, out_w, err_w, limits)  # never returns
    for fd in (stdin_fd, out_w, err_w):
        os.close(fd)
    pipes = {out_r: streams[0], err_r: streams[1]}
    reason = _watch(pid, pipes, started, limits)
    if reason is not None:
        _signal_all()
    _, status, usage = os.wait4(pid, 0)
    wall = time.monotonic() - started
    _kill_all()  # daemons and other leftovers, before the last of their output is read
    for fd, buffer in pipes.items():
        _drain(fd, buffer)
        os.close(fd)
    cap = limits["output_bytes"]
    if reason is None and any(buffer.filled > cap for buffer in streams):
        reason = "output"
    cpu = usage.ru_utime + usage.ru_stime
    reason = _cpu_reason(reason, status, cpu, limits)
    sizes = [min(buffer.filled, cap) for buffer in streams]
    report = {"item": item, "index": index, "exit": os.waitstatus_to_exitcode(status), "reason": reason,
              "cpu_s": round(cpu, 4), "wall_s": round(wall, 4), "stdout_bytes": sizes[0], "stderr_bytes": sizes[1]}
    _write(1, (_json_object(report) + "\n").encode())
    for buffer, size in zip(streams, sizes):
        _write(1, buffer.view[:size])
        buffer.clear()


def _watch(pid: int, pipes: dict, started: float, limits: dict) -> str | None:
    """Read the child's output until it exits; the reason it was stopped ('wall', 'output', 'memory')."""
    pidfd = os.pidfd_open(pid)
    poller = select.poll()
    for fd in (*pipes, pidfd):
        poller.register(fd, select.POLLIN)
    deadline = started + limits["wall_s"]
    memory = limits["memory_mb"] << 20
    cap = limits["output_bytes"]
    next_memory_check = started + MEMORY_POLL_S
    try:
        while True:
            now = time.monotonic()
            if now >= deadline:
                return "wall"
            if now >= next_memory_check:
                if _resident_bytes() > memory or _scratch_files() > limits["scratch_files"]:
                    return "memory"
                next_memory_check = now + MEMORY_POLL_S
            for fd, _ in poller.poll(max(0.0, min(deadline, next_memory_check) - now) * 1000):
                if fd == pidfd:
                    return None
                buffer = pipes[fd]
                count = os.readv(fd, [buffer.view[buffer.filled:]])  # room left: the buffer holds cap + 1
                if not count:
                    poller.unregister(fd)
                    continue
                buffer.filled += count
                if buffer.filled > cap:
                    return "output"
    finally:
        os.close(pidfd)


def _resident_bytes() -> int:
    """Anonymous and shared-memory resident set of every process in the namespace but this one (bytes);
    file-backed pages (the interpreter's code) are left out, copy-on-write pages count in each process."""
    total_kib = 0
    for name in os.listdir("/proc"):
        if name.isdigit() and name != "1":
            try:
                with open(f"/proc/{name}/status", "rb") as handle:
                    for line in handle:
                        if line.startswith((b"RssAnon:", b"RssShmem:")):
                            total_kib += int(line.split()[1])
            except (OSError, IndexError, ValueError):
                pass  # gone meanwhile
    return total_kib << 10


def _scratch_files() -> int:
    """Inodes in use on the writable tmpfs mounts: their size cap does not count empty files and folders,
    whose kernel memory is real."""
    return sum(usage.f_files - usage.f_ffree for usage in map(os.statvfs, WRITABLE))


def _drain(fd: int, buffer: Buffer) -> None:
    """What is left in a pipe whose writers are all dead, up to the buffer's end (cap + 1 bytes: enough to
    tell whether the output went over the cap)."""
    os.set_blocking(fd, False)
    try:
        while buffer.filled < len(buffer.view):
            count = os.readv(fd, [buffer.view[buffer.filled:]])
            if not count:
                return
            buffer.filled += count
    except BlockingIOError:
        pass


def _signal_all() -> None:
    try:
        os.kill(-1, signal.SIGKILL)  # from PID 1: every process of the namespace but PID 1
    except ProcessLookupError:
        pass


def _kill_all() -> None:
    """SIGKILL and reap everything else in the namespace; orphans are re-parented to us, so when no child
    is left, nothing is."""
    while True:
        _signal_all()
        try:
            os.waitpid(-1, 0)
        except ChildProcessError:
            return


def _wipe(root: str) -> bool:
    """Empty `root` whatever the program left there: modes, deep trees, symlinks. Subfolders are hoisted
    to `root` by rename before they are emptied, so the depth of a tree costs neither recursion nor
    descriptors nor path length; the root's mode, ACLs and extended attributes are reset. False when
    something would not go."""
    counter = 0
    try:
        os.chmod(root, 0o755)
        top = os.open(root, os.O_RDONLY | os.O_DIRECTORY)
    except OSError:
        return False
    try:
        for name in os.listxattr(top):  # a default ACL would reach the next test's files; user.* too
            os.removexattr(top, name)
        os.chmod(top, 0o755)
        for _ in range(1_000_000):
            names = os.listdir(top)
            if not names:
                return True
            for name in names:
                counter = _remove(top, name, counter)
        return False
    except OSError:
        return False
    finally:
        os.close(top)


def _remove(top: int, name: str, counter: int) -> int:
    try:
        os.unlink(name, dir_fd=top)
        return counter
    except IsADirectoryError:
        pass
    os.chmod(name, 0o700, dir_fd=top)  # a directory (unlink said so); nothing else runs to swap it
    folder = os.open(name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=top)
    try:
        for child in os.listdir(folder):
            try:
                os.unlink(child, dir_fd=folder)
                continue
            except IsADirectoryError:
                pass
            os.chmod(child, 0o700, dir_fd=folder)  # renaming a folder writes its '..' entry
            while True:  # hoist the subfolder to the top, under a name not taken there
                counter += 1
                try:
                    os.rename(child, f".wipe{counter}", src_dir_fd=folder, dst_dir_fd=top)
                    break
                except OSError as error:
                    if error.errno not in NAME_TAKEN:
                        raise
    finally:
        os.close(folder)
    os.rmdir(name, dir_fd=top)
    return counter


def _child(frame: Buffer, program: tuple[int, int], workdir: str, stdin_fd: int, out_w: int, err_w: int,
           limits: dict) -> None:
    """The forked test process: isolate, then run the program as `python program.py` would."""
    code = 1
    try:
        _KEEP.extend((sys.stdin, sys.stdout, sys.stderr))  # their FileIOs would close fds 0-2 when freed
        source = bytes(frame.view[program[0]:program[1]]).decode("utf-8")
        for buffer in list(_BUFFERS):  # this item's inputs, the other tests' included: none of our business
            buffer.close()
        os.setsid()
        os.dup2(stdin_fd, 0)
        os.dup2(out_w, 1)
        os.dup2(err_w, 2)
        os.closerange(3, os.sysconf("SC_OPEN_MAX"))
        os.chdir(workdir)
        os.environ.update(TMPDIR=workdir)
        signal.signal(signal.SIGINT, signal.default_int_handler)
        _set_dumpable(True)  # the program's own /proc/self as usual; the runner (PID 1) stays closed
        _set_limits(limits)
        _fresh_streams()
        code = _run_program(source)
    except BaseException as error:
        os.write(2, f"sandbox: test set-up failed: {error!r}\n".encode())
    finally:
        os._exit(code)


CPU_SLACK_S = 0.1  # rusage may read a few ms under the CPU time at which the kernel's RLIMIT_CPU kill came


def _cpu_rlimit(limits: dict) -> int:
    return max(1, int(-(-limits["cpu_s"] // 1)))  # whole seconds, rounded up; the runner checks the rest


def _cpu_reason(reason: str | None, status: int, cpu: float, limits: dict) -> str | None:
    """The stop reason once the CPU time is known: "cpu" where the test used its CPU limit, which includes
    a SIGKILL the runner did not send (the kernel's RLIMIT_CPU kill, when it comes before the wall check
    notices, e.g. on a loaded machine) with the CPU time within CPU_SLACK_S of that rlimit."""
    if reason not in (None, "wall"):
        return reason
    killed = os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGKILL
    if cpu >= limits["cpu_s"] or (reason is None and killed and cpu >= _cpu_rlimit(limits) - CPU_SLACK_S):
        return "cpu"
    return reason


def _set_limits(limits: dict) -> None:
    mib = 1 << 20
    cpu = _cpu_rlimit(limits)
    for which, value in ((resource.RLIMIT_AS, limits["memory_mb"] * mib),
                         (resource.RLIMIT_NPROC, limits["processes"]),
                         (resource.RLIMIT_FSIZE, limits["file_size_mb"] * mib),
                         (resource.RLIMIT_NOFILE, limits["open_files"]),
                         (resource.RLIMIT_CPU, cpu),
                         (resource.RLIMIT_CORE, 0),
                         (resource.RLIMIT_MSGQUEUE, 0)):
        resource.setrlimit(which, (value, value))


def _fresh_streams() -> None:
    def text(fd: int, mode: str, errors: str, line_buffering: bool = False) -> io.TextIOWrapper:
        return io.TextIOWrapper(open(fd, mode + "b", closefd=False), encoding="utf-8", errors=errors,
                                line_buffering=line_buffering)

    sys.stdin = sys.__stdin__ = text(0, "r", "surrogateescape")
    sys.stdout = sys.__stdout__ = text(1, "w", "surrogateescape")
    sys.stderr = sys.__stderr__ = text(2, "w", "backslashreplace", line_buffering=True)


def _run_program(program: str) -> int:
    """Compile and run in a fresh __main__; the exit status `python program.py` would have."""
    main_module = type(sys)("__main__")
    main_module.__dict__.update(__file__="program.py", __builtins__=builtins)
    sys.modules["__main__"] = main_module
    sys.argv = ["program.py"]
    try:
        exec(compile(program, "program.py", "exec"), main_module.__dict__)
        code = 0
    except SystemExit as stop:
        code = _exit_status(stop)
    except BaseException as error:
        # the interpreter's own printer (C, no traceback module); the first frame is ours, not the program's
        tb = error.__traceback__
        error = error.with_traceback(tb.tb_next if tb is not None else None)
        sys.__excepthook__(type(error), error, error.__traceback__)
        code = 1
    try:
        if "threading" in sys.modules:
            sys.modules["threading"]._shutdown()  # wait for non-daemon threads, as the interpreter does
        atexit._run_exitfuncs()
    except SystemExit as stop:
        code = _exit_status(stop)
    except BaseException:
        code = code or 1
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except BaseException:
            code = code or 120  # as the interpreter does when stdout cannot be flushed at exit
    return code


def _exit_status(stop: SystemExit) -> int:
    if stop.code is None:
        return 0
    if isinstance(stop.code, int):
        return stop.code & 0xFF
    try:
        print(stop.code, file=sys.stderr)
    except BaseException:
        pass
    return 1


def _probe() -> dict:
    """What the harness's self check verifies from the inside."""
    import socket

    with open("/proc/self/uid_map") as handle:
        uid_map = handle.read().split()
    clone_newuser = 0x10000000
    return {"uid": os.getuid(), "gid": os.getgid(), "pid": os.getpid(), "uid_map": uid_map,
            "interfaces": [name for _, name in socket.if_nameindex()],
            "visible": [p for p in ("/root", "/work", "/home", "/tmp", "/etc") if os.path.exists(p)],
            "userns_refused": _LIBC.unshare(clone_newuser) != 0,
            "python": sys.version.split()[0]}


if __name__ == "__main__":
    main()
