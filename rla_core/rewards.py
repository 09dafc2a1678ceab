"""Step rewards, step advantages and the training data of the policy and the judge (docs/design.md,
"The formulas", Policy data and Judge data).

Every per-step quantity is keyed by an explicit `StepKey(task_id, sample_index, step_index)`; samples
are built by looking their advantage up by key, never by position, so a dropped or reordered item can
never shift advantages onto the wrong sample.

Callers pass only the trajectories that may train (rollouts of rejected candidates are excluded before
these functions are called). Judged steps are a lookup table: entries whose step is not among the
given trajectories are ignored.
"""
from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from typing import NamedTuple

import numpy as np

from rla_core.schemas import JudgedStep, Trajectory, TrainingSample

STD_EPS = 1e-8  # a group whose population std is at or below this gets advantage 0
ZERO_ADVANTAGE = 1e-9  # |Â| at or below this is zero: a value equal to its group mean leaves ~1e-16 residue
FORMAT_PENALTY = -2.0  # raw reward of a judge sample whose verdict did not parse


class StepKey(NamedTuple):
    task_id: str
    sample_index: int
    step_index: int


# ---------------------------------------------------------------- task-level statistics and filters
def group_by_task(trajectories: Iterable[Trajectory]) -> dict[str, list[Trajectory]]:
    """task_id -> its trajectories, in input order."""
    groups: dict[str, list[Trajectory]] = defaultdict(list)
    for trajectory in trajectories:
        groups[trajectory.task_id].append(trajectory)
    return dict(groups)


def task_accuracy(trajectories: Iterable[Trajectory]) -> dict[str, float]:
    """acc(q) = (#successful trajectories of q) / (#trajectories of q), per task_id."""
    return {
        task_id: sum(t.success for t in group) / len(group)
        for task_id, group in group_by_task(trajectories).items()
    }


def has_mixed_outcomes(group: Sequence[Trajectory]) -> bool:
    """Policy-data filter: the task has at least one success and at least one failure."""
    return any(t.success for t in group) and not all(t.success for t in group)


def in_band(acc: float, alpha_low: float, alpha_high: float) -> bool:
    """Reward-model-data filter: α_low ≤ acc ≤ α_high (both ends included)."""
    return alpha_low <= acc <= alpha_high


def index_judged(judged: Iterable[JudgedStep] | Mapping[StepKey, JudgedStep]) -> dict[StepKey, JudgedStep]:
    """Judged steps by StepKey; raises on a duplicate key (two verdict sets for one step)."""
    if isinstance(judged, Mapping):
        items = list(judged.values())
    else:
        items = list(judged)
    table: dict[StepKey, JudgedStep] = {}
    for item in items:
        key = StepKey(item.task_id, item.sample_index, item.step_index)
        if key in table:
            raise ValueError(f"duplicate judged step {key}")
        table[key] = item
    return table


# ---------------------------------------------------------------- rewards and advantages
def mean_verdict(judged_step: JudgedStep) -> float:
    """mean_l S_jil over the m judge samples; an unparseable verdict (0) counts as 0 in the mean."""
    if not judged_step.samples:
        raise ValueError(
            f"judged step ({judged_step.task_id}, {judged_step.sample_index}, "
            f"{judged_step.step_index}) has no judge samples"
        )
    return sum(s.verdict for s in judged_step.samples) / len(judged_step.samples)


def step_rewards(
    trajectories: Iterable[Trajectory],
    judged: Iterable[JudgedStep] | Mapping[StepKey, JudgedStep],
    step_weight: float,
) -> dict[StepKey, float]:
    """R_ji = O_j + λ · mean_l S_jil for every step of every trajectory.

    O_j ∈ {+1, −1} is the trajectory's outcome, λ = `step_weight`. With λ = 0 the judge is not read
    (outcome-only baseline) and `judged` may be empty; with λ > 0 a step without verdicts raises.
    """
    table = index_judged(judged) if step_weight != 0 else {}
    rewards: dict[StepKey, float] = {}
    for trajectory in trajectories:
        for step in trajectory.steps:
            key = StepKey(trajectory.task_id, trajectory.sample_index, step.index)
            if key in rewards:
                raise ValueError(f"duplicate step {key}")
            reward = float(trajectory.outcome)
            if step_weight != 0:
                if key not in table:
                    raise KeyError(f"no judge verdicts for step {key}")
                reward += step_weight * mean_verdict(table[key])
            rewards[key] = reward
    return rewards


def step_advantages(rewards: Mapping[StepKey, float]) -> dict[StepKey, float]:
    """Vectorised per-(task, step index) z-score: Â_ji = (R_ji − mean_g R) / std_g R.

    Group g = all trajectories of the same task that reach step i. Population std (divide by |g|);
    std ≤ 1e-8 (which includes |g| = 1) gives Â = 0.
    """
    keys = list(rewards)
    if not keys:
        return {}
    group_index: dict[tuple[str, int], int] = {}
    groups = np.array([group_index.setdefault((k.task_id, k.step_index), len(group_index)) for k in keys])
    values = np.array([rewards[k] for k in keys], dtype=np.float64)
    counts = np.bincount(groups).astype(np.float64)
    means = np.bincount(groups, weights=values) / counts
    centred = values - means[groups]
    stds = np.sqrt(np.bincount(groups, weights=centred * centred) / counts)
    safe = np.where(stds > STD_EPS, stds, 1.0)
    advantages = np.where(stds[groups] > STD_EPS, centred / safe[groups], 0.0)
    return {key: float(a) for key, a in zip(keys, advantages)}


def step_advantages_loop(rewards: Mapping[StepKey, float]) -> dict[StepKey, float]:
    """Plain-loop reference of `step_advantages` (same formula), for tests and reading."""
    groups: dict[tuple[str, int], list[StepKey]] = defaultdict(list)
    for key in rewards:
        groups[(key.task_id, key.step_index)].append(key)
    advantages: dict[StepKey, float] = {}
    for members in groups.values():
        values = [rewards[k] for k in members]
        mean = sum(values) / len(values)
        std = math.sqrt(sum((v - mean) ** 2 for v in values) / len(values))
        for key, value in zip(members, values):
            advantages[key] = (value - mean) / std if std > STD_EPS else 0.0
    return {key: advantages[key] for key in rewards}


def zscore(values: Sequence[float]) -> list[float] | None:
    """Population z-score of a short list; None when the std is ≤ 1e-8 (no signal to learn from)."""
    mean = sum(values) / len(values)
    std = math.sqrt(sum((v - mean) ** 2 for v in values) / len(values))
    if std <= STD_EPS:
        return None
    return [(v - mean) / std for v in values]


# ---------------------------------------------------------------- training samples
def policy_samples(
    trajectories: Sequence[Trajectory],
    judged: Iterable[JudgedStep] | Mapping[StepKey, JudgedStep],
    step_weight: float,
) -> tuple[list[TrainingSample], dict[str, float]]:
    """One policy TrainingSample per step of tasks with mixed outcomes, advantage from `step_advantages`.

    The sample carries the step's exact generated `prompt_ids` / `response_ids`; samples whose
    advantage is zero (|Â| ≤ 1e-9: float residue of a value equal to its group mean) are dropped (no
    gradient, only cost).
    """
    groups = group_by_task(trajectories)
    kept = [t for group in groups.values() if has_mixed_outcomes(group) for t in group]
    rewards = step_rewards(kept, judged, step_weight)
    advantages = step_advantages(rewards)
    samples: list[TrainingSample] = []
    for trajectory in kept:
        for step in trajectory.steps:
            key = StepKey(trajectory.task_id, trajectory.sample_index, step.index)
            advantage = advantages[key]
            if abs(advantage) <= ZERO_ADVANTAGE:
                continue
            samples.append(
                TrainingSample(
                    prompt_ids=list(step.prompt_ids),
                    response_ids=list(step.response_ids),
                    advantage=advantage,
                    task_id=key.task_id,
                    sample_index=key.sample_index,
                    step_index=key.step_index,
                    old_logprobs=_generated_logprobs(step.response_ids, step.response_logprobs),
                )
            )
    metrics = {
        "policy/tasks": float(len(groups)),
        "policy/tasks_mixed": float(sum(has_mixed_outcomes(g) for g in groups.values())),
        "policy/steps": float(len(rewards)),
        "policy/samples": float(len(samples)),
        "policy/zero_advantage_dropped": float(len(rewards) - len(samples)),
        "policy/reward_mean": _mean(rewards.values()),
        "policy/advantage_abs_mean": _mean(abs(s.advantage) for s in samples),
    }
    return samples, metrics


def outcome_weights(steps: Iterable[tuple[str, bool]]) -> dict[tuple[str, bool], float]:
    """Weights that give the steps of successful and of failed runs equal total weight inside a task.

    steps: (task_id, success) per trained step. w(task, outcome) = n_task / (2 · n_task,outcome), so the
    weights of a task's steps average 1. A task with steps of one outcome only keeps weight 1.
    """
    counts: dict[tuple[str, bool], int] = defaultdict(int)
    for key in steps:
        counts[key] += 1
    weights = {}
    for (task_id, success), count in counts.items():
        other = counts.get((task_id, not success), 0)
        weights[(task_id, success)] = (count + other) / (2 * count) if other else 1.0
    return weights


# Over 60 lines: the judge reward of DESIGN §2 step by step, each line a term of the formula.
def judge_samples(
    trajectories: Sequence[Trajectory],
    judged: Iterable[JudgedStep] | Mapping[StepKey, JudgedStep],
    step_weight: float,
    alpha_low: float,
    alpha_high: float,
    outcome_balance: bool = False,
) -> tuple[list[TrainingSample], dict[str, float]]:
    """Reward-model TrainingSamples from tasks with α_low ≤ acc ≤ α_high.

    For judged step (j, i) and judge sample l: raw_l = R_ji · S_jil if S_jil ∈ {±1}, else −2 (format
    penalty). Advantage = population z-score of raw over the m samples of that step; a step whose raw
    values have std ≤ 1e-8 is skipped; samples with zero advantage (|Â| ≤ 1e-9) are dropped. The sample
    carries the judge sample's own generated ids and `judge_sample = l`.

    `outcome_balance` (beyond the paper): multiply the advantages of a step by `outcome_weights`, so that
    inside a task the trained steps of successful and of failed runs weigh the same. Without it, failed
    runs (more of them, and longer) dominate, and the judge drifts towards answering −1 (Theorem 2).
    """
    accuracy = task_accuracy(trajectories)
    kept = [t for t in trajectories if in_band(accuracy[t.task_id], alpha_low, alpha_high)]
    outcome = {(t.task_id, t.sample_index): t.success for t in kept}
    table = index_judged(judged)
    rewards = step_rewards(kept, table, step_weight)
    scored: list[tuple[StepKey, list[float]]] = []
    skipped = penalised = total = 0
    for key in rewards:  # trajectory order: deterministic and independent of `judged` order
        judged_step = table.get(key)
        if judged_step is None:
            raise KeyError(f"no judge verdicts for step {key}")
        verdicts = [s.verdict for s in judged_step.samples]
        raw = [rewards[key] * v if v in (1, -1) else FORMAT_PENALTY for v in verdicts]
        total += len(raw)
        penalised += sum(v not in (1, -1) for v in verdicts)
        advantages = zscore(raw)
        if advantages is None:
            skipped += 1
            continue
        scored.append((key, advantages))
    weights = outcome_weights((k.task_id, outcome[(k.task_id, k.sample_index)]) for k, _ in scored) \
        if outcome_balance else {}
    samples: list[TrainingSample] = []
    for key, advantages in scored:
        weight = weights.get((key.task_id, outcome[(key.task_id, key.sample_index)]), 1.0)
        for index, (sample, advantage) in enumerate(zip(table[key].samples, advantages)):
            if abs(advantage) <= ZERO_ADVANTAGE:
                continue
            samples.append(
                TrainingSample(
                    prompt_ids=list(sample.prompt_ids),
                    response_ids=list(sample.response_ids),
                    advantage=advantage * weight,
                    task_id=key.task_id,
                    sample_index=key.sample_index,
                    step_index=key.step_index,
                    judge_sample=index,
                    old_logprobs=_generated_logprobs(sample.response_ids, sample.response_logprobs),
                )
            )
    trained_success = sum(outcome[(k.task_id, k.sample_index)] for k, _ in scored)
    metrics = {
        "judge/tasks": float(len(accuracy)),
        "judge/tasks_in_band": float(sum(in_band(a, alpha_low, alpha_high) for a in accuracy.values())),
        "judge/steps": float(len(rewards)),
        "judge/steps_zero_variance": float(skipped),
        "judge/samples": float(len(samples)),
        "judge/format_penalty_rate": penalised / total if total else 0.0,
        "judge/trained_steps_from_successes": trained_success / len(scored) if scored else 0.0,
    }
    return samples, metrics


def _generated_logprobs(response_ids: Sequence[int], logprobs: Sequence[float]) -> list[float] | None:
    """The generation's own log-probs of a response, when it recorded one per token (else None)."""
    return list(logprobs) if logprobs and len(logprobs) == len(response_ids) else None


def _mean(values: Iterable[float]) -> float:
    items = list(values)
    return sum(items) / len(items) if items else 0.0
