"""Rewards and metrics of the coding setting (docs/coding.md; DESIGN §2.5).

Per problem q: N policy programs, U judge unit tests, the ground-truth (GT) tests.

- Outcome: pass_ratio(c) = fraction of GT tests passed, pass_all(c) ∈ {0, 1}, acc(q) = mean pass_all.
- Policy data: problems with α_low ≤ acc ≤ α_high; advantage = population z-score of
  pass_ratio(c) + λ · (the fraction of the judge's parseable tests c passes) over the problem's N
  programs (λ = coding.judge_test_weight, 0 by default as in the paper's code); zero advantages dropped.
- Judge data, from the same in-band problems (`coding.judge_alpha_high` may raise the band's top for the
  judge alone, up to 1: the problems every program solved, scored by the W-empty case): G = programs passing
  every GT test, W = the others.
  A test u is *correct* iff every program of G passes it. Raw reward:
      W empty:          +1 if u correct else −1
      u correct:        +#{c ∈ W : c fails u}
      u not correct:    −#{c ∈ W : c passes u}
  z-scored over the problem's U tests (std 0 → no sample); an unparseable test is failed by every
  program (0 when W is non-empty, −1 when W is empty, and G is never empty in band).
- Metrics: pass@1 (mean pass_all), UT accuracy (fraction of judge tests that are correct), detect rate
  (fraction of judge tests that are correct and fail every program of W), over problems with G ≠ ∅.
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from rla_core.rewards import ZERO_ADVANTAGE, _generated_logprobs, zscore
from rla_core.schemas import ProgramRun, TrainingSample, Trajectory, UnitTest


def separation_rewards(pass_all: Sequence[bool], passes: Sequence[Sequence[bool] | None]) -> list[float]:
    """The raw reward of each judge test. `pass_all[c]`: program c passes every GT test; `passes[u][c]`:
    program c passes test u (None: u did not parse, so every program fails it)."""
    good = [c for c, ok in enumerate(pass_all) if ok]
    wrong = [c for c, ok in enumerate(pass_all) if not ok]
    rewards = []
    for row in passes:
        row = [False] * len(pass_all) if row is None else list(row)
        if len(row) != len(pass_all):
            raise ValueError(f"a test has {len(row)} program results for {len(pass_all)} programs")
        correct = all(row[c] for c in good)
        if not wrong:
            rewards.append(1.0 if correct else -1.0)
        elif correct:
            rewards.append(float(sum(not row[c] for c in wrong)))
        else:
            rewards.append(-float(sum(row[c] for c in wrong)))
    return rewards


@dataclass(frozen=True)
class UnitTestScore:
    tests: int
    correct: int
    detecting: int  # correct and failed by every wrong program


def score_tests(pass_all: Sequence[bool], passes: Sequence[Sequence[bool] | None]) -> UnitTestScore:
    good = [c for c, ok in enumerate(pass_all) if ok]
    wrong = [c for c, ok in enumerate(pass_all) if not ok]
    correct = detecting = 0
    for row in passes:
        row = [False] * len(pass_all) if row is None else row
        if all(row[c] for c in good):
            correct += 1
            detecting += all(not row[c] for c in wrong)
    return UnitTestScore(len(passes), correct, detecting)


def _group(items, key):
    groups: dict[str, list] = {}
    for item in items:
        groups.setdefault(key(item), []).append(item)
    return groups


def _in_band(runs: Sequence[ProgramRun], alpha_low: float, alpha_high: float) -> bool:
    acc = sum(r.pass_all for r in runs) / len(runs)
    return alpha_low <= acc <= alpha_high


def _passes(test: UnitTest) -> list[bool] | None:
    return list(test.passes) if test.stdin is not None else None


def policy_samples(trajectories: Sequence[Trajectory], runs: Sequence[ProgramRun], tests: Sequence[UnitTest],
                   alpha_low: float, alpha_high: float, judge_weight: float = 0.0
                   ) -> tuple[list[TrainingSample], dict[str, float]]:
    """One sample per program of every in-band problem (zero advantages dropped)."""
    by_task = _group(runs, lambda r: r.task_id)
    tests_by_task = _group(tests, lambda t: t.task_id)
    traj = {(t.task_id, t.sample_index): t for t in trajectories}
    samples: list[TrainingSample] = []
    band = rewards_seen = 0
    for task_id, group in by_task.items():
        if not _in_band(group, alpha_low, alpha_high):
            continue
        band += 1
        group = sorted(group, key=lambda r: r.sample_index)
        rewards = [r.pass_ratio for r in group]
        parsed = [t for t in tests_by_task.get(task_id, []) if t.stdin is not None]
        if judge_weight and parsed:
            rewards = [value + judge_weight * sum(t.passes[r.sample_index] for t in parsed) / len(parsed)
                       for value, r in zip(rewards, group)]
        rewards_seen += len(rewards)
        advantages = zscore(rewards)
        if advantages is None:
            continue
        for run, advantage in zip(group, advantages):
            if abs(advantage) <= ZERO_ADVANTAGE:
                continue
            step = traj[(task_id, run.sample_index)].steps[0]
            samples.append(TrainingSample(prompt_ids=list(step.prompt_ids), response_ids=list(step.response_ids),
                                          advantage=advantage, task_id=task_id, sample_index=run.sample_index,
                                          step_index=0, old_logprobs=_generated_logprobs(step.response_ids,
                                                                               step.response_logprobs)))
    metrics = {"policy/tasks": float(len(by_task)), "policy/tasks_in_band": float(band),
               "policy/programs": float(rewards_seen), "policy/samples": float(len(samples)),
               "policy/advantage_abs_mean": _mean(abs(s.advantage) for s in samples)}
    return samples, metrics


def judge_samples(runs: Sequence[ProgramRun], tests: Sequence[UnitTest], alpha_low: float, alpha_high: float
                  ) -> tuple[list[TrainingSample], dict[str, float]]:
    """One sample per judge test of every in-band problem, advantage = z-scored separation reward."""
    by_task = _group(runs, lambda r: r.task_id)
    samples: list[TrainingSample] = []
    raw_all: list[float] = []
    band = 0
    for task_id, group in _group(tests, lambda t: t.task_id).items():
        programs = by_task.get(task_id)
        if not programs or not _in_band(programs, alpha_low, alpha_high):
            continue
        band += 1
        pass_all = [r.pass_all for r in sorted(programs, key=lambda r: r.sample_index)]
        group = sorted(group, key=lambda t: t.index)
        raw = separation_rewards(pass_all, [_passes(t) for t in group])
        raw_all += raw
        advantages = zscore(raw)
        if advantages is None:
            continue
        for test, advantage in zip(group, advantages):
            if abs(advantage) <= ZERO_ADVANTAGE:
                continue
            samples.append(TrainingSample(prompt_ids=list(test.prompt_ids), response_ids=list(test.response_ids),
                                          advantage=advantage, task_id=task_id, sample_index=test.index,
                                          step_index=0, judge_sample=test.index,
                                          old_logprobs=_generated_logprobs(test.response_ids, test.response_logprobs)))
    metrics = {"judge/tasks_in_band": float(band), "judge/tests": float(len(raw_all)),
               "judge/samples": float(len(samples)), "judge/raw_reward_mean": _mean(raw_all)}
    return samples, metrics


def judge_metrics(runs: Sequence[ProgramRun], tests: Sequence[UnitTest]) -> dict[str, float]:
    """UT accuracy and detect rate of the judge's tests over problems with ≥ 1 correct program
    (detect over those with ≥ 1 wrong program too), and the parse rate over all tests."""
    by_task = _group(runs, lambda r: r.task_id)
    tests_n = correct = detect_n = detecting = 0
    for task_id, group in _group(tests, lambda t: t.task_id).items():
        pass_all = [r.pass_all for r in sorted(by_task.get(task_id, []), key=lambda r: r.sample_index)]
        if not any(pass_all):
            continue
        quality = score_tests(pass_all, [_passes(t) for t in sorted(group, key=lambda t: t.index)])
        tests_n += quality.tests
        correct += quality.correct
        if not all(pass_all):
            detect_n += quality.tests
            detecting += quality.detecting
    return {"ut_accuracy": correct / tests_n if tests_n else 0.0,
            "detect_rate": detecting / detect_n if detect_n else 0.0,
            "tests_scored": float(tests_n),
            "parse_rate": sum(t.stdin is not None for t in tests) / len(tests) if tests else 0.0}


def outcome_metrics(runs: Sequence[ProgramRun]) -> dict[str, float]:
    count = max(len(runs), 1)
    return {"pass_at_1": sum(r.pass_all for r in runs) / count,
            "pass_ratio": sum(r.pass_ratio for r in runs) / count,
            "crash_rate": sum(any(s == "crash" for s in r.statuses) for r in runs) / count,
            "programs": float(len(runs))}


def _mean(values) -> float:
    values = list(values)
    return sum(values) / len(values) if values else 0.0
