"""The hostile suite's script: run as `python hostile_suite.py --hostile`, by test_sandbox_hostile.py's
`hostile` fixture, under `unshare --pid --fork --mount-proc` only (it refuses to run unless it is PID 1 of
a PID namespace of its own). It runs every hostile program of hostile_programs.py in the sandbox, and the
harness's fault scenarios, and prints one JSON document that the tests assert on. Had a program escaped its
sandbox, a kill(-1) or fork bomb would reach only that outer namespace."""
from __future__ import annotations

import hashlib
import json
import os
import secrets
import socket
import sys
import threading
import time
from dataclasses import replace
from pathlib import Path

# run as a script: this folder is first on sys.path
from hostile_programs import A, BATCH_HOSTILE, DAEMON, FAST_ECHO, HOSTILE, HOSTILE_LIMITS, SLOW_ECHO, VICTIM

from rla_core.envs.coding import sandbox as sandbox_module
from rla_core.envs.coding.sandbox import SANDBOX_UID, Limits, Sandbox, TestCase

REPO = Path(__file__).resolve().parents[4]


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


if __name__ == "__main__" and sys.argv[1:] == ["--hostile"]:
    if os.getpid() != 1:
        sys.exit("refusing to run hostile programs outside a PID namespace of their own (run via pytest)")
    print(json.dumps(run_hostile_suite()))
