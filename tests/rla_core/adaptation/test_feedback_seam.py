"""The critic → rewriter seam with the real parts: household episodes played to the end, verdicts parsed
by the real judge code from a scripted judge's text, the real critic, the real adaptation cycle and the
real procedural rewriter. (A fake judge *model* only: what it says is fixed, how it is read is not.)"""
from __future__ import annotations

import random

from rla_core.adaptation.critic import critic_feedback
from rla_core.adaptation.cycle import adapt
from rla_core.adaptation.rewriters import ProceduralRewriter
from rla_core.adaptation.store import TaskStore
from rla_core.envs.household import HOUSEHOLD
from rla_core.judge.benchmark import scripted_trajectory
from rla_core.judge.judge import judge_trajectories
from rla_core.rollout.base import Generation, SamplingParams
from rla_core.schemas import Task

HORIZON = 12


class ScriptedJudge:
    """A judge 'model' that rejects every step with one rationale (the real parser reads it)."""

    def generate(self, prompts, params, progress=None):
        return [Generation(token_ids=[5], text=" it only wanders around \\boxed{-1}") for _ in prompts for _ in range(params.n)]

    def load_weights(self, model):
        pass


def tokenize(texts):
    return {"input_ids": [[1, 2, 3] for _ in texts]}


def wanderer(episode, commands):
    """Always walks to the first place it can go to: never takes anything, never wins."""
    return next(i for i, c in enumerate(commands, start=1) if c.startswith("go to"))


def seed_task(seed: int) -> Task:
    spec = HOUSEHOLD.validate(HOUSEHOLD.generate({"goal_type": "put", "distractors": 2, "closed": 0},
                                                 random.Random(seed)), HORIZON)
    return Task(task_id=f"s{seed}-v0", slot_id=f"s{seed}", spec=spec, difficulty=HOUSEHOLD.difficulty(spec))


def played(task: Task, runs: int = 4):
    return [scripted_trajectory(HOUSEHOLD, task, wanderer, HORIZON).model_copy(update={"sample_index": j})
            for j in range(runs)]


def test_real_critic_output_chooses_the_real_rewriters_knob():
    task = seed_task(1)
    trajectories = played(task)
    assert not any(t.success for t in trajectories) and all(len(t.steps) == HORIZON for t in trajectories)
    judged, _ = judge_trajectories(ScriptedJudge(), tokenize, trajectories, 2, SamplingParams(8), history_turns=3)
    feedback = critic_feedback(trajectories, judged)
    assert feedback.actions and all(a.action.startswith("go to") for a in feedback.actions)
    assert feedback.actions[0].rationale == "it only wanders around"

    def rewrite(t, direction, fb, rng):
        return ProceduralRewriter().rewrite(t, direction, fb, 3, rng, HOUSEHOLD, horizon=HORIZON)

    store, report, metrics = adapt(TaskStore.from_seed([task]), trajectories, judged, 1, 0.2, 0.8, rewrite,
                                   "procedural", random.Random(0))
    [proposal] = report.proposals
    # all runs failed: easier; every rejected step was navigation; rooms is at its bound (1), so the
    # navigation bucket's second knob, distractors, is turned: 2 -> 0
    assert (proposal.direction, proposal.knob, proposal.from_feedback) == ("easier", "distractors", True)
    assert metrics["knob_from_feedback_rate"] == 1.0
    pending = store.slot(task.slot_id).pending
    assert pending.feedback == feedback  # the record the critic wrote is what the rewriter read
    assert pending.task.spec["knobs"]["distractors"] == 0
    assert "navigation" in pending.reason and "go to" in pending.reason
    assert HOUSEHOLD.difficulty(pending.task.spec) <= task.difficulty  # not harder in plan length
