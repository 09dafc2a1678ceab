"""The coding task-set gate: the loaders' real output passes; each kind of bad task fails with the
expectation that names it."""
from __future__ import annotations

import copy
import json
import math
import random
from pathlib import Path

import pytest

from rla_core.bootstrap import generate_tasks
from rla_core.envs.coding.loaders import load_humaneval, load_problem_file
from rla_core.envs.coding.problems import CODING, MAX_IO_CHARS
from rla_core.schemas import Task
from tasks.checks.gates import GateFailed, check_coding_tasks

SAMPLE = Path(__file__).resolve().parents[3] / "data" / "coding" / "sample_problems.jsonl"
HELDOUT = {"heldout-0000-v0-00000000"}


@pytest.fixture(scope="module")
def good() -> list[Task]:
    """Real producers: the shipped sample file, two HumanEval problems and two procedural problems."""
    procedural = generate_tasks(CODING, {}, 2, random.Random(0), "gen-", set())
    return load_problem_file(SAMPLE) + load_humaneval(limit=2) + procedural


def _failed(result) -> set[tuple[str, str | None]]:
    return {(outcome.expectation, outcome.column) for outcome in result.failures()}


def _bad(good: list[Task], task_id: str = "bad-0000-v0-12345678", env: str = "coding", **spec_changes) -> Task:
    """A copy of the first sample task with some spec fields replaced (None removes the field)."""
    spec = copy.deepcopy(good[0].spec)
    for key, value in spec_changes.items():
        if value is None:
            spec.pop(key, None)
        else:
            spec[key] = value
    return Task(task_id=task_id, slot_id=task_id.split("-v")[0], env=env, spec=spec)


def test_good_coding_set_passes_and_is_json(good):
    result = check_coding_tasks(good, HELDOUT)
    assert result.success, result.failures()
    assert result.rows == 9 and result.evaluated == 12 and result.failed == 0
    assert json.loads(json.dumps(result.to_dict(), allow_nan=False))["gate"] == "coding_tasks"
    assert check_coding_tasks(good).success  # no held-out set given


def test_each_bad_task_fails_with_its_expectation(good):
    between, in_set = "expect_column_values_to_be_between", "expect_column_values_to_be_in_set"
    cases = {
        ("expect_column_values_to_be_unique", "task_id"): [good[1].model_copy()],
        (in_set, "env"): [_bad(good, env="household")],
        (between, "n_tests"): [_bad(good, tests=[])],
        (between, "statement_chars"): [_bad(good, statement="")],
        ("expect_column_values_to_not_be_null", "time_limit_s"): [_bad(good, time_limit_s="2")],
        (between, "max_io_chars"): [_bad(good, tests=[{"stdin": "x" * (MAX_IO_CHARS + 1), "stdout": "1\n"}])],
        (in_set, "all_expected_empty"): [_bad(good, tests=[{"stdin": "1\n", "stdout": ""},
                                                           {"stdin": "2\n", "stdout": "\n"}])],
        (in_set, "call_tests_without_entry_point"): [_bad(good, call_tests=[{"code": "assert f() == 1"}],
                                                         entry_point=None)],
        ("expect_column_values_to_not_be_in_set", "task_id"): [_bad(good, task_id=sorted(HELDOUT)[0])],
    }
    for expected, extra in cases.items():
        result = check_coding_tasks(good + extra, HELDOUT)
        assert _failed(result) == {expected}, expected
        json.dumps(result.to_dict(), allow_nan=False)


@pytest.mark.parametrize("limit", [0, -1, 30.5, 31, math.inf])
def test_time_limit_outside_zero_to_thirty_seconds_fails(good, limit):
    result = check_coding_tasks(good + [_bad(good, time_limit_s=limit)], HELDOUT)
    assert _failed(result) == {("expect_column_values_to_be_between", "time_limit_s")}


def test_time_limit_bounds_and_default(good):
    edge = [_bad(good, "edge-0000-v0-1", time_limit_s=30), _bad(good, "edge-0001-v0-2", time_limit_s=0.001),
            _bad(good, "edge-0002-v0-3", time_limit_s=None)]  # absent: the spec default, 2 s
    assert check_coding_tasks(good + edge, HELDOUT).success
    nan = check_coding_tasks(good + [_bad(good, time_limit_s=math.nan)], HELDOUT)
    assert _failed(nan) == {("expect_column_values_to_not_be_null", "time_limit_s")}


def test_empty_set_fails_unless_allowed():
    result = check_coding_tasks([], HELDOUT)
    assert _failed(result) == {("expect_table_row_count_to_be_between", None)}
    with pytest.raises(GateFailed, match="coding_tasks"):
        raise GateFailed(result)
    assert check_coding_tasks([], HELDOUT, min_rows=0).success
