"""The procedural coding problems (rla_core/envs/coding/problems.py): generation and validation, the content
hash, the critic-driven rewrite (`adjust`, fed by the real sandbox → run_ground_truth → coding_feedback),
the answers an environment model may write (`spec_from_answer`), and the judge benchmark's program pools
(reference programs and mutants, run in the real sandbox and measured by the real `build_benchmark`)."""
from __future__ import annotations

import json
import random

import pytest

from rla_core.adaptation.rewriters import first_json_object, spec_hash
from rla_core.envs.coding.bootstrap import benchmark_programs, generate_mixed, judge_pairs
from rla_core.envs.coding.critic import coding_feedback
from rla_core.envs.coding.execute import run_ground_truth
from rla_core.envs.coding.problems import (CODING, FAMILIES, GT_TESTS, MAX_OPS, MIN_REWRITE_TESTS, mutants,
                                      reference_program, spec_from_ops, statement_of, work_lines)
from rla_core.envs.coding.prompts import parse_test
from rla_core.envs.coding.sandbox import Limits, Sandbox, TestCase
from rla_core.config import PROJECT_ROOT, load_config
from rla_core.envs.base import SpecError
from rla_core.schemas import CriticFeedback, Step, Task, Trajectory

SEEDS = [0, 1, 2]
# the inputs mutants() compares a mutant with the reference on (rla_core/envs/coding/problems.py:mutants)
PROBES = {"int": [str(v) for v in range(21)], "str": ["abcd", "hgfe", "bbaacd", "abcdefg", "dcbaab", "cheff"]}


@pytest.fixture(scope="module")
def sandbox() -> Sandbox:
    return Sandbox(workers=2)


def _ops(spec: dict) -> list[tuple[str, int]]:
    return [(op, int(k)) for op, k in spec["ops"]]


def _task(spec: dict, slot: str = "slot0000") -> Task:
    return Task(task_id=f"{slot}-v0-{spec_hash(spec)}", slot_id=slot, env="coding", spec=spec,
                difficulty=CODING.difficulty(spec))


def _trajectory(task: Task, index: int, program: str | None) -> Trajectory:
    step = Step(index=0, prompt_ids=[], response_ids=[], response_text=program or "", action=program,
                observation="")
    return Trajectory(task_id=task.task_id, slot_id=task.slot_id, sample_index=index, goal=task.spec["statement"],
                      initial_observation="", steps=[step], success=False)


def _feedback(sandbox: Sandbox, task: Task, programs: list[str]) -> tuple[CriticFeedback, list]:
    """The real chain: programs → sandbox (run_ground_truth) → ProgramRuns → coding_feedback."""
    runs = run_ground_truth(sandbox, Limits(), {task.task_id: task},
                            [_trajectory(task, j, p) for j, p in enumerate(programs)])
    return coding_feedback(task, runs), runs


# ---------------------------------------------------------------- generate / validate
@pytest.mark.parametrize("family", sorted(FAMILIES))
@pytest.mark.parametrize("length", range(1, MAX_OPS + 1))
def test_generated_spec_validates_unchanged_and_is_what_its_pipeline_says(family, length):
    for seed in SEEDS:
        spec = CODING.generate({"families": [family], "ops": length}, random.Random(seed))
        assert spec["family"] == family and len(spec["ops"]) == length and spec["source"] == "procedural"
        assert CODING.validate(spec) == spec
        assert CODING.validate(json.loads(json.dumps(spec))) == spec  # as stored in a JSONL file
        assert CODING.generate({"families": [family], "ops": length}, random.Random(seed)) == spec  # reproducible
        assert spec["statement"] == statement_of(family, _ops(spec))
        assert len(spec["tests"]) == GT_TESTS and len({t["stdin"] for t in spec["tests"]}) == GT_TESTS
        assert CODING.difficulty(spec) == float(length)
        for op, _ in spec["ops"]:
            assert op in FAMILIES[family]
        assert all(a[0] != b[0] for a, b in zip(spec["ops"], spec["ops"][1:]))  # no operation twice in a row


def test_statement_and_tests_of_a_hand_checked_pipeline():
    spec = spec_from_ops("int", [("add", 3), ("square", 0)], seed=5)
    assert spec["statement"] == "Read an integer n. Add 3 to it, then square it. Print the result."
    for test in spec["tests"]:
        assert test["stdout"] == f"{(int(test['stdin']) + 3) ** 2}\n"
    spec = spec_from_ops("str", [("reverse", 0), ("append", 2), ("first", 3)], seed=5)
    assert spec["statement"] == ("Read a word s. Reverse it, then append the letter c, then keep its first 3 "
                                 "letters. Print the result.")
    for test in spec["tests"]:
        assert test["stdout"] == (test["stdin"].rstrip("\n")[::-1] + "c")[:3] + "\n"


def test_work_lines_of_a_hand_checked_pipeline():
    assert work_lines("int", [("add", 3), ("square", 0), ("mod", 7)], "4\n") == ["4 + 3 = 7", "7 * 7 = 49",
                                                                               "49 % 7 = 0"]
    assert work_lines("str", [("reverse", 0), ("append", 2), ("repeat", 2), ("upper", 0), ("drop", 3), ("first", 2)],
                      "abc\n") == ["reverse abc = cba", "cba + c = cbac", "repeat cbac 2 times = cbaccbac",
                                   "upper cbaccbac = CBACCBAC", "drop 3 of CBACCBAC = CCBAC", "first 2 of CCBAC = CC"]


@pytest.mark.parametrize("seed", SEEDS)
def test_worked_demonstrations_end_at_the_reference_output_and_pass_the_reference_in_the_sandbox(seed, sandbox):
    """judge_pairs(worked=True) → parse_test → the sandbox running each problem's reference program: every
    demonstration test passes, the worked and plain demonstrations hold the same tests, and the last work
    line's value is the expected output."""
    rng = random.Random(seed)
    tasks = generate_mixed(CODING, {"ops": 1, "max_const": 9}, [1, 2, 3, 4], 8, rng, "demo", set())
    worked = judge_pairs(tasks, 2, random.Random(seed), worked=True)
    plain = judge_pairs(tasks, 2, random.Random(seed))
    assert [parse_test(t) for _, t in worked] == [parse_test(t) for _, t in plain]
    assert [p for p, _ in worked] == [p for p, _ in plain]
    jobs = []
    for index, (_, text) in enumerate(worked):
        task = tasks[index // 2]
        stdin, stdout = parse_test(text)
        work = text.split("work:\n", 1)[1].split("output:\n", 1)[0].splitlines()
        assert len(work) == len(task.spec["ops"]) and work[-1].endswith(f"= {stdout.rstrip()}")
        jobs.append((reference_program(task.spec["family"], _ops(task.spec)), [TestCase(stdin, stdout)]))
    assert all(v.passed for verdicts in sandbox.run_matrix(jobs) for v in verdicts)


@pytest.mark.parametrize("change", ["statement", "stdout", "stdin", "ops", "seed", "family"])
def test_a_spec_that_is_not_what_its_pipeline_says_is_refused(change):
    spec = spec_from_ops("int", [("mul", 3), ("add", 4)], seed=9)
    bad = json.loads(json.dumps(spec))
    if change == "statement":
        bad["statement"] = bad["statement"].replace("by 3", "by 4")
    elif change == "stdout":
        bad["tests"][2]["stdout"] = "999\n"
    elif change == "stdin":
        bad["tests"][0]["stdin"] = "21\n"
    elif change == "ops":
        bad["ops"] = [["mul", 3], ["add", 5]]
    elif change == "seed":
        bad["seed"] = 10
    else:
        bad["family"] = "str"
    assert bad != spec
    with pytest.raises(SpecError):
        CODING.validate(bad)
    CODING.validate(spec)  # the unchanged one passes


# ---------------------------------------------------------------- content hash
def test_content_hash_is_the_pipeline_whatever_the_test_inputs():
    ops = [("sub", 2), ("mod", 5)]
    one, other = spec_from_ops("int", ops, seed=1), spec_from_ops("int", ops, seed=2)
    assert one["tests"] != other["tests"]  # other inputs...
    assert CODING.content_hash(one) == CODING.content_hash(other)  # ...same problem
    assert spec_hash(one) != spec_hash(other)  # but different specs (task ids)
    hashes = {CODING.content_hash(spec_from_ops("int", o, seed=1))
              for o in (ops, [("sub", 2), ("mod", 6)], [("mod", 5), ("sub", 2)], [("sub", 2)])}
    hashes.add(CODING.content_hash(spec_from_ops("str", [("drop", 2), ("first", 5)], seed=1)))
    assert len(hashes) == 5


def test_content_hash_of_a_full_problem_is_its_statement_and_tests():
    spec = CODING.spec_from_answer(_full_problem(4))
    assert CODING.content_hash(spec) == CODING.content_hash(dict(spec, time_limit_s=3.0))
    changed = json.loads(json.dumps(spec))
    changed["tests"][0]["stdout"] = "8\n"
    assert CODING.content_hash(changed) != CODING.content_hash(spec)


# ---------------------------------------------------------------- adjust
@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_harder_appends_one_operation_and_keeps_the_rest(family):
    for length in range(1, MAX_OPS):
        for seed in SEEDS:
            spec = CODING.generate({"families": [family], "ops": length}, random.Random(seed))
            new, change = CODING.adjust(spec, "harder", CriticFeedback(), random.Random(seed))
            assert new["ops"][:-1] == spec["ops"] and len(new["ops"]) == length + 1
            assert new["ops"][-1][0] != spec["ops"][-1][0]
            assert new["seed"] == spec["seed"] and new["family"] == family
            assert CODING.validate(new) == new
            assert (change.knob, change.before, change.after, change.evidence) == ("ops", length, length + 1, None)
            assert new["knobs"]["ops"] == length + 1


# a 3-operation problem whose largest parameter is not the last operation's
PIPELINE = [("mul", 7), ("add", 2), ("sub", 3)]
REFERENCE = reference_program("int", PIPELINE)
CRASHING = "n = int(input())\nn = n * 7 + 2\nraise RuntimeError('tail broke')\n"
WRONG = "n = int(input())\nprint(n * 7 + 2)\n"  # forgot the last operation


def test_crash_dominated_feedback_drops_the_last_operation(sandbox):
    task = _task(spec_from_ops("int", PIPELINE, seed=4, knobs={"families": ["int"], "ops": 3, "max_const": 9}))
    feedback, runs = _feedback(sandbox, task, [CRASHING, CRASHING, CRASHING, WRONG, REFERENCE])
    assert [r.pass_all for r in runs] == [False, False, False, False, True]
    assert set(runs[0].statuses) == {"crash"} and set(runs[3].statuses) == {"wrong"}
    assert feedback.failed == 4 and len(feedback.actions) == GT_TESTS
    assert all(a.rationale == "crash: RuntimeError: tail broke" and a.count == 4 for a in feedback.actions)
    new, change = CODING.adjust(task.spec, "easier", feedback, random.Random(0))
    assert new["ops"] == [["mul", 7], ["add", 2]]
    assert change.evidence == "crash" and change.from_feedback and "dropped 'sub'" in change.reason
    assert new == spec_from_ops("int", PIPELINE[:2], seed=4, knobs={"families": ["int"], "ops": 2, "max_const": 9})


def test_wrong_dominated_feedback_drops_the_operation_with_the_largest_parameter(sandbox):
    task = _task(spec_from_ops("int", PIPELINE, seed=4, knobs={"families": ["int"], "ops": 3, "max_const": 9}))
    feedback, runs = _feedback(sandbox, task, [WRONG, WRONG, WRONG, CRASHING, REFERENCE])
    assert all(a.rationale.startswith("wrong: printed '") for a in feedback.actions)
    for action, test in zip(sorted(feedback.actions, key=lambda a: a.action), task.spec["tests"]):
        assert f"printed '{int(test['stdin']) * 7 + 2}'" in action.rationale  # what the wrong programs printed
    new, change = CODING.adjust(task.spec, "easier", feedback, random.Random(0))
    assert new["ops"] == [["add", 2], ["sub", 3]]
    assert change.evidence == "wrong" and "dropped 'mul'" in change.reason
    assert CODING.validate(new) == new


def test_without_failures_easier_falls_back_to_the_last_operation(sandbox):
    task = _task(spec_from_ops("int", PIPELINE, seed=4))
    feedback, _ = _feedback(sandbox, task, [REFERENCE, REFERENCE])
    assert feedback.failed == 0 and feedback.actions == []
    new, change = CODING.adjust(task.spec, "easier", feedback, random.Random(0))
    assert new["ops"] == [["mul", 7], ["add", 2]] and change.evidence is None and not change.from_feedback


def test_adjust_limits_raise_spec_errors():
    one = spec_from_ops("str", [("reverse", 0)], seed=1)
    with pytest.raises(SpecError, match="cannot make it easier"):
        CODING.adjust(one, "easier", CriticFeedback(), random.Random(0))
    four = spec_from_ops("int", [("add", 1), ("mul", 2), ("sub", 3), ("mod", 7)], seed=1)
    with pytest.raises(SpecError, match="cannot make it harder"):
        CODING.adjust(four, "harder", CriticFeedback(), random.Random(0))
    assert len(CODING.adjust(four, "easier", CriticFeedback(), random.Random(0))[0]["ops"]) == 3
    with pytest.raises(SpecError, match="procedural"):
        CODING.adjust(CODING.spec_from_answer(_full_problem(4)), "easier", CriticFeedback(), random.Random(0))


# ---------------------------------------------------------------- spec_from_answer
def _full_problem(tests: int) -> dict:
    return {"statement": "Read an integer n. Print 2n.",
            "tests": [{"stdin": f"{i}\n", "stdout": f"{2 * i}\n"} for i in range(tests)], "time_limit_s": 1.0}


def test_pipeline_answer_gives_the_pipelines_spec():
    spec = CODING.spec_from_answer({"family": "int", "ops": [["add", 3], ["square", 0]], "seed": 5})
    expected = spec_from_ops("int", [("add", 3), ("square", 0)], 5, {"families": ["int"], "ops": 2})
    assert spec == expected
    assert spec["statement"] == "Read an integer n. Add 3 to it, then square it. Print the result."


def test_generator_form_answer_is_expanded_by_the_generator():
    answer = {"knobs": {"families": ["str"], "ops": 2}, "seed": 11}
    spec = CODING.spec_from_answer(answer)
    assert spec == CODING.generate(answer["knobs"], random.Random(11))
    assert spec["family"] == "str" and len(spec["ops"]) == 2 and CODING.validate(spec) == spec


def test_full_problem_needs_at_least_four_tests():
    spec = CODING.spec_from_answer(_full_problem(MIN_REWRITE_TESTS))
    assert spec["source"] == "llm" and spec["ops"] is None and len(spec["tests"]) == 4
    assert spec["time_limit_s"] == 1.0 and spec["statement"] == "Read an integer n. Print 2n."
    with pytest.raises(SpecError, match="at least 4 tests, has 3"):
        CODING.spec_from_answer(_full_problem(MIN_REWRITE_TESTS - 1))
    CODING.validate(CODING.spec_from_answer(_full_problem(MIN_REWRITE_TESTS - 1) | {"tests": _full_problem(9)["tests"]}))


PIPE = {"family": "int", "ops": [["add", 3]], "seed": 1}
MALFORMED = [
    ([PIPE], "not a JSON object"),
    ("add 3", "not a JSON object"),
    (PIPE | {"ops": "add 3"}, "ops must be a list"),
    (PIPE | {"ops": [["add"]]}, "ops must be a list"),
    (PIPE | {"ops": [["add", "3"]]}, "bad operation"),
    (PIPE | {"ops": [["add", 2.5]]}, "bad operation"),
    (PIPE | {"ops": [["add", True]]}, "bad operation"),
    (PIPE | {"ops": [[3, 3]]}, "bad operation"),
    (PIPE | {"ops": [["pow", 2]]}, "no operation 'pow'"),
    (PIPE | {"ops": [["reverse", 0]]}, "no operation 'reverse'"),  # a str operation in the int family
    (PIPE | {"ops": [["add", 26]]}, "parameter 26 out of range"),
    (PIPE | {"ops": [["add", -1]]}, "parameter -1 out of range"),
    (PIPE | {"ops": [["mod", 1]]}, "parameter 1 out of range"),
    (PIPE | {"ops": []}, "1..4 operations, got 0"),
    (PIPE | {"ops": [["add", 1], ["sub", 1], ["add", 1], ["sub", 1], ["add", 1]]}, "1..4 operations, got 5"),
    (PIPE | {"seed": True}, "seed must be an integer"),
    (PIPE | {"seed": "1"}, "seed must be an integer"),
    (PIPE | {"family": 3}, "family must be a string"),
    (PIPE | {"family": "float"}, "unknown problem family 'float'"),
    ({"family": "str", "ops": [["repeat", 3]] * 4, "seed": 0}, "too long"),
    ({"knobs": {"ops": 2}, "seed": True}, "needs an integer seed"),
    ({"knobs": {"ops": 2}}, "needs an integer seed"),
    ({"knobs": [2], "seed": 1}, "knobs must be an object"),
    ({"knobs": {"colour": "red"}, "seed": 1}, "unknown coding knobs: colour"),
    ({"knobs": {"ops": 5}, "seed": 1}, "knob 'ops' must be an integer in 1..4"),
    ({"knobs": {"ops": True}, "seed": 1}, "knob 'ops' must be an integer"),
    ({"knobs": {"max_const": 1}, "seed": 1}, "knob 'max_const' must be an integer in 2..9"),
    ({"knobs": {"families": ["float"]}, "seed": 1}, "knob 'families'"),
    ({"knobs": {"families": "int"}, "seed": 1}, "knob 'families'"),
    (_full_problem(4) | {"statement": ""}, "statement"),
    (_full_problem(4) | {"statement": "a\x00b"}, "NUL byte"),
    (_full_problem(4) | {"tests": [{"stdin": 1, "stdout": 2}] * 4}, "tests"),
    (_full_problem(4) | {"tests": [{"stdin": "1\n"}] * 4}, "stdout"),
    (_full_problem(4) | {"time_limit_s": 0}, "time_limit_s"),
    (_full_problem(4) | {"time_limit_s": 31}, "time_limit_s"),
    (_full_problem(4) | {"colour": "red"}, "colour"),
    (_full_problem(0) | {"call_tests": [{"code": "assert f(1) == 2"}] * 4}, "entry_point"),
    # a full problem that claims a pipeline must be that pipeline
    (_full_problem(5) | {"family": "int", "ops": [["mul", 2]], "seed": 1}, "do not match its pipeline"),
]


@pytest.mark.parametrize("answer,message", MALFORMED, ids=[m for _, m in MALFORMED])
def test_malformed_answers_are_spec_errors_that_name_the_problem(answer, message):
    with pytest.raises(SpecError, match=message):
        CODING.spec_from_answer(answer)


@pytest.mark.parametrize("entry", [["int"], {"family": "int"}])
def test_unhashable_family_entry_is_a_spec_error(entry):
    with pytest.raises(SpecError, match="knob 'families'"):
        CODING.spec_from_answer({"knobs": {"families": [entry]}, "seed": 1})


def _adjusted_specs() -> list[tuple[dict, dict]]:
    """(original, adjusted) pairs over both families and directions."""
    pairs = []
    for family in sorted(FAMILIES):
        for length, direction in ((1, "harder"), (2, "harder"), (2, "easier"), (3, "easier"), (4, "easier")):
            for seed in SEEDS:
                spec = CODING.generate({"families": [family], "ops": length}, random.Random(seed))
                pairs.append((spec, CODING.adjust(spec, direction, CriticFeedback(), random.Random(seed))[0]))
    return pairs


def test_generator_answer_of_an_adjusted_spec_gives_back_its_problem():
    """The environment model's training target (CODING.generator_answer, as rewrite_pairs_coding writes it),
    read as the LLM rewriter reads an answer (first_json_object → spec_from_answer): the same problem —
    statement, tests, pipeline, seed — and so the same content hash."""
    for _, adjusted in _adjusted_specs():
        text = f"Answer: {CODING.generator_answer(adjusted)} <eos> trailing words {{"
        back = CODING.spec_from_answer(first_json_object(text))
        assert {k: v for k, v in back.items() if k != "knobs"} == {k: v for k, v in adjusted.items() if k != "knobs"}
        assert CODING.content_hash(back) == CODING.content_hash(adjusted)
        assert back["knobs"]["ops"] == adjusted["knobs"]["ops"] == len(adjusted["ops"])


def test_generator_answer_of_an_adjusted_spec_expands_back_exactly():
    for _, adjusted in _adjusted_specs():
        back = CODING.spec_from_answer(first_json_object(CODING.generator_answer(adjusted)))
        assert back == adjusted


# ---------------------------------------------------------------- the judge benchmark's program pools
# a problem whose five GT inputs are all shorter than 6 letters: its "drop 6" mutant prints the same ""
# none of its five GT inputs has 7 letters, so its "first 4" mutant prints what the reference prints on them
EQUIVALENT_CASE = spec_from_ops("str", [("drop", 3), ("first", 3), ("reverse", 0)], seed=9,
                                knobs={"families": ["str"], "ops": 3})


@pytest.fixture(scope="module")
def pool_tasks() -> list[Task]:
    tasks = generate_mixed(CODING, {"families": ["int", "str"]}, [1, 2, 3, 4], 16, random.Random(7), "bench", set())
    return tasks + [_task(EQUIVALENT_CASE, "bench9999")]


def test_reference_passes_its_tests_and_every_mutant_fails_a_probe_in_the_sandbox(sandbox, pool_tasks):
    """Reference and mutants run in the real sandbox on the GT tests plus mutants()'s probe inputs (the
    reference's own sandbox output on a probe is the expected one). A mutant equivalent on the five GT
    tests is possible (reported); one equivalent on every probe is not."""
    ref_jobs = []
    for task in pool_tasks:
        family = task.spec["family"]
        cases = [TestCase(t["stdin"], t["stdout"]) for t in task.spec["tests"]]
        ref_jobs.append((reference_program(family, _ops(task.spec)), cases + [TestCase(p + "\n") for p in PROBES[family]]))
    ref_verdicts = sandbox.run_matrix(ref_jobs)
    mutant_jobs, owners = [], []
    for task, verdicts in zip(pool_tasks, ref_verdicts):
        assert all(v.passed for v in verdicts), (task.spec["ops"], verdicts)
        family, gt = task.spec["family"], task.spec["tests"]
        probe_out = [v.stdout for v in verdicts[len(gt):]]
        cases = [TestCase(t["stdin"], t["stdout"]) for t in gt]
        cases += [TestCase(p + "\n", out) for p, out in zip(PROBES[family], probe_out)]
        for program in mutants(family, _ops(task.spec)):
            mutant_jobs.append((program, cases))
            owners.append((task, program))
    assert len(mutant_jobs) >= 3 * len(pool_tasks)
    equivalent_on_gt = []
    for (task, program), verdicts in zip(owners, sandbox.run_matrix(mutant_jobs)):
        gt = len(task.spec["tests"])
        assert not all(v.passed for v in verdicts[gt:]), f"mutant equal to the reference on every probe: {program!r}"
        assert all(v.status in ("ok", "wrong") for v in verdicts), verdicts  # mutants are wrong, not broken
        if all(v.passed for v in verdicts[:gt]):
            equivalent_on_gt.append((task.task_id, program))
    print(f"{len(equivalent_on_gt)} of {len(mutant_jobs)} mutants pass every GT test: {equivalent_on_gt}")
    constructed = (pool_tasks[-1].task_id, reference_program("str", [("drop", 3), ("first", 4), ("reverse", 0)]))
    assert constructed in equivalent_on_gt
    assert len(equivalent_on_gt) < len(mutant_jobs) // 4  # most mutants are caught by the GT tests


def test_build_benchmark_measures_what_the_sandbox_says(sandbox, pool_tasks):
    """tasks/settings/coding.py:build_benchmark (the real one, with the coding config's sandbox) marks each pool
    program pass_all exactly as a direct sandbox run of it on the GT tests does: the reference True, the
    GT-equivalent mutant True, every other mutant False."""
    from tasks.settings.coding import build_benchmark

    cfg = load_config([PROJECT_ROOT / "configs" / "coding.yaml"], ["coding.workers=2"])
    bench = build_benchmark(cfg, pool_tasks)
    assert [b.task for b in bench] == pool_tasks
    jobs = [(p, [TestCase(t["stdin"], t["stdout"]) for t in task.spec["tests"]])
            for task in pool_tasks for p in benchmark_programs(task)]
    direct = iter([all(v.passed for v in verdicts) for verdicts in sandbox.run_matrix(jobs)])
    for problem in bench:
        assert problem.programs == benchmark_programs(problem.task)
        assert problem.pass_all == [next(direct) for _ in problem.programs]
        assert problem.pass_all[0] is True
    marked = [(b.task.task_id, p) for b in bench for p, ok in zip(b.programs[1:], b.pass_all[1:]) if ok]
    assert (pool_tasks[-1].task_id, reference_program("str", [("drop", 3), ("first", 4), ("reverse", 0)])) in marked


def test_mutant_feedback_equals_the_critic_feedback_of_the_mutants_run_in_the_sandbox(sandbox):
    """The environment model's warm-start feedback (computed from the mutant pipelines, nothing run) is
    exactly what the critic writes when those programs really run on the GT tests in the sandbox."""
    from rla_core.envs.coding.bootstrap import mutant_feedback
    from rla_core.envs.coding.critic import coding_feedback
    from rla_core.envs.coding.execute import run_ground_truth
    from rla_core.envs.coding.problems import candidate_pipelines

    tasks = generate_mixed(CODING, {}, [2, 3], 6, random.Random(11), "fb", set())
    for task in tasks:
        programs = [reference_program(task.spec["family"], ops)
                    for ops in candidate_pipelines(task.spec["family"], _ops(task.spec))]
        trajectories = [_trajectory(task, j, p) for j, p in enumerate(programs)]
        runs = run_ground_truth(sandbox, Limits(), {task.task_id: task}, trajectories)
        real = coding_feedback(task, runs)
        assert mutant_feedback(task) == real
        assert real.failed >= 1 and real.unit == "test"
