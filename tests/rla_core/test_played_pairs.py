"""Judge warm-start labels on a policy's own steps (`rla_core.bootstrap.played_pairs`), fed by the real
producer (the rollout runner `play`, which labels every step with the oracle) and checked against the real
consumer's input (the judge stage, `judge_trajectories`, reads exactly these prompts). Only the policy
*model* is scripted: what it answers is fixed, how the answer is parsed, played and labelled is not."""
from __future__ import annotations

import random

from rla_core.bootstrap import played_pairs
from rla_core.envs.household import HOUSEHOLD
from rla_core.judge.judge import judge_trajectories, parse_verdict
from rla_core.rollout.base import Generation, SamplingParams
from rla_core.rollout.runner import play
from rla_core.schemas import Task

HORIZON, KEEP = 6, 2


class ScriptedModel:
    """Answers the k-th call of a turn from a fixed cycle: the first command, an unparsable answer, the
    last command; as a judge it always says +1."""

    def __init__(self, answers):
        self.answers, self.calls = answers, 0

    def generate(self, prompts, params, progress=None):
        out = []
        for _ in prompts:
            for _ in range(params.n):
                out.append(Generation(token_ids=[7], text=self.answers[self.calls % len(self.answers)]))
                self.calls += 1
        return out

    def load_weights(self, model):
        pass


class RecordingTokenizer:
    def __init__(self):
        self.texts = []

    def __call__(self, texts):
        self.texts += list(texts)
        return {"input_ids": [[1, 2, 3] for _ in texts]}


def task(seed: int) -> Task:
    spec = HOUSEHOLD.validate(HOUSEHOLD.generate({"goal_type": "put", "distractors": 2, "closed": 1},
                                                 random.Random(seed)), HORIZON)
    return Task(task_id=f"t{seed}", slot_id=f"t{seed}", spec=spec)


def test_played_steps_become_the_judge_stages_own_prompts_with_the_oracle_label():
    policy = ScriptedModel(["I go \\boxed{1}", "no idea", "\\boxed{99}", "\\boxed{2}"])
    trajectories, _ = play(policy, RecordingTokenizer(), HOUSEHOLD, [(task(s), 0) for s in range(3)],
                           SamplingParams(8, 1.0, 0), HORIZON, KEEP)
    steps = [s for t in trajectories for s in t.steps]
    assert len(steps) >= 6 and any(s.action is None for s in steps)  # unparsable answers were played too
    pairs = played_pairs(trajectories, KEEP)
    assert len(pairs) == len(steps)  # every step the runner labelled
    # the label is the oracle's: good only for a progress step, an unparsable answer is a bad step
    assert [parse_verdict(target) for _, target in pairs] == [1 if s.oracle_good else -1 for s in steps]
    assert all(parse_verdict(target) == -1 for (_, target), s in zip(pairs, steps) if s.action is None)
    assert {parse_verdict(target) for _, target in pairs} == {1, -1}
    # the prompts are what the judge stage reads for the same steps, in the same order
    reader = RecordingTokenizer()
    judge_trajectories(ScriptedModel(["\\boxed{1}"]), reader, trajectories, 1, SamplingParams(8), KEEP)
    assert [prompt for prompt, _ in pairs] == reader.texts
    # and each prompt shows the policy's own answer text of its step
    assert all(s.response_text in prompt for (prompt, _), s in zip(pairs, steps))


def test_unlabelled_steps_are_skipped():
    policy = ScriptedModel(["\\boxed{1}"])
    trajectories, _ = play(policy, RecordingTokenizer(), HOUSEHOLD, [(task(5), 0)], SamplingParams(8, 1.0, 0),
                           HORIZON, KEEP, label_steps=False)
    assert trajectories[0].steps and played_pairs(trajectories, KEEP) == []
