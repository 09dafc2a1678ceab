"""The judge benchmark: a fixed set of oracle-labelled held-out steps, scored the same way every time
(docs/design.md, "Measuring the judge").

The judge's quality is measured on the SAME steps before and after training: steps drawn from several
policies (the warm-started policy, a uniformly random one, the oracle with random slips), balanced
between good and bad steps. p₊ = P(verdict +1 | good step), p₋ = P(verdict −1 | bad step), μ = p₊ + p₋,
balanced accuracy = μ/2; raw accuracy and the format-failure rate beside them. The paper's Theorem 1
defines p₊/p₋ by trajectory outcome instead (+1 on steps of successful runs, −1 on steps of failed
runs); that version is reported too. Oracle labels never enter training.
"""
from __future__ import annotations

import random
from collections import defaultdict
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from rla_core.envs.base import EnvironmentFamily
from rla_core.models.chat import encode_prompts
from rla_core.judge.judge import judge_prompt, parse_verdict, verdict_rates
from rla_core.rollout.base import RolloutEngine, SamplingParams
from rla_core.rollout.prompts import Turn, policy_answer
from rla_core.schemas import Step, Task, Trajectory


class BenchmarkStep(BaseModel):
    """One labelled step, stored as text so that any run's tokenizer can score it."""

    model_config = ConfigDict(extra="forbid")

    step_id: str  # f"{source}/{task_id}/{step_index}"
    task_id: str
    source: str  # the policy that took the step: warmstart | random | oracle
    goal: str
    history: list[tuple[str, str]] = Field(default_factory=list)  # (command, observation) so far
    observation: str
    response: str  # the policy's text for the step
    action: str | None  # the admissible command it chose (None: the answer did not parse)
    next_observation: str
    good: bool  # oracle label: the command makes progress on a shortest plan
    success: bool  # the outcome of the run the step came from (for Theorem 1's p₊/p₋)

    def prompt(self, history_turns: int) -> str:
        history = [Turn(action, observation) for action, observation in self.history]
        return judge_prompt(self.goal, history, self.observation, self.response, self.action,
                            self.next_observation, history_turns)


# ---------------------------------------------------------------- building
def steps_of_trajectory(trajectory: Trajectory, source: str) -> list[BenchmarkStep]:
    """Every labelled step of a played trajectory, with the history the judge would see."""
    steps, history, observation = [], [], trajectory.initial_observation
    for step in trajectory.steps:
        if step.oracle_good is not None:
            steps.append(BenchmarkStep(
                step_id=f"{source}/{trajectory.task_id}/{trajectory.sample_index}/{step.index}",
                task_id=trajectory.task_id, source=source, goal=trajectory.goal, history=list(history),
                observation=observation, response=step.response_text, action=step.action,
                next_observation=step.observation, good=step.oracle_good, success=trajectory.success,
            ))
        history.append((step.action or "(invalid answer)", step.observation))
        observation = step.observation
    return steps


Chooser = Callable[[Any, list[str]], int]  # (episode, admissible commands) -> 1-based command index


def scripted_trajectory(family: EnvironmentFamily, task: Task, choose: Chooser, max_steps: int) -> Trajectory:
    """One episode played by a scripted policy (no model), every step labelled by the oracle."""
    episode = family.make(task.spec)
    observation = episode.reset()
    steps: list[Step] = []
    for index in range(max_steps):
        commands = episode.admissible_commands()
        if not commands:
            break
        choice = choose(episode, commands)
        action = commands[choice - 1]
        good = episode.is_progress(action)
        outcome = episode.step(action)
        steps.append(Step(index=index, prompt_ids=[], response_ids=[], response_text=policy_answer(choice),
                          action=action, observation=outcome.observation, oracle_good=good))
        if outcome.done:
            break
    return Trajectory(task_id=task.task_id, slot_id=task.slot_id, sample_index=0, goal=episode.goal,
                      initial_observation=observation, steps=steps, success=episode.won)


def random_chooser(rng: random.Random) -> Chooser:
    """Uniformly random admissible commands."""
    return lambda episode, commands: rng.randrange(len(commands)) + 1


def oracle_chooser(noise: float, rng: random.Random) -> Chooser:
    """The oracle's next command, but a random one with probability `noise`."""
    def choose(episode: Any, commands: list[str]) -> int:
        plan = episode.oracle_plan()
        if not plan or rng.random() < noise:
            return rng.randrange(len(commands)) + 1
        return commands.index(plan[0]) + 1

    return choose


def balanced_sample(steps: Iterable[BenchmarkStep], per_class: int, rng: random.Random) -> list[BenchmarkStep]:
    """Up to `per_class` good and as many bad steps of EACH source (the smaller class sets the size)."""
    by_source: dict[str, dict[bool, list[BenchmarkStep]]] = defaultdict(lambda: {True: [], False: []})
    for step in steps:
        by_source[step.source][step.good].append(step)
    chosen: list[BenchmarkStep] = []
    for source in sorted(by_source):
        classes = by_source[source]
        size = min(per_class, len(classes[True]), len(classes[False]))
        for label in (True, False):
            chosen += rng.sample(classes[label], size)
    return sorted(chosen, key=lambda s: s.step_id)


# ---------------------------------------------------------------- scoring
def score_benchmark(engine: RolloutEngine, tokenizer: Any, steps: Sequence[BenchmarkStep], m: int,
                    params: SamplingParams, history_turns: int,
                    progress: Callable[[int], None] | None = None) -> tuple[list[list[int]], dict[str, float]]:
    """m judge verdicts per benchmark step, and `benchmark_metrics` of them."""
    if not steps:
        return [], {}
    prompt_ids = encode_prompts(tokenizer, [s.prompt(history_turns) for s in steps])
    params = SamplingParams(params.max_new_tokens, params.temperature, params.seed, n=m)
    generations = engine.generate(prompt_ids, params, progress)
    verdicts = [[parse_verdict(g.text) for g in generations[i * m:(i + 1) * m]] for i in range(len(steps))]
    return verdicts, benchmark_metrics(steps, verdicts)


def benchmark_metrics(steps: Sequence[BenchmarkStep], verdicts: Sequence[Sequence[int]]) -> dict[str, float]:
    """Per judge sample: p₊/p₋/μ/balanced/raw accuracy against oracle labels, overall and per source;
    the same by trajectory outcome (`outcome_*`, Theorem 1); the unparsed-verdict rate."""
    if len(steps) != len(verdicts):
        raise ValueError(f"{len(steps)} steps but {len(verdicts)} verdict lists")
    by_label = [(s.good, v) for s, vs in zip(steps, verdicts) for v in vs]
    by_outcome = [(s.success, v) for s, vs in zip(steps, verdicts) for v in vs]
    metrics = dict(verdict_rates(by_label))
    metrics.update({f"outcome_{k}": v for k, v in verdict_rates(by_outcome).items() if k in ("p_pos", "p_neg", "mu")})
    metrics["format_failure_rate"] = sum(v == 0 for _, v in by_label) / max(len(by_label), 1)
    metrics["steps"] = float(len(steps))
    for source in sorted({s.source for s in steps}):
        pairs = [(s.good, v) for s, vs in zip(steps, verdicts) if s.source == source for v in vs]
        rates = verdict_rates(pairs)
        if "balanced_acc" in rates:
            metrics[f"{source}_balanced_acc"] = rates["balanced_acc"]
    return metrics
