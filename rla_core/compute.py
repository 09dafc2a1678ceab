"""Compute accounting: what an iteration spent, so that ablation rows are compared at equal compute, and the
sample cap that keeps every row's updates the same size.

Pure: records in, numbers (or records) out.
"""
from __future__ import annotations

import random
from collections.abc import Iterable, Sequence

from rla_core.schemas import JudgedStep, TrainingSample, Trajectory


def cap_samples(samples: list[TrainingSample], cap: int | None, rng: random.Random) -> list[TrainingSample]:
    """At most `cap` samples: a uniform random subset (rng), in the original order; all when cap is None
    or not exceeded. One cap in every ablation row keeps the updates equal whatever the filters kept."""
    if cap is None or len(samples) <= cap:
        return samples
    keep = set(rng.sample(range(len(samples)), cap))
    return [sample for index, sample in enumerate(samples) if index in keep]


def _sample_tokens(samples: Sequence[TrainingSample]) -> int:
    return sum(len(s.prompt_ids) + len(s.response_ids) for s in samples)


def judge_responses(judged: Iterable[JudgedStep]) -> list[list[int]]:
    """The token ids of every judge sample of every judged step."""
    return [sample.response_ids for j in judged for sample in j.samples]


def compute_metrics(trajectories: Sequence[Trajectory], judge_outputs: Iterable[list[int]],
                    policy: Sequence[TrainingSample], judge: Sequence[TrainingSample]) -> dict[str, float]:
    """compute/episodes (trajectories rolled out), compute/policy_samples and compute/judge_samples (what the
    updates train on), compute/generated_tokens (response tokens the policy sampled plus `judge_outputs`, the
    judge's: verdicts or unit tests), compute/train_tokens (prompt + response tokens of the training samples)
    and compute/tokens (their sum)."""
    generated = sum(len(step.response_ids) for t in trajectories for step in t.steps)
    generated += sum(len(ids) for ids in judge_outputs)
    trained = _sample_tokens(policy) + _sample_tokens(judge)
    return {
        "compute/episodes": float(len(trajectories)),
        "compute/policy_samples": float(len(policy)),
        "compute/judge_samples": float(len(judge)),
        "compute/generated_tokens": float(generated),
        "compute/train_tokens": float(trained),
        "compute/tokens": float(generated + trained),
    }
