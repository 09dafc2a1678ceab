"""Warm-start data from the oracle (rla_core/bootstrap.py) on the real household environment:
noise-free walks follow the oracle plan and win; policy targets pick the oracle command; judge targets
carry the oracle label of the command taken; `balance` evens the judge classes deterministically."""
from __future__ import annotations

import random

import pytest

from rla_core.bootstrap import WalkStep, balance, judge_pairs, oracle_walk, policy_pairs
from rla_core.envs.base import get_environment
from rla_core.judge.judge import judge_answer, parse_verdict
from rla_core.rollout.prompts import Turn, parse_action, policy_prompt
from rla_core.schemas import Task

FAMILY = get_environment("household")
GOALS = ["put", "put_two", "clean", "heat", "cool", "examine"]
KEEP = 2


def make_task(goal_type: str, seed: int, step_limit: int = 20) -> Task:
    knobs = {"rooms": 2, "distractors": 2, "closed": 1, "goal_type": goal_type, "step_limit": step_limit}
    spec = FAMILY.validate(FAMILY.generate(knobs, random.Random(seed)))
    return Task(task_id=f"{goal_type}-{seed}", slot_id=goal_type, spec=spec)


def replay(task, walk: list[WalkStep]):
    """Play the commands the walk took in a fresh episode; (episode, observation after each step)."""
    episode = FAMILY.make(task.spec)
    observations = [episode.reset()]
    outcomes = []
    for step in walk:
        outcome = episode.step(step.commands[step.taken_index - 1])
        outcomes.append(outcome)
        observations.append(outcome.observation)
    return episode, observations, outcomes


@pytest.mark.parametrize("goal_type", GOALS)
@pytest.mark.parametrize("seed", [0, 1])
def test_noise_free_walk_follows_the_oracle_plan_and_wins(goal_type, seed):
    task = make_task(goal_type, seed)
    fresh = FAMILY.make(task.spec)
    fresh.reset()
    plan = fresh.oracle_plan()
    walk = oracle_walk(FAMILY, task, 0.0, random.Random(seed))
    assert len(walk) == len(plan) > 0
    assert all(s.taken_index == s.oracle_index for s in walk)
    assert all(s.good for s in walk)  # every oracle step is progress
    episode, observations, outcomes = replay(task, walk)
    assert [o.won for o in outcomes] == [False] * (len(walk) - 1) + [True]  # only the last step wins
    assert episode.won
    # each step saw the state it was taken in: observation, admissible commands, history, goal
    check = FAMILY.make(task.spec)
    check.reset()
    for i, step in enumerate(walk):
        assert step.goal == episode.goal
        assert step.observation == observations[i] and step.next_observation == observations[i + 1]
        assert step.commands == tuple(check.admissible_commands())
        assert step.history == tuple(Turn(s.commands[s.taken_index - 1], s.next_observation) for s in walk[:i])
        check.step(step.commands[step.taken_index - 1])


def test_walk_is_deterministic_for_a_seed():
    task = make_task("heat", 3)
    assert oracle_walk(FAMILY, task, 0.5, random.Random(9)) == oracle_walk(FAMILY, task, 0.5, random.Random(9))


def test_noisy_walk_labels_match_the_oracle_and_stop_at_the_limit():
    task = make_task("clean", 2, step_limit=12)
    walk = oracle_walk(FAMILY, task, 1.0, random.Random(4))
    episode, _, outcomes = replay(task, walk)
    assert len(walk) == 12 or outcomes[-1].won  # out of steps, or won by chance
    assert any(s.taken_index != s.oracle_index for s in walk)
    assert any(not s.good for s in walk)
    check = FAMILY.make(task.spec)
    check.reset()
    for step in walk:  # good = the oracle's progress label of the command taken, in that state
        command = step.commands[step.taken_index - 1]
        assert step.good == check.is_progress(command)
        assert step.commands[step.oracle_index - 1] == check.oracle_plan()[0]
        check.step(command)


def test_policy_targets_are_the_oracle_command():
    walks = [oracle_walk(FAMILY, make_task(g, 5), noise, random.Random(1)) for g in ("put", "cool")
             for noise in (0.0, 0.5)]
    pairs = policy_pairs(walks, KEEP)
    steps = [s for walk in walks for s in walk]
    assert len(pairs) == len(steps)
    for (prompt, target), step in zip(pairs, steps):
        assert target == f" \\boxed{{{step.oracle_index}}}"
        assert parse_action(target, list(step.commands)) == step.commands[step.oracle_index - 1]
        assert prompt == policy_prompt(step.goal, list(step.history), step.observation, list(step.commands), KEEP)
        assert f"\n{step.oracle_index}: {step.commands[step.oracle_index - 1]}\n" in prompt


def test_policy_target_hand_checked():
    task = make_task("put", 0)
    walk = oracle_walk(FAMILY, task, 0.0, random.Random(0))
    episode = FAMILY.make(task.spec)
    episode.reset()
    first = episode.oracle_plan()[0]
    (prompt, target) = policy_pairs([walk[:1]], KEEP)[0]
    k = episode.admissible_commands().index(first) + 1
    assert target == " \\boxed{" + str(k) + "}"
    assert parse_action(target, episode.admissible_commands()) == first
    assert prompt.startswith(episode.goal + "\nNow: ") and prompt.endswith("Answer with \\boxed{k}.\nAnswer:")


def test_judge_targets_parse_to_the_oracle_label():
    walks = [oracle_walk(FAMILY, make_task(g, 6), 0.7, random.Random(2)) for g in GOALS]
    pairs = judge_pairs(walks, KEEP)
    steps = [s for walk in walks for s in walk]
    assert len(pairs) == len(steps)
    assert {s.good for s in steps} == {True, False}  # both classes present
    for (prompt, target), step in zip(pairs, steps):
        assert parse_verdict(target) == (1 if step.good else -1)
        assert target == judge_answer(step.good)
        taken = step.commands[step.taken_index - 1]
        assert f"Response: \\boxed{{{step.taken_index}}} = {taken}\nNext: {step.next_observation}\n" in prompt


def test_balance_evens_the_classes_deterministically():
    walks = [oracle_walk(FAMILY, make_task(g, 7), 0.6, random.Random(3)) for g in GOALS]
    pairs = judge_pairs(walks, KEEP)
    n_good = sum(parse_verdict(t) == 1 for _, t in pairs)
    n_bad = len(pairs) - n_good
    assert n_good > 0 and n_bad > 0 and n_good != n_bad
    balanced = balance(pairs, random.Random(11))
    verdicts = [parse_verdict(t) for _, t in balanced]
    assert verdicts.count(1) == verdicts.count(-1) == min(n_good, n_bad)
    assert len(balanced) == 2 * min(n_good, n_bad)
    assert all(p in pairs for p in balanced)
    assert balance(pairs, random.Random(11)) == balanced


def test_balance_hand_made():
    good, bad = judge_answer(True), judge_answer(False)
    pairs = [("g1", good), ("g2", good), ("g3", good), ("b1", bad)]
    balanced = balance(pairs, random.Random(0))
    assert sorted(t for _, t in balanced) == sorted([good, bad])
    assert ("b1", bad) in balanced
    assert balance([("g1", good)], random.Random(0)) == []  # one class only: nothing survives
