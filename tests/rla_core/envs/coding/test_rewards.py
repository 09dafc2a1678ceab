"""The coding rewards and metrics against hand-computed cases (DESIGN §2.5), every branch of the
separation reward included."""
from __future__ import annotations

import math

import pytest

from rla_core.envs.coding.rewards import (judge_metrics, judge_samples, outcome_metrics, policy_samples,
                                     separation_rewards, score_tests)
from rla_core.envs.coding.prompts import judge_prompt, parse_test, policy_prompt, unit_test_text
from rla_core.schemas import ProgramRun, Step, Trajectory, UnitTest


def _z(values):
    mean = sum(values) / len(values)
    std = math.sqrt(sum((v - mean) ** 2 for v in values) / len(values))
    return [(v - mean) / std for v in values]


# ---------------------------------------------------------------- separation reward, branch by branch
def test_w_empty_correct_test_scores_plus_one_and_incorrect_minus_one():
    # every program passes every GT test (W empty): +1 if all of G pass u, else -1
    assert separation_rewards([True, True], [[True, True], [True, False], [False, False]]) == [1.0, -1.0, -1.0]


def test_correct_test_scores_the_wrong_programs_it_fails():
    # G = {0}, W = {1, 2, 3}; u passes program 0 and fails 1 and 3 -> +2
    assert separation_rewards([True, False, False, False], [[True, False, True, False]]) == [2.0]


def test_correct_test_failing_no_wrong_program_scores_zero():
    assert separation_rewards([True, False], [[True, True]]) == [0.0]


def test_incorrect_test_scores_minus_the_wrong_programs_it_passes():
    # u fails program 0 (in G): not correct; it passes W programs 1 and 2 -> -2
    assert separation_rewards([True, False, False], [[False, True, True]]) == [-2.0]


def test_incorrect_test_passing_no_wrong_program_scores_zero():
    assert separation_rewards([True, False], [[False, False]]) == [0.0]


def test_unparseable_test_scores_zero_with_wrong_programs_and_minus_one_without():
    assert separation_rewards([True, False], [None]) == [0.0]
    assert separation_rewards([True, True], [None]) == [-1.0]


def test_mismatched_row_length_is_an_error():
    with pytest.raises(ValueError, match="2 program results for 3 programs"):
        separation_rewards([True, False, False], [[True, False]])


def test_quality_counts_correct_and_detecting_tests():
    pass_all = [True, False, False]
    rows = [[True, False, False],   # correct, detects both wrong programs
            [True, True, False],    # correct, misses program 1
            [False, False, False],  # incorrect (fails the good program)
            None]                   # unparseable: fails everything -> incorrect
    quality = score_tests(pass_all, rows)
    assert (quality.tests, quality.correct, quality.detecting) == (4, 2, 1)


# ---------------------------------------------------------------- training samples
def _trajectory(task: str, j: int) -> Trajectory:
    step = Step(index=0, prompt_ids=[5, 6], response_ids=[7, 8, 1], response_text="print(1)\n",
                response_logprobs=[-0.5, -0.25, -0.125], action="print(1)\n", observation="")
    return Trajectory(task_id=task, slot_id=task, sample_index=j, goal="g", initial_observation="", steps=[step],
                      success=False)


def _run(task: str, j: int, ratio: float) -> ProgramRun:
    return ProgramRun(task_id=task, sample_index=j, statuses=[], pass_ratio=ratio, pass_all=ratio == 1.0)


def _test(task: str, u: int, passes, parsed: bool = True) -> UnitTest:
    return UnitTest(task_id=task, index=u, prompt_ids=[9], response_ids=[10, 1], response_logprobs=[-1.0, -0.5],
                    text="t", stdin="1\n" if parsed else None, stdout="2\n" if parsed else None, passes=passes)


def test_policy_advantage_is_the_z_score_of_pass_ratio_on_in_band_tasks_only():
    ratios = {"a": [1.0, 0.5, 0.0, 1.0],   # acc 0.5: in band
              "b": [1.0, 1.0, 1.0, 1.0],   # acc 1.0: out of band
              "c": [0.0, 0.4, 0.6, 0.8]}   # acc 0.0: out of band (pass ratios differ, still excluded)
    runs = [_run(t, j, r) for t, rs in ratios.items() for j, r in enumerate(rs)]
    trajs = [_trajectory(t, j) for t, rs in ratios.items() for j in range(len(rs))]
    samples, metrics = policy_samples(trajs, runs, [], 0.2, 0.8)
    assert {s.task_id for s in samples} == {"a"}
    assert [s.advantage for s in samples] == pytest.approx(_z([1.0, 0.5, 0.0, 1.0]))
    assert samples[0].old_logprobs == [-0.5, -0.25, -0.125] and samples[0].response_ids == [7, 8, 1]
    assert metrics["policy/tasks_in_band"] == 1.0


def test_policy_drops_zero_advantages_and_std_zero_groups():
    runs = [_run("a", j, r) for j, r in enumerate([1.0, 0.5, 0.0])]  # mean 0.5 -> program 1 has advantage 0
    samples, _ = policy_samples([_trajectory("a", j) for j in range(3)], runs, [], 0.2, 0.8)
    assert [s.sample_index for s in samples] == [0, 2]


def test_judge_test_weight_adds_lambda_times_the_judge_pass_rate():
    runs = [_run("a", j, r) for j, r in enumerate([1.0, 0.6, 0.6, 0.0])]  # acc 0.25
    tests = [_test("a", 0, [True, True, False, False]), _test("a", 1, [True, False, False, False]),
             _test("a", 2, [], parsed=False)]  # unparseable tests do not count in the pass rate
    trajs = [_trajectory("a", j) for j in range(4)]
    lam = 0.5
    expected = _z([1.0 + lam * 1.0, 0.6 + lam * 0.5, 0.6 + lam * 0.0, 0.0 + lam * 0.0])
    samples, _ = policy_samples(trajs, runs, tests, 0.2, 0.8, judge_weight=lam)
    assert [s.advantage for s in samples] == pytest.approx(expected)
    off, _ = policy_samples(trajs, runs, tests, 0.2, 0.8, judge_weight=0.0)
    assert [s.advantage for s in off] == pytest.approx(_z([1.0, 0.6, 0.6, 0.0]))


def test_judge_samples_z_score_the_separation_rewards_of_in_band_tasks():
    runs = [_run("a", j, r) for j, r in enumerate([1.0, 0.0, 0.0, 1.0])]  # G = {0, 3}, W = {1, 2}
    tests = [_test("a", 0, [True, False, False, True]),   # correct, fails both W -> +2
             _test("a", 1, [True, True, False, True]),    # correct, fails one -> +1
             _test("a", 2, [False, True, True, True]),    # incorrect, passes both W -> -2
             _test("a", 3, [], parsed=False)]             # unparseable -> 0
    out_of_band = [_run("b", j, 1.0) for j in range(4)]
    samples, metrics = judge_samples(runs + out_of_band, tests + [_test("b", 0, [True] * 4)], 0.2, 0.8)
    assert {s.task_id for s in samples} == {"a"}
    assert [s.judge_sample for s in samples] == [0, 1, 2, 3]
    assert [s.advantage for s in samples] == pytest.approx(_z([2.0, 1.0, -2.0, 0.0]))
    assert samples[0].response_ids == [10, 1] and samples[0].old_logprobs == [-1.0, -0.5]
    assert metrics["judge/tests"] == 4.0


def test_judge_metrics_ut_accuracy_and_detect_rate():
    runs = [_run("a", j, r) for j, r in enumerate([1.0, 0.0])] + [_run("b", j, 1.0) for j in range(2)] \
        + [_run("c", j, 0.0) for j in range(2)]
    tests = [_test("a", 0, [True, False]), _test("a", 1, [True, True]), _test("a", 2, [], parsed=False),
             _test("b", 0, [True, True]), _test("b", 1, [False, True]),
             _test("c", 0, [True, True])]  # no correct program: not scored
    metrics = judge_metrics(runs, tests)
    assert metrics["tests_scored"] == 5.0
    assert metrics["ut_accuracy"] == pytest.approx(3 / 5)  # a0, a1, b0
    assert metrics["detect_rate"] == pytest.approx(1 / 3)  # over task a only (W non-empty): a0
    assert metrics["parse_rate"] == pytest.approx(5 / 6)


def test_outcome_metrics():
    runs = [ProgramRun(task_id="a", sample_index=0, statuses=["ok", "ok"], pass_ratio=1.0, pass_all=True),
            ProgramRun(task_id="a", sample_index=1, statuses=["ok", "crash"], pass_ratio=0.5, pass_all=False)]
    assert outcome_metrics(runs) == {"pass_at_1": 0.5, "pass_ratio": 0.75, "crash_rate": 0.5, "programs": 2.0}


# ---------------------------------------------------------------- prompts: the judge never sees a program
def test_judge_prompt_holds_the_statement_only():
    spec = {"statement": "Read an integer n. Add 3 to it. Print the result.", "tests": [{"stdin": "1\n", "stdout": "4\n"}],
            "prompt_code": None}
    prompt = judge_prompt(spec)
    assert spec["statement"] in prompt and "print(" not in prompt and "4\n" not in prompt.split("Problem:")[0]
    assert "stdout" not in prompt and "Program:" not in prompt
    assert judge_prompt({"statement": spec["statement"]}) == prompt  # nothing else of the spec is read


def test_test_answer_round_trips_and_garbage_is_unparseable():
    assert parse_test(unit_test_text("3\n", "6\n")) == ("3\n", "6\n")
    assert parse_test(unit_test_text("", "x\n")) == ("\n", "x\n")
    for garbage in ("", "input: 3 output: 6", "output:\n6\ninput:\n3", "input:\n1\noutput:\n2\x00", "x" * 5000):
        assert parse_test(garbage) is None
    assert "Program:" in policy_prompt(spec={"statement": "s", "prompt_code": None})


def test_a_worked_test_parses_to_its_input_and_output_only():
    work = ["15 + 3 = 18", "18 * 18 = 324"]
    text = unit_test_text("15\n", "324\n", work)
    assert text == "input:\n15\nwork:\n15 + 3 = 18\n18 * 18 = 324\noutput:\n324"
    assert parse_test(text) == ("15\n", "324\n")
    assert parse_test("input:\n3\nwork:\noutput:\n6") == ("3\n", "6\n")  # an empty work section
    assert unit_test_text("3\n", "6\n", []) == unit_test_text("3\n", "6\n")
    # the work never leaks into the input, and a test whose input is missing is unparseable
    for broken in ("input:\nwork:\n1 + 1 = 2\noutput:\n2", "input:\n1\nwork:\n1 + 1 = 2"):
        assert parse_test(broken) is None, broken
