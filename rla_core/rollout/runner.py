"""Play many episodes together: every active episode of a batch generates in the same engine call.

Each turn: build the prompt of every unfinished episode, generate once for all of them, parse the
answers, step the environments. The exact prompt and generated ids are recorded per step.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

from rla_core.envs.base import EnvironmentFamily, Episode
from rla_core.models.chat import encode_prompts
from rla_core.rollout.base import RolloutEngine, SamplingParams
from rla_core.rollout.prefix_reuse import PrefixStore, require_reuse
from rla_core.rollout.prompts import Turn, parse_action, policy_prompt
from rla_core.schemas import Step, Task, Trajectory

INVALID = "(invalid answer)"


@dataclass
class _Live:
    task: Task
    sample_index: int
    episode: Episode
    initial_observation: str
    observation: str
    history: list[Turn] = field(default_factory=list)
    steps: list[Step] = field(default_factory=list)
    done: bool = False
    won: bool = False


def _start(task: Task, sample_index: int, family: EnvironmentFamily) -> _Live:
    episode = family.make(task.spec)
    observation = episode.reset()
    return _Live(task, sample_index, episode, observation, observation)


def _advance(live: _Live, prompt_ids: list[int], generation: Any, commands: list[str], label: bool) -> None:
    action = parse_action(generation.text, commands)
    good = live.episode.is_progress(action) if (label and action is not None) else (False if label else None)
    outcome = live.episode.step(action if action is not None else INVALID)
    live.steps.append(Step(
        index=len(live.steps), prompt_ids=prompt_ids, response_ids=generation.token_ids,
        response_text=generation.text, response_logprobs=list(generation.logprobs), action=action,
        observation=outcome.observation, oracle_good=good,
    ))
    live.history.append(Turn(action or INVALID, outcome.observation))
    live.observation = outcome.observation
    live.done, live.won = outcome.done, outcome.won


def play(
    engine: RolloutEngine,
    tokenizer: Any,
    family: EnvironmentFamily,
    jobs: list[tuple[Task, int]],
    params: SamplingParams,
    max_steps: int,
    history_turns: int,
    label_steps: bool = True,
    progress: Callable[[int], None] | None = None,
    reuse_prefixes: bool = False,
) -> tuple[list[Trajectory], dict[str, float]]:
    """Roll out (task, sample_index) jobs to completion; a won episode ends at its winning step.

    reuse_prefixes: each turn's prefill copies the keys and values of the prompt's common prefix with the
    same episode's previous prompt (rla_core/rollout/prefix_reuse.py; the engine must take `prefixes`).

    Returns trajectories in job order and metrics (success_rate, mean_steps, invalid_rate; with
    reuse_prefixes also prefix_reused_rate and prefix_prefill_saved).
    """
    if reuse_prefixes:
        require_reuse(engine)
    store = PrefixStore() if reuse_prefixes else None
    lives = [_start(task, j, family) for task, j in jobs]
    for turn in range(max_steps):
        active = [live for live in lives if not live.done]
        if not active:
            break
        commands = [live.episode.admissible_commands() for live in active]
        texts = [policy_prompt(l.episode.goal, l.history, l.observation, c, history_turns)
                 for l, c in zip(active, commands)]
        prompt_ids = encode_prompts(tokenizer, texts)
        turn_params = SamplingParams(params.max_new_tokens, params.temperature, params.seed * 1000 + turn)
        if store is None:
            generations = engine.generate(prompt_ids, turn_params)
        else:
            generations = engine.generate(prompt_ids, turn_params, prefixes=(store, [id(l) for l in active]))
        for live, ids, gen, cmds in zip(active, prompt_ids, generations, commands):
            _advance(live, ids, gen, cmds, label_steps)
        if store is not None:
            store.forget([id(live) for live in active if live.done])
        if progress is not None:
            progress(sum(1 for live in active if live.done))
    trajectories = [
        Trajectory(task_id=l.task.task_id, slot_id=l.task.slot_id, sample_index=l.sample_index,
                   goal=l.episode.goal, initial_observation=l.initial_observation, steps=l.steps, success=l.won)
        for l in lives
    ]
    metrics = rollout_metrics(trajectories)
    return trajectories, metrics if store is None else {**metrics, **store.metrics()}


def rollout_metrics(trajectories: list[Trajectory]) -> dict[str, float]:
    steps = [s for t in trajectories for s in t.steps]
    count = max(len(trajectories), 1)
    return {
        "success_rate": sum(t.success for t in trajectories) / count,
        "mean_steps": len(steps) / count,
        "invalid_rate": sum(s.action is None for s in steps) / max(len(steps), 1),
        "oracle_good_rate": sum(bool(s.oracle_good) for s in steps) / max(len(steps), 1),
    }
