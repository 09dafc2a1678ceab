"""The program sandbox (rla_core/envs/coding/sandbox.py) against a suite of hostile programs (normal programs:
test_sandbox_programs.py).

Hostile programs never run in the host's PID namespace: the `hostile` fixture runs this file as a script
under `unshare --pid --fork --mount-proc`; the script runs every hostile case there and prints one JSON
document, which the tests below assert on. Had a program escaped its sandbox, a kill(-1) or fork bomb
would reach only that outer namespace. Each hostile test that could pass expects "ESCAPED" (printed
only when an attack worked) or an output it cannot know, so `ok` would mean the sandbox failed. The
BATCH_HOSTILE programs run in one run_matrix batch, each between two benign victims whose outputs must
equal those of a run alone: what one program does must not reach the next of its sandbox."""
from __future__ import annotations

import ast
import hashlib
import json
import os
import secrets
import socket
import subprocess
import sys
import threading
import time
from dataclasses import replace
from pathlib import Path

import pytest

from rla_core.envs.coding import sandbox as sandbox_module
from rla_core.envs.coding.sandbox import SANDBOX_UID, Limits, Sandbox, TestCase

REPO = Path(__file__).resolve().parents[4]
HOSTILE_LIMITS = Limits(wall_s=1.0, cpu_s=1.0, memory_mb=256)
A = "ESCAPED"  # expected output of an attack test: printed only if the attack worked


def _tests(*rows: tuple[str, str, set[str]]) -> list[tuple[str, str, set[str]]]:
    return list(rows)


# name -> (program, [(stdin, expected, allowed statuses)]). TOKEN, PORT, HERE are filled in at run time.
HOSTILE: dict[str, tuple[str, list[tuple[str, str, set[str]]]]] = {
    "infinite_loop": ("while True:\n    pass\n", _tests(("", A, {"timeout"}))),
    "signal_ignoring_cpu_loop": ("""
import signal
for s in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGXCPU, signal.SIGALRM, signal.SIGUSR1):
    signal.signal(s, signal.SIG_IGN)
while True:
    pass
""", _tests(("", A, {"timeout"}))),
    "sleep_forever": ("import time\ntime.sleep(3600)\n", _tests(("", A, {"timeout"}))),
    "fork_bomb": ("""
import os
while True:
    try:
        os.fork()
    except OSError:
        pass
""", _tests(("", A, {"timeout", "memory"}))),
    "thread_bomb": ("""
import threading, time
while True:
    try:
        threading.Thread(target=time.sleep, args=(3600,), daemon=True).start()
    except Exception:
        pass
""", _tests(("", A, {"timeout"}))),
    "memory_at_once": ("x = bytearray(1 << 40)\nprint('ESCAPED')\n", _tests(("", A, {"memory"}))),
    "memory_gradual": ("chunks = []\nwhile True:\n    chunks.append(b'x' * (1 << 20))\n", _tests(("", A, {"memory"}))),
    "memory_spread_over_processes": ("""
import os, time
for _ in range(6):
    if os.fork() == 0:
        block = b'x' * (150 << 20)
        time.sleep(30)
        os._exit(0)
time.sleep(30)
""", _tests(("", A, {"memory"}))),
    "stdout_flood": ("while True:\n    print('x' * 1000)\n", _tests(("", A, {"output_limit"}))),
    "stderr_flood": ("import sys\nwhile True:\n    sys.stderr.write('y' * 1000 + '\\n')\n",
                     _tests(("", A, {"output_limit"}))),
    "one_huge_write": ("import os\nos.write(1, b'z' * (10 << 20))\n", _tests(("", A, {"output_limit"}))),
    "write_outside_scratch": ("""
import os
done = []
for path in ["/tmp/rla-escape-TOKEN", "/work/main/rla-escape-TOKEN", "HERE/rla-escape-TOKEN", "/etc/rla-escape-TOKEN",
             "/rla-escape-TOKEN", "/usr/rla-escape-TOKEN", "/usr/local/rla-escape-TOKEN", "/dev/rla-escape-TOKEN",
             "/proc/rla-escape-TOKEN", "/root/rla-escape-TOKEN", "/home/rla-escape-TOKEN",
             "../../rla-escape-TOKEN", "/tmp/rla-canary-TOKEN", "/usr/bin/python3", "/proc/sys/kernel/hostname",
             "/proc/1/oom_score_adj", "HERE/test_sandbox.py"]:
    try:
        with open(path, "a") as handle:
            handle.write("x")
        done.append(path)
    except OSError:
        pass
for path in ["/tmp", "/work", "/usr/local"]:
    try:
        os.makedirs(path + "/rla-escape-TOKEN/x")
        done.append(path)
    except OSError:
        pass
print("ESCAPED " + " ".join(done) if done else "contained")
""", _tests(("", A, {"wrong"}))),
    "network": ("""
import socket
hits = []
for host, port in (("127.0.0.1", PORT), ("1.1.1.1", 80), ("8.8.8.8", 53), ("10.0.0.1", 80)):
    try:
        socket.create_connection((host, port), timeout=0.5).close()
        hits.append(f"tcp {host}:{port}")
    except OSError:
        pass
try:
    socket.getaddrinfo("pypi.org", 443)
    hits.append("dns")
except OSError:
    pass
try:
    udp = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    udp.settimeout(0.5)
    udp.sendto(b"x", ("8.8.8.8", 53))
    udp.recv(16)
    hits.append("udp")
except OSError:
    pass
try:
    local = socket.socket(socket.AF_UNIX)
    local.connect("\\0rla-sandbox-TOKEN")
    hits.append("abstract unix socket")
except OSError:
    pass
names = [name for _, name in socket.if_nameindex()]
if names != ["lo"]:
    hits.append(f"interfaces {names}")
print("ESCAPED " + ", ".join(hits) if hits else "contained")
""", _tests(("", A, {"wrong"}))),
    "read_secrets": ("""
import os
hits = [f"env {k}={v}" for k, v in os.environ.items() if "SECRET" in k or "TOKEN" in v]
for path in ["/tmp/rla-secret-TOKEN", "/work/main/README.md", "HERE/test_sandbox.py", "/root/.bashrc",
             "/etc/shadow", "/etc/passwd", "/usr/local/etc/npmrc", "/proc/1/environ", "/home"]:
    try:
        hits.append(path + " " + open(path, "rb").read(200).decode(errors="replace"))
    except OSError:
        pass
print("ESCAPED " + "\\n".join(hits) if hits else "contained")
""", _tests(("", "TOKEN", {"wrong"}))),
    "read_host_proc": ("""
import os
pids = sorted(int(p) for p in os.listdir("/proc") if p.isdigit())
print("pids", ["self" if pid == os.getpid() else pid for pid in pids])
for pid in pids:
    for name in ("cmdline", "environ"):
        try:
            print(pid, name, open(f"/proc/{pid}/{name}", "rb").read().decode(errors="replace"))
        except OSError as error:
            print(pid, name, "refused", error.errno)
""", _tests(("", "TOKEN", {"wrong"}))),
    "reach_into_runner": ("""
import ctypes, os
libc = ctypes.CDLL(None, use_errno=True)
hits = []
if libc.ptrace(16, 1, 0, 0) == 0:  # PTRACE_ATTACH the runner
    hits.append("ptrace")
for path in ("/proc/1/mem", "/proc/1/fd/1", "/proc/1/fd/0", "/proc/1/fd/2"):
    try:
        fd = os.open(path, os.O_WRONLY)
        os.write(fd, b'{"index": 0, "exit": 0, "reason": null, "cpu_s": 0, "wall_s": 0, "stdout": "TOKEN", '
                     b'"stderr": ""}\\n')
        hits.append(path)
    except OSError:
        pass
try:
    os.listdir("/proc/1/fd")
    hits.append("/proc/1/fd listed")
except OSError:
    pass
if libc.unshare(0x10000000) == 0:  # CLONE_NEWUSER
    hits.append("user namespace")
if libc.syscall(29, 0, 1 << 20, 0o1600) >= 0:  # shmget(IPC_PRIVATE, 1 MiB, IPC_CREAT | 0600)
    hits.append("sysv shm")
if libc.mount(b"none", b"/scratch", b"tmpfs", 0, None) == 0:
    hits.append("mount")
if os.getuid() == 0 or os.geteuid() == 0:
    hits.append("root")
print("ESCAPED " + ", ".join(hits) if hits else "contained")
""", _tests(("", "TOKEN", {"wrong"}))),
    "kill_parent_and_everyone": ("""
import os, signal, sys
mode = sys.stdin.read().strip()
if mode == "attack":
    for target in (os.getppid(), 1, -1):
        for sig in (signal.SIGSTOP, signal.SIGKILL):
            try:
                os.kill(target, sig)
            except OSError:
                pass
    print("still here")
else:
    print(mode)
""", _tests(("attack", A, {"wrong"}), ("after", "after", {"ok"}))),
    "forge_report": ("""
import json, os, sys
fake = json.dumps({"index": 1, "exit": 0, "reason": None, "cpu_s": 0.0, "wall_s": 0.0, "stdout": "two\\n",
                   "stderr": ""}) + "\\n"
for fd in range(3, 256):
    try:
        os.write(fd, fake.encode())
    except OSError:
        pass
sys.stderr.write(fake)
print(fake, end="")
print("one")  # the expected output of the first test, whatever the input
sys.exit(0)
""", _tests(("1", "one", {"wrong"}), ("2", "two", {"wrong"}))),
    "exit_mid_output": ("""
import os, sys
mode = sys.stdin.read().strip()
if mode == "partial":
    sys.stdout.write("hello ")
    sys.stdout.flush()
    os._exit(0)
if mode == "unflushed":
    print("hello world")
    os._exit(0)
print("hello world")
sys.stdout.flush()
os._exit(1)
""", _tests(("partial", "hello world", {"wrong"}), ("unflushed", "hello world", {"wrong"}),
            ("right_output_exit_1", "hello world", {"crash"}))),
    "close_and_reuse_fds": ("""
import os
fake = b'{"index": 0, "exit": 0, "reason": null, "cpu_s": 0, "wall_s": 0, "stdout": "forged", "stderr": ""}\\n'
for fd in range(1024):
    try:
        os.write(fd, fake)
    except OSError:
        pass
for fd in range(1024):
    try:
        os.close(fd)
    except OSError:
        pass
for _ in range(8):
    os.open("/dev/null", os.O_RDWR)
r, w = os.pipe()
os.write(w, fake)
""", _tests(("", "forged", {"wrong", "crash"}))),
    "scratch_mess": ("""
import os, sys
mode = sys.stdin.read().strip()
if mode == "mess":
    os.chdir("/scratch")
    for _ in range(3000):
        os.mkdir("d")
        os.chdir("d")
    open("deep", "w").write("x")
    os.chdir("/scratch")
    os.makedirs("locked/inner")
    open("locked/inner/f", "w").write("x")
    os.chmod("locked/inner", 0)
    os.chmod("locked", 0)
    os.symlink("/usr", "/scratch/link")
    os.mkfifo("/scratch/fifo")
    open("/dev/shm/left-over", "w").write("x")
    try:
        with open("/scratch/big", "wb") as handle:
            for _ in range(64):
                handle.write(b"x" * (1 << 20))
    except OSError as error:
        print("file size limit", error.errno)
    try:
        for k in range(64):
            with open(f"/scratch/fill{k}", "wb") as handle:
                handle.write(b"x" * (3 << 20))
    except OSError as error:
        print("scratch full", error.errno)
    os.chmod("/scratch", 0)
    print("messed")
else:
    print(sorted(os.listdir("/scratch")), sorted(os.listdir(".")), os.listdir("/dev/shm"))
""", _tests(("mess", A, {"wrong", "crash"}), ("check", "['1'] [] []", {"ok"}))),
    "inode_flood": ("""
import os
os.chdir("/scratch")
k = 0
while True:
    try:
        os.mkdir(f"d{k}")
    except OSError:
        open(f"f{k}", "w").close()
    k += 1
""", _tests(("", A, {"memory"}))),
}
# run one at a time by the script (they watch processes or the clock around the call)
DAEMON = """
import os, sys, time
mode = sys.stdin.read().strip()
if mode == "spawn":
    if os.fork() == 0:
        os.setsid()
        if os.fork() == 0:
            time.sleep(0.8)
            for path in ("/tmp/rla-daemon-TOKEN", "/scratch/daemon-TOKEN", "/scratch/1/daemon-TOKEN"):
                try:
                    open(path, "w").write("x")
                except OSError:
                    pass
            try:
                os.kill(-1, 9)
            except OSError:
                pass
            os._exit(0)
        os._exit(0)
    print("spawned")
else:
    time.sleep(1.2)
    print("clean" if not os.path.exists("/scratch/daemon-TOKEN") else "ESCAPED daemon wrote")
"""
SLOW_ECHO = "import sys, time\ntime.sleep(0.3)\nprint(sys.stdin.read())\n"
SEQUENTIAL = ("daemon_survivor",)
HOSTILE_PROGRAMS = len(HOSTILE) + len(SEQUENTIAL)  # 23
FAULTS = ("runner_killed_from_outside", "outer_deadline")  # the harness's failure paths, benign programs

# ------------------------------------------------------------------ hostile programs amid benign ones, one batch
# run_matrix runs several programs one after another in one sandbox. A victim program reports what it finds
# (processes, folders, their modes, ACLs and free space, its priority, CPU set and rlimits) and writes and
# reads back files; its output must equal that of a reference run alone in a sandbox of its own, so `ok`
# means nothing of the hostile program before it was left. SRC-, INP- and OUT- markers (16 hex digits) in
# the victims' sources, inputs and outputs are what the memory scanner must not find.
VICTIM = """# SRC-MARK
import os, resource, sys
token = sys.stdin.read().split()[0]
for path in ("note", "/dev/shm/note"):
    with open(path, "w") as handle:
        handle.write(token)
paths = ("/scratch", "/dev/shm", ".", "note", "/dev/shm/note")
state = {
    "alone": sorted(int(p) for p in os.listdir("/proc") if p.isdigit()) == [1, os.getpid()],
    "cwd": os.getcwd(), "scratch": sorted(os.listdir("/scratch")), "here": sorted(os.listdir(".")),
    "shm": sorted(os.listdir("/dev/shm")), "modes": [oct(os.stat(p).st_mode) for p in paths],
    "xattrs": [os.listxattr(p) for p in paths],
    "read_back": all(open(p).read() == token for p in ("note", "/dev/shm/note")),
    "free": [(os.statvfs(p).f_bfree, os.statvfs(p).f_ffree) for p in ("/scratch", "/dev/shm")],
    "nice": os.getpriority(os.PRIO_PROCESS, 0), "policy": os.sched_getscheduler(0),
    "cpus": sorted(os.sched_getaffinity(0)),
    "rlimits": [resource.getrlimit(getattr(resource, n)) for n in sorted(dir(resource)) if n.startswith("RLIMIT_")],
}
print("OUT-" + token[4:][::-1])
print(state)
"""
ENDS_RUNNER = ("batch_time_bomb", "batch_tamper_with_runner", "batch_squeeze_runner")  # each: a fresh sandbox after it
# name -> (program, [(stdin, expected, allowed statuses)]), in batch order; a victim runs before and after each
BATCH_HOSTILE: dict[str, tuple[str, list[tuple[str, str, set[str]]]]] = {
    "batch_flood": ("import os\nwhile True:\n    os.write(1, b'OUT-0123456789abcdef\\n' * 1000)\n",
                    _tests(("", A, {"output_limit"}))),
    "batch_memory_scan": ("""
import re
pattern = re.compile(rb"(?:SRC|INP|OUT)-[0-9a-f]{16}")
found = set()
with open("/proc/self/maps") as maps:
    regions = [line.split() for line in maps]
with open("/proc/self/mem", "rb", buffering=0) as mem:
    for fields in regions:
        if not fields[1].startswith("rw"):
            continue
        start, end = (int(x, 16) for x in fields[0].split("-"))
        for at in range(start, end, 1 << 20):
            try:
                mem.seek(at)
                chunk = mem.read(min(end - at, (1 << 20) + 64))
            except (OSError, ValueError, OverflowError):
                break
            found.update(match.decode() for match in pattern.findall(chunk))
print(sorted(found))
""", _tests(("INP-TOKEN", A, {"wrong"}), ("INP-TOKEN", A, {"wrong"}))),  # its own other input: not seen either
    "batch_daemon": ("""
import os, time
if os.fork() == 0:
    os.setsid()
    if os.fork() == 0:
        time.sleep(0.05)
        for path in ("/scratch/0/daemon", "/scratch/1/daemon", "/scratch/daemon", "/dev/shm/daemon"):
            try:
                open(path, "w").write("x")
            except OSError:
                pass
        time.sleep(3600)
    os._exit(0)
time.sleep(0.1)
print("spawned")
""", _tests(("", A, {"wrong"}))),
    "batch_fill_scratch": ("""
import os, struct
os.makedirs("/scratch/tree/" + "d/" * 300)
for k in range(2000):
    open(f"/scratch/f{k}", "w").close()
try:
    for k in range(64):
        with open(f"/scratch/fill{k}", "wb") as handle:
            handle.write(b"x" * (3 << 20))
except OSError as error:
    print("scratch full", error.errno)
no_access = struct.pack("<I", 2) + b"".join(struct.pack("<HHI", tag, 0, 0xFFFFFFFF) for tag in (1, 4, 0x20))
for root in ("/scratch", "/dev/shm", "."):
    for name, value in (("system.posix_acl_default", no_access), ("user.left", b"x")):
        try:
            os.setxattr(root, name, value)  # a default ACL: files made here later are out of their owner's reach
        except OSError as error:
            print(root, name, "refused", error.errno)
os.chmod("/scratch/tree", 0)
os.chmod("/scratch", 0o1777)
print("filled")
""", _tests(("", A, {"wrong"}))),
    "batch_shm": ("""
import mmap, os
fd = os.open("/dev/shm/left-over", os.O_CREAT | os.O_RDWR, 0o600)
os.ftruncate(fd, 2 << 20)
mmap.mmap(fd, 2 << 20)[:4] = b"left"
os.mkfifo("/dev/shm/fifo")
os.symlink("/scratch", "/dev/shm/link")
os.mkdir("/dev/shm/sem.dir", 0)
try:
    for k in range(8):
        with open(f"/dev/shm/fill{k}", "wb") as handle:
            handle.write(b"x" * (3 << 20))
except OSError as error:
    print("shm full", error.errno)
os.chmod("/dev/shm", 0)
print("left")
""", _tests(("", A, {"wrong"}))),
    "batch_sleep": ("import os, time\nif os.fork() == 0:\n    time.sleep(3600)\ntime.sleep(3600)\n",
                    _tests(("", A, {"timeout"}))),
    "batch_time_bomb": ("""
import resource
resource.prlimit(1, resource.RLIMIT_CPU, (1, 1))  # the runner would die at 1 s of CPU, amid a later program
print("armed")
""", _tests(("", A, {"wrong"}), ("", A, {"crash"}))),
    "batch_tamper_with_runner": ("""
import os, resource
done = []
for name, call in (("stack", lambda: resource.prlimit(1, resource.RLIMIT_STACK, (1 << 20, 1 << 20))),
                   ("nofile", lambda: resource.prlimit(1, resource.RLIMIT_NOFILE, (32, 32))),
                   ("nice", lambda: os.setpriority(os.PRIO_PROCESS, 1, 19)),
                   ("nice_user", lambda: os.setpriority(os.PRIO_USER, 0, 19)),
                   ("cpus", lambda: os.sched_setaffinity(1, {min(os.sched_getaffinity(1))})),
                   ("idle", lambda: os.sched_setscheduler(1, os.SCHED_IDLE, os.sched_param(0)))):
    try:
        call()
        done.append(name)
    except OSError as error:
        done.append(f"{name} refused {error.errno}")
print("tampered", done)
""", _tests(("", A, {"wrong"}), ("", A, {"crash"}))),
    "batch_squeeze_runner": ("""
import resource
resource.prlimit(1, resource.RLIMIT_AS, (1 << 20, 1 << 20))  # the runner's next mapping fails
print("squeezed")
""", _tests(("", A, {"wrong", "crash"}), ("", A, {"crash"}))),
}
FAST_ECHO = "import sys, time\ntime.sleep(0.2)\nprint(sys.stdin.read())\n"
BATCH_FAULTS = ("runner_killed_mid_batch",)


# ------------------------------------------------------------------ the script (inside the outer PID namespace)
def sandbox_processes() -> list[str]:
    """Processes of the sandbox uid visible in this PID namespace (and what they are), after reaping the
    zombies re-parented to us, as the init of this namespace (a killed sandbox's PID 1)."""
    try:
        while os.waitpid(-1, os.WNOHANG)[0]:
            pass
    except ChildProcessError:
        pass
    found = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            status = Path(f"/proc/{name}/status").read_text()
            command = Path(f"/proc/{name}/cmdline").read_bytes().replace(b"\0", b" ")[:80].decode(errors="replace")
        except OSError:
            continue
        uid = int(status.split("Uid:")[1].split()[0])
        if uid == SANDBOX_UID:
            found.append(f"{name} {command}")
    return found


def _fill(text: str, token: str, port: int) -> str:
    return text.replace("TOKEN", token).replace("PORT", str(port)).replace("HERE", str(Path(__file__).parent))


class _Listener:
    """A TCP server on the host's loopback and an abstract unix socket, counting connections."""

    def __init__(self, token: str):
        self.accepted = 0
        self.tcp = socket.create_server(("127.0.0.1", 0))
        self.unix = socket.socket(socket.AF_UNIX)
        self.unix.bind(f"\0rla-sandbox-{token}")
        self.unix.listen()
        for server in (self.tcp, self.unix):
            threading.Thread(target=self._accept, args=(server,), daemon=True).start()

    def _accept(self, server: socket.socket) -> None:
        while True:
            try:
                server.accept()[0].close()
                self.accepted += 1
            except OSError:
                return


def _kill_runner_when(child_nspid: str, stop: threading.Event) -> None:
    """SIGKILL the sandbox's PID 1 (the runner) once its child with this namespace pid exists."""
    while not stop.is_set():
        pids = {}
        for name in os.listdir("/proc"):
            try:
                nspid = Path(f"/proc/{name}/status").read_text().split("NSpid:")[1].split("\n")[0].split()
            except (OSError, IndexError):
                continue
            if len(nspid) == 2:
                pids[nspid[1]] = int(nspid[0])
        if child_nspid in pids and "1" in pids:
            os.kill(pids["1"], 9)
            return
        time.sleep(0.01)


def run_hostile_suite() -> dict:
    token = secrets.token_hex(8)
    os.environ["RLA_SANDBOX_SECRET"] = token  # the harness's environment must not reach the programs
    secret = Path(f"/tmp/rla-secret-{token}")
    secret.write_text(token)
    secret.chmod(0o600)
    canary = Path(f"/tmp/rla-canary-{token}")
    canary.write_text("canary")
    try:
        return _run_cases(token, canary)
    finally:
        secret.unlink()
        canary.unlink()


def _run_cases(token: str, canary: Path) -> dict:
    started = time.monotonic()
    watched = [REPO / "README.md", Path(sandbox_module.__file__), Path(__file__)]
    before = {str(p): hashlib.sha256(p.read_bytes()).hexdigest() for p in watched}
    listener = _Listener(token)
    port = listener.tcp.getsockname()[1]
    sandbox = Sandbox(HOSTILE_LIMITS, workers=2)
    names = list(HOSTILE)
    jobs = [(_fill(HOSTILE[n][0], token, port), [TestCase(stdin, _fill(expected, token, port))
                                                 for stdin, expected, _ in HOSTILE[n][1]]) for n in names]
    out: dict = {"token": token, "verdicts": {}, "leftovers": {}, "launches": {}}
    for name, verdicts in zip(names, sandbox.run_matrix(jobs)):
        out["verdicts"][name] = [v.to_dict() for v in verdicts]
    out["leftovers"]["matrix"] = sandbox_processes()
    _run_batch_cases(token, port, out)

    daemon = _fill(DAEMON, token, port)
    verdicts = sandbox.run_tests(daemon, [TestCase("spawn", A), TestCase("check", "clean")],
                                 replace(HOSTILE_LIMITS, wall_s=2.0))
    out["leftovers"]["daemon_survivor"] = sandbox_processes()
    verdicts += sandbox.run_tests(daemon, [TestCase("spawn", A)])  # its daemon would write at 0.8 s
    out["leftovers"]["daemon_survivor"] += sandbox_processes()
    out["verdicts"]["daemon_survivor"] = [v.to_dict() for v in verdicts]

    stop = threading.Event()
    killer = threading.Thread(target=_kill_runner_when, args=("3", stop))  # ns pid 3: the second test's child
    killer.start()
    verdicts = sandbox.run_tests(SLOW_ECHO, [TestCase(str(k), str(k)) for k in range(3)],
                                 replace(HOSTILE_LIMITS, wall_s=5))
    stop.set()
    killer.join()
    out["verdicts"]["runner_killed_from_outside"] = [v.to_dict() for v in verdicts]
    out["leftovers"]["runner_killed_from_outside"] = sandbox_processes()

    launches = _count_launches()
    stop = threading.Event()
    killer = threading.Thread(target=_kill_runner_when, args=("6", stop))  # ns pid 6: item 1's second test
    killer.start()
    verdicts = Sandbox(replace(HOSTILE_LIMITS, wall_s=5), workers=1, batch_programs=3).run_matrix(
        [(FAST_ECHO, [TestCase(f"{k}{j}", f"{k}{j}") for j in range(3)]) for k in range(3)])
    stop.set()
    killer.join()
    out["verdicts"]["runner_killed_mid_batch"] = [[v.to_dict() for v in row] for row in verdicts]
    out["launches"]["runner_killed_mid_batch"] = len(launches)
    out["leftovers"]["runner_killed_mid_batch"] = sandbox_processes()
    _restore_launch()

    margin = sandbox_module.STARTUP_MARGIN_S
    sandbox_module.STARTUP_MARGIN_S = -4.0  # outer deadline 1.5 s, before the runner's own 5 s wall limit
    try:
        deadline_started = time.monotonic()
        verdicts = sandbox.run_tests("import time\ntime.sleep(3600)\n", [TestCase("", A)],
                                     replace(HOSTILE_LIMITS, wall_s=5))
        out["outer_deadline_s"] = time.monotonic() - deadline_started
    finally:
        sandbox_module.STARTUP_MARGIN_S = margin
    out["verdicts"]["outer_deadline"] = [v.to_dict() for v in verdicts]
    out["leftovers"]["outer_deadline"] = sandbox_processes()

    time.sleep(1.0)  # past the daemons' 0.8 s: had one survived, it would have written by now
    out["leftovers"]["end"] = sandbox_processes()
    out["host_files_created"] = [str(p) for p in (
        *Path("/tmp").glob(f"rla-escape-{token}*"), *Path("/tmp").glob(f"rla-daemon-{token}*"),
        *REPO.glob(f"rla-escape-{token}*"), *Path(__file__).parent.glob(f"rla-escape-{token}*"),
        *Path("/etc").glob(f"rla-escape-{token}*"), *Path("/").glob(f"rla-escape-{token}*"),
        *Path("/usr").glob(f"rla-escape-{token}*"), *Path("/home").glob(f"rla-escape-{token}*"))]
    out["canary_unchanged"] = canary.read_text() == "canary"
    out["watched_unchanged"] = before == {str(p): hashlib.sha256(p.read_bytes()).hexdigest() for p in watched}
    out["connections_accepted"] = listener.accepted
    out["elapsed_s"] = time.monotonic() - started
    return out


_LAUNCH = sandbox_module._launch


def _count_launches() -> list[float]:
    """Count sandbox starts (their outer deadlines) from now on, until _restore_launch."""
    launches: list[float] = []

    def counting(job: bytes, limits: Limits, deadline_s: float):
        launches.append(deadline_s)
        return _LAUNCH(job, limits, deadline_s)

    sandbox_module._launch = counting
    return launches


def _restore_launch() -> None:
    sandbox_module._launch = _LAUNCH


def _run_batch_cases(token: str, port: int, out: dict) -> None:
    """Every BATCH_HOSTILE program between two victims, all in one run_matrix batch; the victims' expected
    outputs are those of a reference run of each alone, in a sandbox of its own."""
    victims = []
    for _ in range(len(BATCH_HOSTILE) + 1):
        source = VICTIM.replace("MARK", secrets.token_hex(8))
        victims.append((source, [TestCase(f"INP-{secrets.token_hex(8)}\n") for _ in range(2)]))
    alone = Sandbox(HOSTILE_LIMITS, workers=2, batch_programs=1)
    references = alone.run_matrix(victims)
    out["batch_references"] = [[v.to_dict() for v in row] for row in references]
    jobs = []
    for k, (name, (program, tests)) in enumerate(BATCH_HOSTILE.items()):
        source, cases = victims[k]
        jobs.append((source, [TestCase(c.stdin, v.stdout) for c, v in zip(cases, references[k])]))
        jobs.append((_fill(program, token, port), [TestCase(_fill(stdin, token, port), _fill(expected, token, port))
                                                   for stdin, expected, _ in tests]))
    source, cases = victims[-1]
    jobs.append((source, [TestCase(c.stdin, v.stdout) for c, v in zip(cases, references[-1])]))
    launches = _count_launches()
    try:
        results = Sandbox(HOSTILE_LIMITS, workers=1, batch_programs=len(jobs)).run_matrix(jobs)
    finally:
        _restore_launch()
    out["launches"]["batch"] = len(launches)
    out["batch_victims"] = [[v.to_dict() for v in row] for row in results[0::2]]
    for name, row in zip(BATCH_HOSTILE, results[1::2]):
        out["verdicts"][name] = [v.to_dict() for v in row]
    out["leftovers"]["batch"] = sandbox_processes()


# ------------------------------------------------------------------ the tests
@pytest.fixture(scope="module")
def hostile() -> dict:
    if os.geteuid() != 0:
        pytest.skip("the hostile suite needs root for its outer PID namespace (unshare --pid)")
    done = subprocess.run(["unshare", "--pid", "--fork", "--mount-proc", sys.executable, __file__, "--hostile"],
                          capture_output=True, text=True, timeout=300, cwd=REPO)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.splitlines()[-1])


@pytest.mark.parametrize("name", list(HOSTILE))
def test_hostile_program_is_contained_and_never_scored_as_passing(hostile, name):
    verdicts = hostile["verdicts"][name]
    statuses, wanted = [v["status"] for v in verdicts], [allowed for _, _, allowed in HOSTILE[name][1]]
    assert len(statuses) == len(wanted) and all(s in w for s, w in zip(statuses, wanted)), (statuses, wanted)
    for verdict, (_, expected, allowed) in zip(verdicts, HOSTILE[name][1]):
        if "ok" not in allowed:
            assert not verdict["passed"]
            assert "ESCAPED" not in verdict["stdout"], verdict["stdout"]
            assert hostile["token"] not in verdict["stdout"] + verdict["stderr"]


def test_attacks_that_could_only_fail_report_why(hostile):
    v = hostile["verdicts"]
    assert all(x["stdout"].strip() == "contained" for k in ("write_outside_scratch", "network", "read_secrets",
                                                            "reach_into_runner") for x in v[k])
    assert v["read_host_proc"][0]["stdout"].startswith("pids [1, 'self']\n")  # the runner and itself only
    assert "still here" in v["kill_parent_and_everyone"][0]["stdout"]
    assert v["forge_report"][1]["stdout"].endswith("one\n")
    assert v["exit_mid_output"][0]["stdout"] == "hello " and v["exit_mid_output"][1]["stdout"] == ""
    assert v["exit_mid_output"][2]["exit_code"] == 1
    assert "scratch full" in v["scratch_mess"][0]["stdout"] or v["scratch_mess"][0]["status"] == "crash"
    assert v["memory_at_once"][0]["stderr"].strip().endswith("MemoryError")
    for name in ("stdout_flood", "one_huge_write"):
        assert len(v[name][0]["stdout"]) == HOSTILE_LIMITS.output_bytes


def test_nothing_survives_any_call_and_nothing_lands_outside_scratch(hostile):
    assert hostile["leftovers"] == {key: [] for key in hostile["leftovers"]}
    assert hostile["host_files_created"] == []
    assert hostile["canary_unchanged"] and hostile["watched_unchanged"]
    assert hostile["connections_accepted"] == 0


def test_daemon_is_killed_before_the_next_test(hostile):
    spawn, check, spawn_again = hostile["verdicts"]["daemon_survivor"]
    assert spawn["status"] == spawn_again["status"] == "wrong"
    assert (check["status"], check["stdout"]) == ("ok", "clean\n")


def test_a_dead_runner_fails_the_remaining_tests(hostile):
    first, second, third = hostile["verdicts"]["runner_killed_from_outside"]
    assert first["status"] == "ok"
    assert second["status"] == third["status"] == "crash"
    assert "runner stopped" in third["stderr"]


def test_every_case_ran(hostile):
    assert set(hostile["verdicts"]) == {*HOSTILE, *SEQUENTIAL, *FAULTS, *BATCH_HOSTILE, *BATCH_FAULTS}


@pytest.mark.parametrize("name", list(BATCH_HOSTILE))
def test_hostile_program_amid_a_batch_gets_its_own_verdicts(hostile, name):
    verdicts = hostile["verdicts"][name]
    statuses, wanted = [v["status"] for v in verdicts], [allowed for _, _, allowed in BATCH_HOSTILE[name][1]]
    assert len(statuses) == len(wanted) and all(s in w for s, w in zip(statuses, wanted)), (statuses, wanted)
    assert not any(v["passed"] or "ESCAPED" in v["stdout"] for v in verdicts)
    if name in ENDS_RUNNER:  # the runner stops after the test that changed it; the program's later tests crash
        assert ("changed the runner's rlimits" in verdicts[1]["stderr"]
                or (name == "batch_squeeze_runner" and "runner stopped" in verdicts[1]["stderr"])), verdicts


def test_programs_before_and_after_a_hostile_one_get_exactly_their_verdicts_alone(hostile):
    references, victims = hostile["batch_references"], hostile["batch_victims"]
    assert len(victims) == len(references) == len(BATCH_HOSTILE) + 1
    for reference in references:  # alone, each victim found a clean sandbox
        for verdict in reference:
            assert verdict["status"] == "ok", verdict
            state = ast.literal_eval(verdict["stdout"].splitlines()[1])
            assert state["alone"] and state["read_back"] and state["shm"] == state["here"] == ["note"]
            assert state["xattrs"] == [[]] * 5 and state["nice"] == 0 and state["policy"] == os.SCHED_OTHER
    for position, (row, reference) in enumerate(zip(victims, references)):  # in the batch: the same outputs
        assert [v["status"] for v in row] == ["ok", "ok"], (position, row, reference)
        assert [v["stdout"] for v in row] == [v["stdout"] for v in reference]


def test_batch_shared_sandboxes_and_restarted_only_after_a_runner_ending_program(hostile):
    # one sandbox for the whole batch; each program that ends its runner runs again first in a fresh one
    # (where it ends it again, and is blamed), and the programs after it in a third
    assert hostile["launches"]["batch"] == 2 * len(ENDS_RUNNER) + 1, hostile["launches"]


def test_memory_of_a_batch_shows_nothing_of_the_other_programs(hostile):
    for verdict in hostile["verdicts"]["batch_memory_scan"]:
        assert verdict["stdout"] == "[]\n", verdict["stdout"][:2000]


def test_a_runner_killed_mid_batch_reruns_the_unfinished_programs(hostile):
    # killed amid the second program: it was not the first of its sandbox, so it and the third run again
    rows = hostile["verdicts"]["runner_killed_mid_batch"]
    assert [[(v["status"], v["stdout"]) for v in row] for row in rows] == [
        [("ok", f"{k}{j}\n") for j in range(3)] for k in range(3)]
    assert hostile["launches"]["runner_killed_mid_batch"] == 2


def test_the_outer_deadline_kills_the_whole_sandbox(hostile):
    (verdict,) = hostile["verdicts"]["outer_deadline"]
    assert verdict["status"] == "crash" and "outer deadline" in verdict["stderr"]
    assert hostile["outer_deadline_s"] < 4.0


if __name__ == "__main__" and sys.argv[1:] == ["--hostile"]:
    if os.getpid() != 1:
        sys.exit("refusing to run hostile programs outside a PID namespace of their own (run via pytest)")
    print(json.dumps(run_hostile_suite()))
