"""The program sandbox (rla_core/envs/coding/sandbox.py) against a suite of hostile programs (normal programs:
test_sandbox_programs.py).

Hostile programs never run in the host's PID namespace: the `hostile` fixture runs hostile_suite.py as a
script under `unshare --pid --fork --mount-proc`; the script runs every hostile case (hostile_programs.py)
there and prints one JSON document, which the tests below assert on. Had a program escaped its sandbox, a
kill(-1) or fork bomb would reach only that outer namespace. Each hostile test that could pass expects
"ESCAPED" (printed only when an attack worked) or an output it cannot know, so `ok` would mean the sandbox
failed. The BATCH_HOSTILE programs run in one run_matrix batch, each between two benign victims whose outputs
must equal those of a run alone: what one program does must not reach the next of its sandbox."""
from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.rla_core.envs.coding.hostile_programs import (BATCH_FAULTS, BATCH_HOSTILE, ENDS_RUNNER, FAULTS, HOSTILE,
                                                         HOSTILE_LIMITS, SEQUENTIAL)

REPO = Path(__file__).resolve().parents[4]
SUITE = Path(__file__).with_name("hostile_suite.py")  # the script that runs the hostile programs, as PID 1


# ------------------------------------------------------------------ the tests
@pytest.fixture(scope="module")
def hostile() -> dict:
    if os.geteuid() != 0:
        pytest.skip("the hostile suite needs root for its outer PID namespace (unshare --pid)")
    done = subprocess.run(["unshare", "--pid", "--fork", "--mount-proc", sys.executable, SUITE, "--hostile"],
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

