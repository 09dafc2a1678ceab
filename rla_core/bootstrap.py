"""Supervised warm-start data from the oracle: policy demonstrations and judge step labels.

A walk follows the oracle plan but takes a random admissible command with probability `noise`, so
the policy sees recovery states and the judge sees both good and bad steps. Policy targets are always
the oracle's next command; judge targets are the oracle's progress label of the command taken.

The environment model (an llm rewriter in compact prompt mode) is warm-started on the procedural
rewriter: `rewrite_pairs` turns (task, critic feedback) into (compact prompt, generator-form answer)
pairs, one per procedural rewrite, in both directions.
"""
from __future__ import annotations

import random
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from rla_core.adaptation.rewriters import build_rewrite_prompt, generator_answer, spec_hash
from rla_core.envs.base import EnvironmentFamily, SpecError
from rla_core.judge.judge import BAD_RATIONALE, judge_answer, judge_prompt, step_prompts
from rla_core.rollout.prompts import Turn, policy_answer, policy_prompt
from rla_core.rollout.runner import INVALID
from rla_core.schemas import CriticFeedback, Direction, RejectedAction, Task, Trajectory

DIRECTIONS: tuple[Direction, ...] = ("harder", "easier")


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


def replay_walk(family: EnvironmentFamily, task: Task, trajectory: Trajectory) -> list[WalkStep]:
    """The states a policy visited, each with the oracle's command from there (DAgger's labels): the episode
    of `trajectory` replayed command by command in a fresh game of `task` (an unparsed answer is stepped as
    the rollout steps it, INVALID). A state the oracle has no plan from gives no step; the replay goes on
    so that later states keep their history. A game that does not repeat the
    recorded observations is a broken environment, so it raises RuntimeError."""
    episode = family.make(task.spec)
    observation, history, steps = episode.reset(), [], []
    if observation != trajectory.initial_observation:
        raise RuntimeError(f"replaying {trajectory.task_id}: the game's first observation differs from the episode's")
    for step in trajectory.steps:
        commands = episode.admissible_commands()
        plan = episode.oracle_plan()
        action = step.action if step.action is not None else INVALID
        taken = commands.index(action) + 1 if action in commands else 0
        outcome = episode.step(action)
        if outcome.observation != step.observation:
            raise RuntimeError(f"replaying {trajectory.task_id} step {step.index}: the game's observation differs "
                               "from the episode's (the environment is not deterministic)")
        if plan:
            steps.append(WalkStep(episode.goal, tuple(history), observation, tuple(commands),
                                  commands.index(plan[0]) + 1, taken, bool(step.oracle_good), outcome.observation))
        history.append(Turn(action, outcome.observation))
        observation = outcome.observation
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


def played_pairs(trajectories: Iterable[Trajectory], keep: int) -> list[tuple[str, str]]:
    """(prompt, target) text pairs on steps a policy played: the judge's own prompt of each step (the one
    the judge stage reads) and the oracle label of the step (`Step.oracle_good`; unlabelled steps skipped).
    Unlike `judge_pairs`, whose wrong steps are uniformly random commands, these are a model's mistakes."""
    return [(prompt, judge_answer(step.oracle_good))
            for trajectory in trajectories
            for step, prompt in zip(trajectory.steps, step_prompts(trajectory, keep))
            if step.oracle_good is not None]


def balance(pairs: list[tuple[str, str]], rng: random.Random) -> list[tuple[str, str]]:
    """Equal numbers of good and bad judge targets (down-sampling the larger class)."""
    good = [p for p in pairs if p[1].endswith("{1}")]
    bad = [p for p in pairs if not p[1].endswith("{1}")]
    size = min(len(good), len(bad))
    chosen = rng.sample(good, size) + rng.sample(bad, size)
    rng.shuffle(chosen)
    return chosen


def rewrite_pairs(family: EnvironmentFamily, items: Iterable[tuple[Task, CriticFeedback]], draws: int,
                  rng: random.Random, horizon: int | None = None) -> list[tuple[str, str]]:
    """(prompt, target) text pairs for the environment model: for every (task, its critic feedback) and
    both directions, up to `draws` procedural rewrites `family.adjust(spec, direction, feedback, rng,
    horizon)` (a task whose knobs are stuck in a direction gives none there). Prompt = the compact
    `build_rewrite_prompt`; target = `generator_answer(rewrite)`, which `family.spec_from_answer`
    expands back to the rewrite."""
    pairs, answer = [], getattr(family, "generator_answer", generator_answer)
    for task, feedback in items:
        for direction in DIRECTIONS:
            prompt = build_rewrite_prompt(task, direction, feedback, family, "compact")
            for _ in range(draws):
                try:
                    spec, _change = family.adjust(task.spec, direction, feedback, rng, horizon)
                except SpecError:
                    continue
                pairs.append((prompt, answer(spec)))
    return pairs


def walk_feedback(walk: Sequence[WalkStep]) -> CriticFeedback:
    """A critic-feedback record from the oracle's labels of one walk, as if every judge sample had
    rejected exactly its non-progress steps (for the tokenizer corpus: the text shape, not a judge)."""
    bad = Counter(s.commands[s.taken_index - 1] for s in walk if not s.good)
    actions = [RejectedAction(action=a, count=c, runs=1, rationale=BAD_RATIONALE) for a, c in bad.most_common(8)]
    return CriticFeedback(trajectories=1, failed=1, rejected_steps=sum(bad.values()), actions=actions,
                          omitted=max(len(bad) - 8, 0))


def generate_tasks(family: EnvironmentFamily, knobs: dict, count: int, rng: random.Random, prefix: str,
                   exclude: set[str], horizon: int | None = None) -> list[Task]:
    """`count` valid tasks, playable within `horizon` turns, whose games (content hashes) differ from
    each other and from `exclude`."""
    tasks, seen = [], set(exclude)
    warm = getattr(family, "warm", None)  # a family that builds games (TextWorld) builds the drafts in parallel
    if warm is not None and count > 1:
        warm(knobs, rng, count)
    repeats = 0
    while len(tasks) < count:
        spec = family.validate(family.generate(knobs, rng, horizon=horizon), horizon)
        content = family.content_hash(spec)
        if content in seen:
            repeats += 1
            if repeats > 50 * count:
                raise SpecError(f"only {len(tasks)} of {count} distinct games found at knobs {knobs} "
                                f"({repeats} draws repeated a game): allow more games (e.g. a larger pool)")
            continue
        seen.add(content)
        slot = f"{prefix}{len(tasks):04d}"
        tasks.append(Task(task_id=f"{slot}-v0-{spec_hash(spec)}", slot_id=slot, env=family.name, spec=spec,
                          difficulty=family.difficulty(spec)))
    return tasks
