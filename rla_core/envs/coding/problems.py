"""Coding problems: the task spec of the coding setting, its validation, and the procedural problem
families of the CPU quickstart (docs/coding.md).

A coding task's spec is a problem statement with ground-truth tests (stdin → expected stdout, the
paper's format; optionally function-call tests: Python code that must run without error after the
program) and a time limit per test. `CodingFamily` gives coding tasks the environment-family interface
the task store, adaptation and rewriters already use (validate, generate, adjust, spec_from_answer…);
it has no turn-by-turn episodes.

The procedural families are small stdin/stdout transformations with parameters that a tiny model can
learn from scratch:

- `int`: read an integer, apply a pipeline of integer operations (add k, subtract k, multiply by k,
  modulo k, square), print the result;
- `str`: read a lowercase word, apply a pipeline of string operations (reverse, upper-case, repeat k
  times, keep the first k letters, drop the first k letters, append a letter), print the result.

A generated spec keeps its pipeline (`family`, `ops`, `seed`): the statement, the reference program
and the ground-truth tests all derive from it, so a rewrite changes the pipeline itself (one operation
more or less) and the problem stays the same problem, one step harder or easier.
"""
# Over 400 lines: the operation table of the procedural problems (about 200 lines of data) with its spec.
from __future__ import annotations

import hashlib
import json
import random
import string
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from rla_core.envs.base import Adjustment, SpecError, register_environment
from rla_core.schemas import CriticFeedback

MIN_TESTS = 1  # a loaded problem
MIN_REWRITE_TESTS = 4  # a rewritten problem (DESIGN §2.5)
MAX_TESTS = 64
MAX_STATEMENT_CHARS = 8000
MAX_IO_CHARS = 4000
GT_TESTS = 5  # ground-truth tests of a generated problem
MAX_OPS = 4
KNOB_RANGES = {"ops": (1, MAX_OPS), "max_const": (2, 9)}
DEFAULT_KNOBS = {"families": ["int", "str"], "ops": 1, "max_const": 9}


class IOTest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    stdin: str = Field(max_length=MAX_IO_CHARS)
    stdout: str = Field(max_length=MAX_IO_CHARS)


class CallTest(BaseModel):
    """Python code run after the program (e.g. `assert add(1, 2) == 3`); passes when it exits 0."""

    model_config = ConfigDict(extra="forbid")

    code: str = Field(min_length=1, max_length=MAX_IO_CHARS)


class CodingSpec(BaseModel):
    model_config = ConfigDict(extra="forbid")

    statement: str = Field(min_length=1, max_length=MAX_STATEMENT_CHARS)
    tests: list[IOTest] = Field(default_factory=list, max_length=MAX_TESTS)
    call_tests: list[CallTest] = Field(default_factory=list, max_length=MAX_TESTS)
    time_limit_s: float = Field(2.0, gt=0, le=30)
    entry_point: str | None = None  # function-call problems: the function the tests call
    prompt_code: str | None = None  # function-call problems: the signature/docstring the program completes
    source: str = "procedural"  # procedural | file | codecontests | humaneval | llm
    # procedural problems only: the pipeline the statement, the tests and the reference derive from
    family: str | None = None
    ops: list[tuple[str, int]] | None = None
    seed: int | None = None
    knobs: dict[str, Any] | None = None

    @field_validator("statement")
    @classmethod
    def _text(cls, value: str) -> str:
        if "\x00" in value:
            raise ValueError("statement holds a NUL byte")
        return value


# ---------------------------------------------------------------- the pipelines
# name -> (statement phrase, program line, function on the value); k is the operation's parameter.
_INT_OPS = {
    "add": ("add {k} to it", "n = n + {k}", lambda n, k: n + k),
    "sub": ("subtract {k} from it", "n = n - {k}", lambda n, k: n - k),
    "mul": ("multiply it by {k}", "n = n * {k}", lambda n, k: n * k),
    "mod": ("take it modulo {k}", "n = n % {k}", lambda n, k: n % k),
    "square": ("square it", "n = n * n", lambda n, k: n * n),
}
_STR_OPS = {
    "reverse": ("reverse it", "s = s[::-1]", lambda s, k: s[::-1]),
    "upper": ("make it upper case", "s = s.upper()", lambda s, k: s.upper()),
    "repeat": ("repeat it {k} times", "s = s * {k}", lambda s, k: s * k),
    "first": ("keep its first {k} letters", "s = s[:{k}]", lambda s, k: s[:k]),
    "drop": ("drop its first {k} letters", "s = s[{k}:]", lambda s, k: s[k:]),
    "append": ("append the letter {c}", "s = s + '{c}'", lambda s, k: s + string.ascii_lowercase[k % 26]),
}
FAMILIES = {"int": _INT_OPS, "str": _STR_OPS}
_PARAMLESS = {"square", "reverse", "upper"}
_READ = {"int": ("Read an integer n", "n = int(input())", "n"), "str": ("Read a word s", "s = input()", "s")}


def _phrase(family: str, op: str, k: int) -> str:
    text = FAMILIES[family][op][0]
    return text.format(k=k, c=string.ascii_lowercase[k % 26])


def statement_of(family: str, ops: list[tuple[str, int]]) -> str:
    read = _READ[family][0]
    steps = ", then ".join(_phrase(family, op, k) for op, k in ops)
    return f"{read}. {steps[0].upper() + steps[1:]}. Print the result."


def reference_program(family: str, ops: list[tuple[str, int]]) -> str:
    """The correct program of a generated problem: one line per operation."""
    read, var = _READ[family][1], _READ[family][2]
    lines = [read] + [FAMILIES[family][op][1].format(k=k, c=string.ascii_lowercase[k % 26]) for op, k in ops]
    return "\n".join(lines + [f"print({var})"]) + "\n"


def apply_ops(family: str, ops: list[tuple[str, int]], value: Any) -> Any:
    for op, k in ops:
        value = FAMILIES[family][op][2](value, k)
    return value


# how one worked step reads (`work_lines`): the value before, the operation, the value after
_INT_WORK = {"add": "{a} + {k} = {b}", "sub": "{a} - {k} = {b}", "mul": "{a} * {k} = {b}", "mod": "{a} % {k} = {b}",
             "square": "{a} * {a} = {b}"}
_STR_WORK = {"reverse": "reverse {a} = {b}", "upper": "upper {a} = {b}", "repeat": "repeat {a} {k} times = {b}",
             "first": "first {k} of {a} = {b}", "drop": "drop {k} of {a} = {b}", "append": "{a} + {c} = {b}"}


def work_lines(family: str, ops: list[tuple[str, int]], stdin: str) -> list[str]:
    """The computation of a pipeline's output on `stdin`, one line per operation (e.g. `15 + 3 = 18`,
    `reverse abc = cba`): the worked part of a real judge's demonstration tests (prompts.unit_test_text)."""
    value: Any = int(stdin) if family == "int" else stdin.rstrip("\n")
    lines = []
    for op, k in ops:
        after = FAMILIES[family][op][2](value, k)
        form = (_INT_WORK if family == "int" else _STR_WORK)[op]
        lines.append(form.format(a=value, b=after, k=k, c=string.ascii_lowercase[k % 26]))
        value = after
    return lines


def _random_input(family: str, rng: random.Random) -> str:
    if family == "int":
        return str(rng.randint(0, 20))
    return "".join(rng.choice("abcdefgh") for _ in range(rng.randint(4, 7)))


def expected_output(family: str, ops: list[tuple[str, int]], stdin: str) -> str:
    value = int(stdin) if family == "int" else stdin
    return str(apply_ops(family, ops, value))


def io_tests(family: str, ops: list[tuple[str, int]], rng: random.Random, count: int) -> list[dict[str, str]]:
    """`count` ground-truth tests with distinct inputs (stdin ends with a newline)."""
    tests, seen = [], set()
    while len(tests) < count:
        stdin = _random_input(family, rng)
        if stdin in seen and len(seen) < 15:
            continue
        seen.add(stdin)
        tests.append({"stdin": stdin + "\n", "stdout": expected_output(family, ops, stdin) + "\n"})
    return tests


def _random_op(family: str, rng: random.Random, max_const: int, exclude: str | None = None) -> tuple[str, int]:
    names = [name for name in FAMILIES[family] if name != exclude]
    op = rng.choice(names)
    if op in _PARAMLESS:
        return op, 0
    if op == "append":
        return op, rng.randint(0, 25)
    if op == "repeat":
        return op, rng.randint(2, 3)
    if op in ("first", "drop"):  # words have 4-7 letters: k <= 3 always changes one and never empties it
        return op, rng.randint(1, 3)
    low = 1 if op in ("add", "sub") else 2  # multiply by 1 / modulo 1 are no operation / always 0
    return op, rng.randint(low, max(low, max_const))


_PROBES = {"int": [str(v) for v in (0, 1, 2, 3, 5, 7, 11, 13, 17, 20)],
           "str": ["abcd", "hgfe", "bbaacd", "abcdefg", "dcbaab", "cheff"]}


def meaningful(family: str, ops: list[tuple[str, int]]) -> bool:
    """A pipeline worth a problem: on the probe inputs its output is never empty and at most 40
    characters, is not the same for every input (a constant), and is not the input itself everywhere."""
    probes = _PROBES[family]
    outputs = [expected_output(family, ops, p) for p in probes]
    if any(not out or len(out) > 40 for out in outputs):
        return False
    return len(set(outputs)) > 1 and outputs != probes


def spec_from_ops(family: str, ops: list[tuple[str, int]], seed: int, knobs: dict[str, Any] | None = None
                  ) -> dict[str, Any]:
    """The spec of a procedural problem: statement, GT tests (from `seed`) and the pipeline."""
    if family not in FAMILIES:
        raise SpecError(f"unknown problem family {family!r} (known: {', '.join(FAMILIES)})")
    for op, k in ops:
        if op not in FAMILIES[family]:
            raise SpecError(f"family {family!r} has no operation {op!r} (known: {', '.join(FAMILIES[family])})")
        if not isinstance(k, int) or not 0 <= k <= 25 or (op == "mod" and k < 2):
            raise SpecError(f"operation {op!r}: parameter {k!r} out of range")
    if not 1 <= len(ops) <= MAX_OPS:
        raise SpecError(f"a pipeline has 1..{MAX_OPS} operations, got {len(ops)}")
    tests = io_tests(family, ops, random.Random(f"tests/{seed}"), GT_TESTS)
    spec = {"statement": statement_of(family, ops), "tests": tests, "call_tests": [], "time_limit_s": 2.0,
            "entry_point": None, "prompt_code": None, "source": "procedural", "family": family,
            "ops": [[op, k] for op, k in ops], "seed": seed, "knobs": knobs}
    return spec


def generate_ops(family: str, n_ops: int, max_const: int, rng: random.Random) -> list[tuple[str, int]]:
    while True:
        ops: list[tuple[str, int]] = []
        for _ in range(n_ops):
            ops.append(_random_op(family, rng, max_const, exclude=ops[-1][0] if ops else None))
        if meaningful(family, ops):
            return ops


def candidate_pipelines(family: str, ops: list[tuple[str, int]]) -> list[list[tuple[str, int]]]:
    """Pipelines close to `ops`: a parameter one higher, an operation dropped, one more operation."""
    candidates: list[list[tuple[str, int]]] = []
    for i, (op, k) in enumerate(ops):
        if op not in _PARAMLESS:
            candidates.append(ops[:i] + [(op, k + 1)] + ops[i + 1:])
        if len(ops) > 1:
            candidates.append(ops[:i] + ops[i + 1:])
    other = "sub" if family == "int" else "reverse"
    candidates.append(ops + [(other, 1)])
    return candidates


def mutants(family: str, ops: list[tuple[str, int]]) -> list[str]:
    """Wrong programs close to the reference (`candidate_pipelines`), for the fixed judge benchmark:
    programs a good unit test must reject. Only true mutants are kept (they differ from the reference on
    some probe input)."""
    candidates = candidate_pipelines(family, ops)
    probes = [str(v) for v in range(0, 21)] if family == "int" else _PROBES["str"]
    keep, seen = [], set()
    for cand in candidates:
        if any(expected_output(family, cand, p) != expected_output(family, ops, p) for p in probes):
            program = reference_program(family, cand)
            if program not in seen:
                seen.add(program)
                keep.append(program)
    return keep


# ---------------------------------------------------------------- the environment family
def _hash(value: Any) -> str:
    return hashlib.sha256(json.dumps(value, sort_keys=True, separators=(",", ":")).encode()).hexdigest()[:16]


def _knobs(knobs: dict[str, Any]) -> dict[str, Any]:
    merged = {**DEFAULT_KNOBS, **(knobs or {})}
    unknown = set(merged) - set(DEFAULT_KNOBS)
    if unknown:
        raise SpecError(f"unknown coding knobs: {', '.join(sorted(unknown))} (known: {', '.join(DEFAULT_KNOBS)})")
    families = merged["families"]
    if not isinstance(families, list) or not families or any(not isinstance(f, str) or f not in FAMILIES
                                                                for f in families):
        raise SpecError(f"knob 'families' must be a non-empty list of {sorted(FAMILIES)}, got {families!r}")
    for name, (low, high) in KNOB_RANGES.items():
        value = merged[name]
        if not isinstance(value, int) or isinstance(value, bool) or not low <= value <= high:
            raise SpecError(f"knob {name!r} must be an integer in {low}..{high}, got {value!r}")
    return merged


class CodingFamily:
    """The environment-family interface for coding problems (rla_core/envs/base.py)."""

    name = "coding"
    answer_form = '{"family": "int"|"str", "ops": [[operation, k], ...], "seed": <integer>}'

    def validate(self, spec: dict[str, Any], horizon: int | None = None, min_tests: int = MIN_TESTS) -> dict[str, Any]:
        try:
            model = CodingSpec.model_validate(spec)
        except ValidationError as err:
            first = err.errors()[0]
            where = ".".join(str(p) for p in first["loc"]) or "spec"
            raise SpecError(f"coding spec: {where}: {first['msg']}") from None
        if len(model.tests) + len(model.call_tests) < min_tests:
            raise SpecError(f"coding spec: needs at least {min_tests} tests, has "
                            f"{len(model.tests) + len(model.call_tests)}")
        if model.call_tests and not model.entry_point:
            raise SpecError("coding spec: function-call tests need an entry_point")
        if model.ops is not None:  # a procedural problem must be what its pipeline says
            ops = [(op, int(k)) for op, k in model.ops]
            expected = spec_from_ops(model.family or "", ops, int(model.seed or 0), model.knobs)
            if spec.get("statement") != expected["statement"] or spec.get("tests") != expected["tests"]:
                raise SpecError("coding spec: statement/tests do not match its pipeline (family, ops, seed)")
        return model.model_dump(mode="json")

    def make(self, spec: dict[str, Any]):
        raise SpecError("coding problems are not played turn by turn; the coding stages run programs instead")

    def generate(self, knobs: dict[str, Any], rng: random.Random, horizon: int | None = None) -> dict[str, Any]:
        merged = _knobs(knobs)
        family = rng.choice(merged["families"])
        seed = rng.randrange(2**31)
        ops = generate_ops(family, merged["ops"], merged["max_const"], random.Random(seed))
        # max_const shapes seed problems only (a rewrite draws parameters up to 9): the stored knobs are what
        # the pipeline form of an answer gives back, so a rewrite's answer expands to exactly its spec
        return spec_from_ops(family, ops, seed, {"families": [family], "ops": merged["ops"]})

    def difficulty(self, spec: dict[str, Any]) -> float:
        if spec.get("ops"):
            return float(len(spec["ops"]))
        return float(len(spec.get("statement", "")) // 200 + 1)

    def knobs_of(self, spec: dict[str, Any]) -> dict[str, Any]:
        return dict(spec.get("knobs") or {})

    def content_hash(self, spec: dict[str, Any]) -> str:
        """Problems are the same when they ask for the same transformation: the pipeline for procedural
        problems (whatever the test inputs), else the statement and tests."""
        if spec.get("ops"):
            return _hash([spec.get("family"), [list(op) for op in spec["ops"]]])
        return _hash([spec.get("statement"), spec.get("tests"), spec.get("call_tests")])

    def adjust(self, spec: dict[str, Any], direction: str, feedback: CriticFeedback, rng: random.Random,
               horizon: int | None = None) -> tuple[dict[str, Any], Adjustment]:
        """One operation more (harder) or less (easier). Which one goes comes from the critic feedback:
        when the failed programs mostly crashed or timed out, the operation the statement names last is
        dropped (the program's tail is where a tiny model's code breaks); when they mostly printed wrong
        answers, the operation with the largest parameter goes (the arithmetic/copying is what fails)."""
        if not spec.get("ops"):
            raise SpecError("only procedural problems (with a pipeline) have a procedural rewrite")
        family, ops = spec["family"], [(op, int(k)) for op, k in spec["ops"]]
        seed = int(spec.get("seed") or 0)
        kinds = _failure_kinds(feedback)
        evidence = max(kinds, key=kinds.get) if kinds else None
        if direction == "harder":
            if len(ops) >= MAX_OPS:
                raise SpecError(f"already {MAX_OPS} operations: cannot make it harder")
            for _ in range(20):
                new_ops = ops + [_random_op(family, rng, DEFAULT_KNOBS["max_const"], exclude=ops[-1][0])]
                if meaningful(family, new_ops):
                    break
            else:
                raise SpecError("no bounded harder pipeline found")
            knob, reason = "ops", f"appended '{new_ops[-1][0]}' ({len(ops)} -> {len(new_ops)} operations)"
            evidence = None
        else:
            if len(ops) <= 1:
                raise SpecError("a single operation: cannot make it easier")
            if evidence == "wrong":
                order = sorted(range(len(ops)), key=lambda i: (-ops[i][1], -i))
            else:
                order = list(range(len(ops) - 1, -1, -1))
            # the evidence's choice first; the next one when dropping it leaves a meaningless pipeline
            drop = next((i for i in order if meaningful(family, ops[:i] + ops[i + 1:])), None)
            if drop is None:
                raise SpecError("no operation can be dropped without leaving a meaningless pipeline")
            new_ops = ops[:drop] + ops[drop + 1:]
            knob = "ops"
            reason = f"dropped '{ops[drop][0]}' ({len(ops)} -> {len(new_ops)} operations)" + (
                f"; failed programs mostly {evidence}" if evidence else "")
        knobs = {**(spec.get("knobs") or {}), "ops": len(new_ops)}
        new = spec_from_ops(family, new_ops, seed, knobs)
        return new, Adjustment(knob=knob, before=len(ops), after=len(new_ops), evidence=evidence, reason=reason)

    def generator_answer(self, spec: dict[str, Any]) -> str:
        """The pipeline form of a procedural spec, what the compact-mode environment model writes;
        `spec_from_answer` expands it back to exactly `spec`."""
        return json.dumps({"family": spec["family"], "ops": spec["ops"], "seed": spec["seed"]})

    def describe_schema(self) -> str:
        return ('{"statement": str, "tests": [{"stdin": str, "stdout": str}, ...] (at least 4), '
                '"time_limit_s": float}  or  {"family": "int"|"str", "ops": [[op, k], ...], "seed": int}; '
                f"int ops: {', '.join(_INT_OPS)}; str ops: {', '.join(_STR_OPS)}")

    def rewrite_context(self, spec: dict[str, Any]) -> str:
        ops = json.dumps(spec.get("ops")) if spec.get("ops") else "none"
        return f"Problem: {spec.get('statement', '')}\nPipeline: {spec.get('family')} {ops}"

    def spec_from_answer(self, answer: dict[str, Any], horizon: int | None = None) -> dict[str, Any]:
        """A full problem (statement + at least 4 tests) or the pipeline form {family, ops, seed} (also
        accepted as {"knobs": {...}, "seed": int}, the generator form)."""
        if not isinstance(answer, dict):
            raise SpecError("answer is not a JSON object")
        if "statement" in answer:
            spec = {"source": "llm", **answer}
            return self.validate(spec, horizon, min_tests=MIN_REWRITE_TESTS)
        if "knobs" in answer:
            seed = answer.get("seed")
            if not isinstance(seed, int) or isinstance(seed, bool):
                raise SpecError("generator form needs an integer seed")
            knobs = answer["knobs"]
            if not isinstance(knobs, dict):
                raise SpecError("knobs must be an object")
            return self.generate(knobs, random.Random(seed))
        family, ops, seed = answer.get("family"), answer.get("ops"), answer.get("seed", 0)
        if not isinstance(ops, list) or not all(isinstance(o, list) and len(o) == 2 for o in ops):
            raise SpecError("ops must be a list of [operation, parameter] pairs")
        if not isinstance(seed, int) or isinstance(seed, bool):
            raise SpecError("seed must be an integer")
        parsed = []
        for op, k in ops:
            if not isinstance(op, str) or not isinstance(k, int) or isinstance(k, bool):
                raise SpecError(f"bad operation {[op, k]!r}")
            parsed.append((op, k))
        if not isinstance(family, str):
            raise SpecError("family must be a string")
        spec = spec_from_ops(family, parsed, seed, {"families": [family], "ops": len(parsed)})  # checks names
        if not meaningful(family, parsed):
            raise SpecError("the pipeline's output is empty, constant, the input itself or too long")
        return self.validate(spec, horizon)


def _failure_kinds(feedback: CriticFeedback) -> dict[str, int]:
    """failure kind -> failed test runs, from the coding critic's rejected 'actions' (one per failed
    test, whose rationale starts with the dominant kind, e.g. 'wrong: ...')."""
    kinds: dict[str, int] = {}
    for item in feedback.actions:
        kind = item.rationale.split(":", 1)[0].strip() if item.rationale else ""
        if kind:
            kinds[kind] = kinds.get(kind, 0) + item.count
    return kinds


CODING = register_environment(CodingFamily())
