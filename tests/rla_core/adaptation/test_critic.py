"""Critic feedback: steps of failed runs that every judge sample rejected, as a typed record with a
deterministic prose rendering."""
from __future__ import annotations

import pytest

from rla_core.adaptation.critic import critic_feedback, judge_rationale
from rla_core.schemas import CriticFeedback, JudgedStep, JudgeSample, RejectedAction, Step, Trajectory


def traj(j: int, actions: list[str | None], success: bool, task_id: str = "t") -> Trajectory:
    steps = [
        Step(index=i, prompt_ids=[1], response_ids=[2], response_text="", action=a, observation="")
        for i, a in enumerate(actions)
    ]
    return Trajectory(
        task_id=task_id, slot_id="s", sample_index=j, goal="g", initial_observation="", steps=steps, success=success
    )


def judged(j: int, i: int, verdicts_texts: list[tuple[int, str]], task_id: str = "t") -> JudgedStep:
    samples = [JudgeSample(prompt_ids=[1], response_ids=[2], text=t, verdict=v) for v, t in verdicts_texts]
    return JudgedStep(task_id=task_id, sample_index=j, step_index=i, samples=samples)


NO = "\\boxed{-1}"
TRAJECTORIES = [
    traj(0, ["go to shelf 1"], True),  # a success: never reported
    traj(1, ["go to shelf 1", "take mug", None], False),
    traj(2, ["go to shelf 1", "open drawer 2"], False),
]
JUDGED = [
    judged(0, 0, [(-1, "Pointless. " + NO), (-1, NO)]),
    judged(1, 0, [(-1, "The shelf is empty. " + NO), (-1, "Shelf is   empty\nagain " + NO)]),
    judged(1, 1, [(-1, "Bad. " + NO), (1, "Fine. \\boxed{1}")]),  # not unanimous
    judged(1, 2, [(-1, "No command chosen. " + NO), (-1, "No command chosen. " + NO)]),
    judged(2, 0, [(-1, "The shelf is empty. " + NO), (-1, "Wrong place. " + NO)]),
    judged(2, 1, [(-1, "Bad. " + NO), (0, "unsure")]),  # an unparseable verdict is not a rejection
    judged(1, 1, [(-1, "Other task. " + NO)], task_id="u"),  # another task: ignored
]

EXPECTED = (
    "Failed trajectories: 2 of 3. Steps rejected by every judge sample: 3 (2 distinct actions).\n"
    '- "go to shelf 1" rejected 2x in 2 failed runs; judge: "The shelf is empty."\n'
    '- "<no valid action>" rejected 1x in 1 failed run; judge: "No command chosen."'
)


def test_feedback_hand_written():
    feedback = critic_feedback(TRAJECTORIES, JUDGED)
    assert feedback == CriticFeedback(
        trajectories=3, failed=2, rejected_steps=3,
        actions=[RejectedAction(action="go to shelf 1", count=2, runs=2, rationale="The shelf is empty."),
                 RejectedAction(action="<no valid action>", count=1, runs=1, rationale="No command chosen.")],
    )
    assert feedback.render() == EXPECTED


def test_feedback_is_deterministic_under_reordering():
    assert critic_feedback(list(reversed(TRAJECTORIES)), list(reversed(JUDGED))).render() == EXPECTED


def test_no_failures_and_no_rejections():
    assert critic_feedback([traj(0, ["a"], True)], []).render() == "No failed trajectories."
    feedback = critic_feedback([traj(0, ["a"], True), traj(1, ["b"], False)], [judged(1, 0, [(1, "ok \\boxed{1}")])])
    assert (feedback.failed, feedback.actions) == (1, [])
    assert feedback.render() == "Failed trajectories: 1 of 2. No step was rejected by every judge sample."


def test_caps_lines_and_length():
    actions = [f"action {k}" for k in range(10)]
    steps = [judged(0, i, [(-1, f"reason {i} " + NO)]) for i in range(10)]
    feedback = critic_feedback([traj(0, actions, False)], steps, max_lines=8)
    assert len(feedback.actions) == 8 and feedback.omitted == 2 and feedback.rejected_steps == 10
    lines = feedback.render().splitlines()
    assert len(lines) == 10  # header + 8 + "more" line
    assert lines[0].endswith("Steps rejected by every judge sample: 10 (10 distinct actions).")
    assert lines[1] == '- "action 0" rejected 1x in 1 failed run; judge: "reason 0"'  # ties: first occurrence
    assert lines[-1] == "(2 more rejected actions not shown)"
    short = feedback.render(max_chars=50)
    assert len(short) <= 50 and short.endswith("...")


def test_feedback_round_trips_through_json():
    feedback = critic_feedback(TRAJECTORIES, JUDGED)
    assert CriticFeedback.model_validate_json(feedback.model_dump_json()) == feedback


def test_rationale_and_task_check():
    assert judge_rationale("  It  moved\naway. \\boxed{-1} trailing") == "It moved away."
    assert judge_rationale("x" * 200, max_chars=10) == "xxxxxxx..."
    with pytest.raises(ValueError, match="one task"):
        critic_feedback([traj(0, ["a"], False), traj(1, ["a"], False, task_id="u")], [])
