"""The hostile programs of the sandbox suite (test_sandbox_hostile.py), as data: never run here. Only
hostile_suite.py runs them, as a script inside an outer PID namespace of its own
(`unshare --pid --fork --mount-proc`, started by test_sandbox_hostile.py's `hostile` fixture).

Each hostile test that could pass expects "ESCAPED" (printed only when an attack worked) or an output it
cannot know, so `ok` would mean the sandbox failed. The BATCH_HOSTILE programs run in one run_matrix batch,
each between two benign victims whose outputs must equal those of a run alone: what one program does must
not reach the next of its sandbox."""
from __future__ import annotations

from rla_core.envs.coding.sandbox import Limits

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
             "/proc/1/oom_score_adj", "HERE/hostile_suite.py"]:
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
for path in ["/tmp/rla-secret-TOKEN", "/work/main/README.md", "HERE/hostile_suite.py", "/root/.bashrc",
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
