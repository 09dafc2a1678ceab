"""Supervised warm-start data from the oracle: policy demonstrations and judge step labels.

A walk follows the oracle plan but takes a random admissible command with probability `noise`, so
the policy sees recovery states and the judge sees both good and bad steps. Policy targets are always
the oracle's next command; judge targets are the oracle's progress label of the command taken.
"""
from __future__ import annotations

import random
from dataclasses import dataclass

from rla_core.envs.base import EnvironmentFamily
from rla_core.judge.judge import judge_answer, judge_prompt
from rla_core.rollout.prompts import Turn, policy_answer, policy_prompt
from rla_core.schemas import Task


@dataclass(frozen=True)
class WalkStep:
    goal: str
    history: tuple[Turn, ...]
    observation: str
    commands: tuple[str, ...]
    oracle_index: int  # 1-based index of the oracle's next command
    taken_index: int  # 1-based index of the command actually taken
    good: bool  # oracle label of the command taken
    next_observation: str


def oracle_walk(family: EnvironmentFamily, task: Task, noise: float, rng: random.Random) -> list[WalkStep]:
    """One episode that mostly follows the oracle; stops when won or out of steps."""
    episode = family.make(task.spec)
    observation, history, steps = episode.reset(), [], []
    for _ in range(int(task.spec.get("step_limit", 50))):
        commands = episode.admissible_commands()
        plan = episode.oracle_plan()
        if not plan:
            break
        oracle_index = commands.index(plan[0]) + 1
        taken = rng.randrange(len(commands)) + 1 if rng.random() < noise else oracle_index
        good = episode.is_progress(commands[taken - 1])
        outcome = episode.step(commands[taken - 1])
        steps.append(WalkStep(episode.goal, tuple(history), observation, tuple(commands), oracle_index, taken,
                              good, outcome.observation))
        history.append(Turn(commands[taken - 1], outcome.observation))
        observation = outcome.observation
        if outcome.done:
            break
    return steps


def policy_pairs(walks: list[list[WalkStep]], keep: int) -> list[tuple[str, str]]:
    """(prompt, target) text pairs: the oracle's command for every visited state."""
    return [
        (policy_prompt(s.goal, list(s.history), s.observation, list(s.commands), keep), policy_answer(s.oracle_index))
        for walk in walks for s in walk
    ]


def judge_pairs(walks: list[list[WalkStep]], keep: int) -> list[tuple[str, str]]:
    """(prompt, target) text pairs: the oracle label of every command taken."""
    pairs = []
    for walk in walks:
        for s in walk:
            action = s.commands[s.taken_index - 1]
            prompt = judge_prompt(s.goal, list(s.history), s.observation, policy_answer(s.taken_index), action,
                                  s.next_observation, keep)
            pairs.append((prompt, judge_answer(s.good)))
    return pairs


def balance(pairs: list[tuple[str, str]], rng: random.Random) -> list[tuple[str, str]]:
    """Equal numbers of good and bad judge targets (down-sampling the larger class)."""
    good = [p for p in pairs if p[1].endswith("{1}")]
    bad = [p for p in pairs if not p[1].endswith("{1}")]
    size = min(len(good), len(bad))
    chosen = rng.sample(good, size) + rng.sample(bad, size)
    rng.shuffle(chosen)
    return chosen
