"""The environment model's warm-start (rla_core/bootstrap.py `rewrite_pairs`) with the real parts: household
episodes played by scripted policies, judged steps carrying oracle verdicts, the real critic, the real
procedural rewriter, the compact prompt, and a tiny model that learns to answer in the generator form."""
from __future__ import annotations

import json
import random
from dataclasses import dataclass

import torch

from rla_core.adaptation.critic import critic_feedback
from rla_core.adaptation.rewriters import COMPACT_FEEDBACK_CHARS, build_rewrite_prompt, first_json_object
from rla_core.bootstrap import oracle_walk, rewrite_pairs, walk_feedback
from rla_core.config import ModelSpec
from rla_core.envs.base import SpecError
from rla_core.envs.household import HOUSEHOLD
from rla_core.judge.benchmark import oracle_chooser, random_chooser, scripted_trajectory
from rla_core.judge.judge import judge_answer
from rla_core.models.factory import build_model
from rla_core.models.tokenizer import train_tokenizer
from rla_core.rollout.base import SamplingParams
from rla_core.rollout.hf_engine import TransformersEngine
from rla_core.schemas import CriticFeedback, JudgedStep, JudgeSample, Task, Trajectory
from rla_core.training.sft import supervised_finetune

HORIZON = 12
KNOBS = {"goal_type": ["put", "examine"], "closed": 0, "distractors": 1}


@dataclass(frozen=True)
class Pair:
    prompt_ids: list[int]
    response_ids: list[int]


def make_task(seed: int) -> Task:
    spec = HOUSEHOLD.validate(HOUSEHOLD.generate(KNOBS, random.Random(seed), HORIZON), HORIZON)
    return Task(task_id=f"t{seed}-v0", slot_id=f"t{seed}", spec=spec, difficulty=HOUSEHOLD.difficulty(spec))


def played(task: Task, rng: random.Random) -> list[Trajectory]:
    """Two runs of a noisy oracle and two of a random policy (which fail on most tasks)."""
    choosers = [oracle_chooser(0.3, rng), oracle_chooser(0.3, rng), random_chooser(rng), random_chooser(rng)]
    return [scripted_trajectory(HOUSEHOLD, task, choose, HORIZON).model_copy(update={"sample_index": j})
            for j, choose in enumerate(choosers)]


def oracle_judged(trajectories: list[Trajectory], m: int = 2) -> list[JudgedStep]:
    """m judge samples per step whose text is the warm-start judge's target for the oracle label."""
    judged = []
    for t in trajectories:
        for step in t.steps:
            text = judge_answer(bool(step.oracle_good))
            samples = [JudgeSample(prompt_ids=[1], response_ids=[2], text=text, verdict=1 if step.oracle_good else -1)
                       for _ in range(m)]
            judged.append(JudgedStep(task_id=t.task_id, sample_index=t.sample_index, step_index=step.index,
                                     samples=samples, oracle_good=step.oracle_good))
    return judged


def real_feedback(task: Task, rng: random.Random) -> CriticFeedback:
    trajectories = played(task, rng)
    return critic_feedback(trajectories, oracle_judged(trajectories))


def test_seam_real_critic_through_the_procedural_rewriter_into_warm_start_pairs():
    rng = random.Random(0)
    items = [(task, real_feedback(task, rng)) for task in map(make_task, range(3))]
    assert all(fb.failed and fb.actions for _, fb in items)  # real rejected actions reach the prompt
    pairs = rewrite_pairs(HOUSEHOLD, items, 2, random.Random(7), HORIZON)
    replay = random.Random(7)  # the same stream: what the procedural rewriter makes, in the same order
    expected = []
    for task, feedback in items:
        for direction in ("harder", "easier"):
            for _ in range(2):
                try:
                    expected.append((task, direction, feedback,
                                     HOUSEHOLD.adjust(task.spec, direction, feedback, replay, HORIZON)[0]))
                except SpecError:
                    pass
    assert len(pairs) == len(expected) >= 10
    for (prompt, answer), (task, direction, feedback, spec) in zip(pairs, expected):
        assert prompt == build_rewrite_prompt(task, direction, feedback, HOUSEHOLD, "compact")
        assert feedback.render(max_chars=COMPACT_FEEDBACK_CHARS) in prompt and f"Make it {direction}." in prompt
        assert f'"{feedback.actions[0].action}" rejected' in prompt
        assert HOUSEHOLD.spec_from_answer(json.loads(answer), HORIZON) == spec
        assert spec["seed"] == json.loads(answer)["seed"] and spec != task.spec


def valid_rate(engine: TransformersEngine, tokenizer, prompts: list[str]) -> float:
    """Share of greedy answers that parse and expand to a valid spec."""
    ids = tokenizer(prompts, add_special_tokens=False)["input_ids"]
    valid = 0
    for generation in engine.generate(ids, SamplingParams(48, temperature=0.0)):
        try:
            HOUSEHOLD.spec_from_answer(first_json_object(generation.text), HORIZON)
            valid += 1
        except (ValueError, TypeError, KeyError, RecursionError):
            pass
    return valid / len(prompts)


def test_warm_start_teaches_a_tiny_environment_model_the_answer_form():
    rng = random.Random(1)
    tasks = [make_task(seed) for seed in range(100, 148)]
    # Walk feedback here (oracle labels of one noisy walk): the seam test above covers the critic path.
    items = [(task, walk_feedback(oracle_walk(HOUSEHOLD, task, 0.5, rng))) for task in tasks]
    train = rewrite_pairs(HOUSEHOLD, items[:40], 2, rng, HORIZON)
    held_out = rewrite_pairs(HOUSEHOLD, items[40:], 1, rng, HORIZON)  # other tasks
    tokenizer = train_tokenizer([p + a for p, a in train], 600)
    spec = ModelSpec(hidden_size=64, num_layers=2, num_heads=4, intermediate_size=128, max_positions=512)
    model = build_model(spec, tokenizer, seed=0)
    engine, prompts = TransformersEngine(model, tokenizer, batch_size=16), [p for p, _ in held_out]
    before = valid_rate(engine, tokenizer, prompts)
    encoded = [Pair(tokenizer(p, add_special_tokens=False)["input_ids"],
                            tokenizer(a, add_special_tokens=False)["input_ids"] + [tokenizer.eos_token_id])
               for p, a in train]
    torch.manual_seed(0)
    metrics = supervised_finetune(model, encoded, steps=150, batch_size=16, lr=3e-3, seed=0, progress=False)
    after = valid_rate(engine, tokenizer, prompts)
    assert metrics["loss_last"] < metrics["loss_first"] / 3
    assert before == 0.0 and after >= 0.75, (before, after, metrics)
