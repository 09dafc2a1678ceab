"""Step rewards, advantages and training samples, against hand-computed numbers (docs/design.md,
"The formulas", Policy data and Judge data)."""
from __future__ import annotations

import math
import random

import pytest

from rla_core.rewards import (
    outcome_weights,
    StepKey,
    has_mixed_outcomes,
    in_band,
    judge_samples,
    policy_samples,
    step_advantages,
    step_advantages_loop,
    step_rewards,
    task_accuracy,
    zscore,
)
from rla_core.schemas import JudgedStep, JudgeSample, Step, Trajectory


def make_traj(task_id: str, j: int, n_steps: int, success: bool) -> Trajectory:
    # ids encode (task, j, i) so a mis-paired sample is visible in its ids
    tag = sum(ord(c) for c in task_id)
    steps = [
        Step(
            index=i,
            prompt_ids=[tag, j, i],
            response_ids=[1000 * tag + 10 * j + i],
            response_text=f"\\boxed{{{i}}}",
            action=f"act {i}",
            observation="obs",
        )
        for i in range(n_steps)
    ]
    return Trajectory(
        task_id=task_id, slot_id=task_id, sample_index=j, goal="g", initial_observation="o", steps=steps, success=success
    )


def make_judged(task_id: str, j: int, i: int, verdicts: list[int]) -> JudgedStep:
    samples = [
        JudgeSample(prompt_ids=[j, i, l], response_ids=[7000 + 100 * j + 10 * i + l], text="r", verdict=v)
        for l, v in enumerate(verdicts)
    ]
    return JudgedStep(task_id=task_id, sample_index=j, step_index=i, samples=samples)


# Task "a": j0 succeeds in 2 steps, j1 fails after 3 steps; m = 3.
A_TRAJ = [make_traj("a", 0, 2, True), make_traj("a", 1, 3, False)]
A_JUDGED = [
    make_judged("a", 0, 0, [1, 1, 1]),  # R = 1 + 1 = 2
    make_judged("a", 0, 1, [1, -1, 0]),  # R = 1 + 0 = 1   (0 counts as 0 in the mean)
    make_judged("a", 1, 0, [-1, -1, 1]),  # R = -1 - 1/3 = -4/3
    make_judged("a", 1, 1, [0, 0, 0]),  # R = -1
    make_judged("a", 1, 2, [1, 1, -1]),  # R = -1 + 1/3 = -2/3
]


def test_step_rewards_hand_computed():
    rewards = step_rewards(A_TRAJ, A_JUDGED, step_weight=1.0)
    expected = {("a", 0, 0): 2.0, ("a", 0, 1): 1.0, ("a", 1, 0): -4 / 3, ("a", 1, 1): -1.0, ("a", 1, 2): -2 / 3}
    assert rewards.keys() == expected.keys()
    for key, value in expected.items():
        assert rewards[key] == pytest.approx(value)


def test_step_rewards_weight_and_outcome_only():
    half = step_rewards(A_TRAJ, A_JUDGED, step_weight=0.5)
    assert half[StepKey("a", 1, 0)] == pytest.approx(-1 - 0.5 / 3)
    outcome_only = step_rewards(A_TRAJ, [], step_weight=0.0)  # λ = 0 never reads the judge
    assert outcome_only == {("a", 0, 0): 1.0, ("a", 0, 1): 1.0, ("a", 1, 0): -1.0, ("a", 1, 1): -1.0, ("a", 1, 2): -1.0}


def test_step_rewards_missing_or_duplicate_verdicts_raise():
    with pytest.raises(KeyError):
        step_rewards(A_TRAJ, A_JUDGED[:-1], step_weight=1.0)
    with pytest.raises(ValueError):
        step_rewards(A_TRAJ, A_JUDGED + [A_JUDGED[0]], step_weight=1.0)


def test_step_advantages_three_trajectories():
    # R = 1.5, -1.5, -1 (λ = 0.5): mean -1/3, deviations 11/6, -7/6, -2/3, population var 31/18.
    rewards = {StepKey("b", 0, 0): 1.5, StepKey("b", 1, 0): -1.5, StepKey("b", 2, 0): -1.0}
    std = math.sqrt(31 / 18)
    adv = step_advantages(rewards)
    assert adv[StepKey("b", 0, 0)] == pytest.approx((11 / 6) / std)
    assert adv[StepKey("b", 1, 0)] == pytest.approx((-7 / 6) / std)
    assert adv[StepKey("b", 2, 0)] == pytest.approx((-2 / 3) / std)
    assert adv[StepKey("b", 0, 0)] == pytest.approx(1.3970014, abs=1e-6)


def test_step_advantages_groups_by_task_and_step_and_handles_degenerate_groups():
    rewards = {
        StepKey("a", 0, 0): 2.0,
        StepKey("a", 1, 0): -4 / 3,  # group (a, 0): ±1
        StepKey("a", 1, 2): -2 / 3,  # reached by one trajectory only: 0
        StepKey("c", 0, 0): 0.0,
        StepKey("c", 1, 0): 0.0,  # zero std: 0
        StepKey("d", 0, 0): 5.0,  # another task at the same step index is a different group
    }
    adv = step_advantages(rewards)
    assert adv == pytest.approx(
        {("a", 0, 0): 1.0, ("a", 1, 0): -1.0, ("a", 1, 2): 0.0, ("c", 0, 0): 0.0, ("c", 1, 0): 0.0, ("d", 0, 0): 0.0}
    )
    assert step_advantages({}) == {}


def test_vectorised_and_loop_advantages_agree():
    rng = random.Random(0)
    rewards = {}
    for t in range(7):
        for j in range(rng.randint(1, 6)):
            for i in range(rng.randint(1, 5)):
                rewards[StepKey(f"t{t}", j, i)] = rng.choice([-2.0, -1.0, 0.0, 1.0, 2.0]) + rng.random() * (t % 2)
    fast, slow = step_advantages(rewards), step_advantages_loop(rewards)
    assert list(fast) == list(slow)
    for key in rewards:
        assert fast[key] == pytest.approx(slow[key], abs=1e-9)
    assert any(v != 0 for v in fast.values()) and any(v == 0 for v in fast.values())


def test_policy_samples_pairing_filter_and_drop():
    # Task "f": R = 1, 0, -1 → advantages +sqrt(3/2), 0 (dropped), -sqrt(3/2).
    f_traj = [make_traj("f", 0, 1, True), make_traj("f", 1, 1, False), make_traj("f", 2, 1, False)]
    f_judged = [make_judged("f", 0, 0, [1, -1]), make_judged("f", 1, 0, [1, 1]), make_judged("f", 2, 0, [1, -1])]
    d_traj = [make_traj("d", 0, 1, True), make_traj("d", 1, 1, True)]  # no failure: excluded
    d_judged = [make_judged("d", 0, 0, [1, 1]), make_judged("d", 1, 0, [-1, -1])]
    # interleave tasks and reverse judged order: pairing must be by key, not position
    trajectories = [f_traj[2], A_TRAJ[1], d_traj[0], f_traj[0], A_TRAJ[0], f_traj[1], d_traj[1]]
    judged = list(reversed(A_JUDGED + f_judged + d_judged))
    samples, metrics = policy_samples(trajectories, judged, step_weight=1.0)

    got = {(s.task_id, s.sample_index, s.step_index): s for s in samples}
    expected = {
        ("a", 0, 0): 1.0, ("a", 1, 0): -1.0, ("a", 0, 1): 1.0, ("a", 1, 1): -1.0,  # ("a",1,2) alone → 0
        ("f", 0, 0): math.sqrt(1.5), ("f", 2, 0): -math.sqrt(1.5),
    }
    assert got.keys() == expected.keys()
    for (task_id, j, i), advantage in expected.items():
        sample = got[(task_id, j, i)]
        assert sample.advantage == pytest.approx(advantage)
        tag = sum(ord(c) for c in task_id)
        assert sample.prompt_ids == [tag, j, i] and sample.response_ids == [1000 * tag + 10 * j + i]
        assert sample.judge_sample is None
    assert metrics["policy/tasks"] == 3 and metrics["policy/tasks_mixed"] == 2
    assert metrics["policy/steps"] == 8 and metrics["policy/samples"] == 6
    assert metrics["policy/zero_advantage_dropped"] == 2


def test_an_advantage_left_as_float_residue_is_dropped():
    """R = −2, −2/3, +2/3: the middle value equals the mean, but (R − mean)/std is −1.0e-16, not 0."""
    traj = [make_traj("r", 0, 1, False), make_traj("r", 1, 1, False), make_traj("r", 2, 1, True)]
    judged = [make_judged("r", 0, 0, [-1, -1, -1]), make_judged("r", 1, 0, [1, 1, -1]),
              make_judged("r", 2, 0, [-1, -1, 1])]
    residue = step_advantages(step_rewards(traj, judged, 1.0))[StepKey("r", 1, 0)]
    assert residue != 0.0 and abs(residue) < 1e-15  # the float residue this test is about
    samples, metrics = policy_samples(traj, judged, step_weight=1.0)
    assert [(s.sample_index, round(s.advantage, 6)) for s in samples] == [(0, -1.224745), (2, 1.224745)]
    assert metrics["policy/zero_advantage_dropped"] == 1


def test_policy_samples_zero_std_group_gives_nothing():
    # success with mean S = -1 and failure with mean S = +1 both give R = 0
    traj = [make_traj("c", 0, 1, True), make_traj("c", 1, 1, False)]
    judged = [make_judged("c", 0, 0, [-1, -1]), make_judged("c", 1, 0, [1, 1])]
    samples, _ = policy_samples(traj, judged, step_weight=1.0)
    assert samples == []


def test_judge_samples_hand_computed():
    e_traj = [make_traj("e", 0, 1, True), make_traj("e", 1, 1, False)]
    e_judged = [make_judged("e", 0, 0, [1, -1, 0, 0]), make_judged("e", 1, 0, [1, 1, 1, 1])]
    d_traj = [make_traj("d", 0, 1, True), make_traj("d", 1, 1, True)]  # acc 1.0: out of band
    d_judged = [make_judged("d", 0, 0, [1, -1]), make_judged("d", 1, 0, [-1, 0])]
    samples, metrics = judge_samples(
        A_TRAJ + e_traj + d_traj, A_JUDGED + e_judged + d_judged, step_weight=1.0, alpha_low=0.2, alpha_high=0.8
    )
    got = {(s.task_id, s.sample_index, s.step_index, s.judge_sample): s for s in samples}
    r2, s14 = math.sqrt(2), math.sqrt(14)
    expected = {
        # (a,0,0): R=2, raw [2,2,2] → zero variance, skipped
        # (a,0,1): R=1, raw [1,-1,-2] → mean -2/3, std sqrt(14)/3
        ("a", 0, 1, 0): 5 / s14, ("a", 0, 1, 1): -1 / s14, ("a", 0, 1, 2): -4 / s14,
        # (a,1,0): R=-4/3, raw [4/3,4/3,-4/3] → mean 4/9, std 8·sqrt(2)/9
        ("a", 1, 0, 0): 1 / r2, ("a", 1, 0, 1): 1 / r2, ("a", 1, 0, 2): -r2,
        # (a,1,1): raw [-2,-2,-2] (all unparseable) → skipped
        # (a,1,2): R=-2/3, raw [-2/3,-2/3,2/3]
        ("a", 1, 2, 0): -1 / r2, ("a", 1, 2, 1): -1 / r2, ("a", 1, 2, 2): r2,
        # (e,0,0): R=1, raw [1,-1,-2,-2] → mean -1, std sqrt(1.5); l=1 has z = 0 → dropped
        ("e", 0, 0, 0): 2 / math.sqrt(1.5), ("e", 0, 0, 2): -1 / math.sqrt(1.5), ("e", 0, 0, 3): -1 / math.sqrt(1.5),
        # (e,1,0): R = -1 + 1 = 0, raw [0,0,0,0] → skipped
    }
    assert got.keys() == expected.keys()
    for (task_id, j, i, l), advantage in expected.items():
        sample = got[(task_id, j, i, l)]
        assert sample.advantage == pytest.approx(advantage)
        stride = 7000 + 100 * j + 10 * i + l  # the judge sample's own generated ids
        assert sample.prompt_ids == [j, i, l] and sample.response_ids == [stride]
    assert metrics["judge/tasks_in_band"] == 2 and metrics["judge/steps_zero_variance"] == 3
    assert metrics["judge/samples"] == 12
    assert metrics["judge/format_penalty_rate"] == pytest.approx(6 / 23)


def test_accuracy_and_filters():
    traj = [make_traj("x", j, 1, success=j < 4) for j in range(5)] + A_TRAJ
    acc = task_accuracy(traj)
    assert acc == {"x": 0.8, "a": 0.5}
    assert in_band(0.8, 0.2, 0.8) and in_band(0.2, 0.2, 0.8) and in_band(0.5, 0.2, 0.8)
    assert not in_band(0.19, 0.2, 0.8) and not in_band(0.81, 0.2, 0.8)
    assert has_mixed_outcomes(A_TRAJ)
    assert not has_mixed_outcomes([make_traj("y", 0, 1, True)])
    assert not has_mixed_outcomes([make_traj("y", 0, 1, False), make_traj("y", 1, 1, False)])


def test_zscore():
    assert zscore([1.0, 1.0]) is None
    assert zscore([1.0, 3.0]) == pytest.approx([-1.0, 1.0])


def test_outcome_balance_gives_successes_and_failures_equal_weight_inside_a_task():
    """Task "w" (acc 1/2): the success has 1 trained step, the failure 3; m = 2, verdicts split, so every
    trained step has z-scores (+1, −1). Weights: success 4/(2·1) = 2, failure 4/(2·3) = 2/3."""
    traj = [make_traj("w", 0, 1, True), make_traj("w", 1, 3, False)]
    judged = [make_judged("w", 0, 0, [1, -1])] + [make_judged("w", 1, i, [1, -1]) for i in range(3)]
    plain, _ = judge_samples(traj, judged, 1.0, 0.2, 0.8)
    balanced, metrics = judge_samples(traj, judged, 1.0, 0.2, 0.8, outcome_balance=True)
    assert [(s.sample_index, s.step_index, s.judge_sample) for s in balanced] == \
        [(s.sample_index, s.step_index, s.judge_sample) for s in plain]
    for before, after in zip(plain, balanced):
        weight = 2.0 if before.sample_index == 0 else 2 / 3
        assert after.advantage == pytest.approx(before.advantage * weight)
    mass = {j: sum(abs(s.advantage) for s in balanced if s.sample_index == j) for j in (0, 1)}
    assert mass[0] == pytest.approx(mass[1]) == pytest.approx(4.0)
    assert metrics["judge/trained_steps_from_successes"] == 0.25


def test_outcome_weights_leave_one_outcome_tasks_alone():
    weights = outcome_weights([("t", True), ("t", False), ("t", False), ("u", False)])
    assert weights == {("t", True): 1.5, ("t", False): 0.75, ("u", False): 1.0}


def test_samples_carry_the_generations_own_logprobs():
    traj = [make_traj("g", 0, 1, True), make_traj("g", 1, 1, False)]
    traj[0].steps[0].response_logprobs = [-0.25]
    traj[1].steps[0].response_logprobs = [-0.5, -0.1]  # not one per token: unknown, recomputed later
    samples, _ = policy_samples(traj, [], step_weight=0.0)
    assert [s.old_logprobs for s in samples] == [[-0.25], None]
    judged = [make_judged("g", 0, 0, [1, -1]), make_judged("g", 1, 0, [1, -1])]
    for step in judged:
        for sample in step.samples:
            sample.response_logprobs = [-0.75]
    judge, _ = judge_samples(traj, judged, 1.0, 0.2, 0.8)
    assert judge and all(s.old_logprobs == [-0.75] for s in judge)
