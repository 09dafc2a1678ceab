"""Rewriters against a small fake environment family: ids, versions, validation, attempts, registry."""
from __future__ import annotations

import json
import random
from typing import Any

import pytest

from rla_core.adaptation.rewriters import (
    COMPACT_FEEDBACK_CHARS,
    LLMRewriter,
    ProceduralRewriter,
    build_rewrite_prompt,
    candidate_task,
    first_json_object,
    get_rewriter,
    spec_hash,
)
from rla_core.envs.base import Adjustment, SpecError
from rla_core.envs.household import HOUSEHOLD
from rla_core.schemas import CriticFeedback, RejectedAction, Task

NO_FEEDBACK = CriticFeedback()
SHELF = CriticFeedback(trajectories=4, failed=3, rejected_steps=3,
                       actions=[RejectedAction(action="go to shelf 1", count=3, runs=3, rationale="went to shelf 3x")])


class FakeFamily:
    """Specs are {"size": 1..5}; harder = size + 1; difficulty = size."""

    name = "fake"

    def __init__(self) -> None:
        self.adjust_calls = 0

    def validate(self, spec: dict[str, Any], horizon: int | None = None) -> dict[str, Any]:
        size = spec.get("size")
        if set(spec) != {"size"} or not isinstance(size, int) or not 1 <= size <= 5:
            raise SpecError(f"bad spec {spec}")
        return {"size": size}

    def adjust(self, spec: dict[str, Any], direction: str, feedback: CriticFeedback, rng: random.Random,
               horizon: int | None = None):
        self.adjust_calls += 1
        size = spec["size"] + (1 if direction == "harder" else -1)
        if not 1 <= size <= 5:
            raise SpecError(f"cannot make size {spec['size']} {direction}")
        evidence = "rejected" if feedback.actions else None
        return {"size": size}, Adjustment("size", spec["size"], size, evidence, f"size {spec['size']} -> {size}")

    def difficulty(self, spec: dict[str, Any]) -> float:
        return float(spec["size"])

    def describe_schema(self) -> str:
        return '{"size": integer 1..5}'

    def rewrite_context(self, spec: dict[str, Any]) -> str:
        return f"Size: {spec['size']}"

    def spec_from_answer(self, answer: dict[str, Any], horizon: int | None = None) -> dict[str, Any]:
        """A spec, or the generator form {"knobs": {"size": n}, "seed": s} (the seed is ignored)."""
        if set(answer) == {"knobs", "seed"}:
            return self.validate(answer["knobs"], horizon)
        return self.validate(answer, horizon)


def parent(size: int = 2, version: int = 0) -> Task:
    return Task(task_id="s0-root", slot_id="s0", env="fake", spec={"size": size}, difficulty=float(size), version=version)


def test_spec_hash_and_candidate_id_are_deterministic():
    # sha256('{"size":3}')[:8], computed once by hand with hashlib
    assert spec_hash({"size": 3}) == "5437a864"
    task = candidate_task(parent(version=4), {"size": 3}, FakeFamily())
    assert (task.task_id, task.slot_id, task.env, task.version, task.difficulty) == ("s0-v5-5437a864", "s0", "fake", 5, 3.0)


def test_procedural_harder():
    family = FakeFamily()
    before = parent(2)
    task, log = ProceduralRewriter().rewrite(before, "harder", SHELF, 3, random.Random(0), family)
    assert task.spec == {"size": 3} and task.task_id == "s0-v1-5437a864" and task.version == 1
    assert (len(log), sum(a.ok for a in log), log[-1].from_feedback) == (1, 1, True)
    assert (before.difficulty, task.difficulty, task.difficulty - before.difficulty) == (2.0, 3.0, 1.0)
    assert [(a.attempt, a.ok, a.reason, a.knob, a.from_feedback) for a in log] == [
        (0, True, "size 2 -> 3", "size", True)]
    assert family.adjust_calls == 1  # stops at the first valid attempt


def test_procedural_gives_up_after_attempts():
    family = FakeFamily()
    task, log = ProceduralRewriter().rewrite(parent(5), "harder", NO_FEEDBACK, 3, random.Random(0), family)
    assert task is None and len(log) == 3  # no candidate: no difficulty after
    assert [a.ok for a in log] == [False, False, False] and "cannot make size 5 harder" in log[0].error


def test_llm_first_valid_answer_wins_and_prompt_has_context():
    prompts: list[list[str]] = []

    def generate(batch: list[str]) -> list[str]:
        prompts.append(batch)
        return ["no json here", 'Here: {"size": 9}', 'same {"size": 2}', 'ok {"size": 1} done', '{"size": 4}']

    rewriter = LLMRewriter(generate, prompt_mode="full")
    before = parent(2)
    task, log = rewriter.rewrite(before, "easier", SHELF, 5, random.Random(0), FakeFamily())
    assert len(prompts) == 1 and len(prompts[0]) == 5  # one batched call
    prompt = prompts[0][0]
    assert '{"size": 2}' in prompt and '{"size": integer 1..5}' in prompt
    assert "easier" in prompt and SHELF.render() in prompt  # the critic's own rendering, whole
    assert task.spec == {"size": 1} and task.task_id == "s0-v1-fe36923e" and task.difficulty == 1.0
    assert [a.ok for a in log] == [False, False, False, True]
    assert "no JSON object" in log[0].error and "SpecError" in log[1].error and log[2].error == "unchanged spec"
    assert log[3].raw == 'ok {"size": 1} done'
    assert len(log) == 4 and task.difficulty - before.difficulty == -1.0


def test_llm_compact_prompt_and_generator_form_answer():
    prompts: list[str] = []

    def generate(batch: list[str]) -> list[str]:
        prompts.extend(batch)
        return ['{"knobs": {"size": "3"}, "seed": 1}', ' {"knobs": {"size": 3}, "seed": 7} trailing']

    task, log = LLMRewriter(generate).rewrite(parent(2), "harder", SHELF, 2, random.Random(0), FakeFamily())
    assert prompts[0] == build_rewrite_prompt(parent(2), "harder", SHELF, FakeFamily(), "compact")
    assert "Size: 2" in prompts[0] and "integer 1..5" not in prompts[0]  # the context, not the schema
    assert prompts[0].rstrip().endswith("Answer:") and "Make it harder." in prompts[0]
    assert SHELF.render(max_chars=COMPACT_FEEDBACK_CHARS) in prompts[0]
    assert task.spec == {"size": 3} and [a.ok for a in log] == [False, True] and "SpecError" in log[0].error
    with pytest.raises(ValueError, match="prompt mode"):
        build_rewrite_prompt(parent(2), "harder", SHELF, FakeFamily(), "tiny")  # type: ignore[arg-type]


def test_compact_feedback_is_capped():
    many = CriticFeedback(trajectories=8, failed=8, rejected_steps=80, actions=[
        RejectedAction(action=f"go to shelf {k}", count=9, runs=8, rationale="x" * 150) for k in range(8)])
    prompt = build_rewrite_prompt(parent(2), "easier", many, FakeFamily(), "compact")
    assert len(many.render()) > COMPACT_FEEDBACK_CHARS
    assert many.render(max_chars=COMPACT_FEEDBACK_CHARS) in prompt and many.render() not in prompt
    assert len(prompt) < COMPACT_FEEDBACK_CHARS + 200


def test_llm_all_invalid_and_wrong_answer_count():
    family = FakeFamily()
    task, log = LLMRewriter(lambda b: ["{}"] * len(b)).rewrite(parent(), "harder", NO_FEEDBACK, 2,
                                                               random.Random(0), family)
    assert task is None and len(log) == 2
    with pytest.raises(ValueError, match="answers"):
        LLMRewriter(lambda b: ["{}"]).rewrite(parent(), "harder", NO_FEEDBACK, 2, random.Random(0), family)


def test_first_json_object():
    assert first_json_object('x {bad} then {"a": {"b": 1}} and {"c": 2}') == {"a": {"b": 1}}
    assert first_json_object('[1, 2] {"k": [1]}') == {"k": [1]}
    with pytest.raises(ValueError):
        first_json_object("[1, 2] {not json")


def test_registry():
    assert isinstance(get_rewriter("procedural"), ProceduralRewriter)
    assert isinstance(get_rewriter("llm", generate=lambda b: b), LLMRewriter)
    assert get_rewriter("llm", generate=lambda b: b).prompt_mode == "compact"
    assert get_rewriter("llm", generate=lambda b: b, prompt_mode="full").prompt_mode == "full"
    with pytest.raises(KeyError, match=r"valid: \['llm', 'procedural'\]"):
        get_rewriter("magic")
    with pytest.raises(ValueError, match="generate"):
        get_rewriter("llm")
    with pytest.raises(ValueError):
        ProceduralRewriter().rewrite(parent(), "harder", NO_FEEDBACK, 0, random.Random(0), FakeFamily())


# ---------------------------------------------------------------- the llm rewriter on the real household family
def household_task(seed: int = 3) -> Task:
    knobs = {"goal_type": ["put", "examine"], "closed": 0, "distractors": 1}
    spec = HOUSEHOLD.generate(knobs, random.Random(seed), 12)
    return Task(task_id="h-v0", slot_id="h", env="household", spec=spec, difficulty=HOUSEHOLD.difficulty(spec))


def test_compact_prompt_holds_goal_knobs_plan_direction_feedback_and_the_answer_form():
    task = household_task()
    prompt = build_rewrite_prompt(task, "easier", SHELF, HOUSEHOLD, "compact")
    knobs = {**task.spec["knobs"], "goal_type": task.spec["goal"]["type"]}
    assert HOUSEHOLD.make(task.spec).goal in prompt
    assert f"Knobs: {json.dumps(knobs)}" in prompt
    assert f"Oracle plan: {int(task.difficulty)} steps." in prompt
    assert "Make it easier." in prompt and SHELF.render() in prompt  # short feedback: whole
    assert '{"knobs": {...}, "seed": <integer>}' in prompt and prompt.endswith("Answer:")
    assert '"rooms": [' not in prompt and "Schema" not in prompt  # no spec JSON, no schema
    full = build_rewrite_prompt(task, "easier", SHELF, HOUSEHOLD, "full")
    assert HOUSEHOLD.describe_schema() in full and json.dumps(task.spec, sort_keys=True) in full


MALFORMED = [
    "no json at all",
    '{"knobs": {"rooms": 2}, "seed": "12"}',  # seed as a string
    '{"knobs": {"rooms": "2"}, "seed": 12}',  # knob as a string
    '{"knobs": {"windows": 2}, "seed": 12}',  # unknown knob
    '{"knobs": [2], "seed": 12}',  # wrong type
    '{"knobs": {"rooms": 2}, "seed": ' + "9" * 5000 + "}",  # past int's digit limit: json refuses it
    '{"knobs": {"rooms": 2}, "seed": ' + "9" * 300 + "}",  # a gigantic seed
    '{"knobs": {"rooms": 2}, "seed": 1e999}',  # infinity
    '{"knobs": {"rooms": 99999999999999999999999}, "seed": 1}',
    '{"knobs": {"rooms": 2}, "seed": 1' + "[" * 100_000,  # never closes
    '{"a": ' + "[" * 100_000 + "]" * 100_000 + "}",  # nested past the decoder's recursion limit
    '{"rooms": "kitchen"}',  # a broken full spec
    "{}",
]


def test_malformed_answers_are_failed_attempts_never_exceptions():
    task = household_task()
    answers = MALFORMED + ['{"knobs": {"rooms": 2, "distractors": 1, "closed": 0, "goal_type": "put", '
                           '"step_limit": 12}, "seed": 5}']
    rewriter = LLMRewriter(lambda batch: answers[: len(batch)])
    candidate, log = rewriter.rewrite(task, "harder", SHELF, len(answers), random.Random(0), HOUSEHOLD, 12)
    assert [a.ok for a in log] == [False] * len(MALFORMED) + [True]
    assert all(a.error for a in log[:-1]), [a.error for a in log]
    assert "no JSON object" in log[0].error and "seed must be an integer" in log[1].error
    assert "seed must be in" in log[6].error and "knobs.windows" in log[3].error
    assert len(log[5].raw) <= rewriter.max_raw_chars
    assert candidate.spec == HOUSEHOLD.generate_from_seed(json.loads(answers[-1])["knobs"], 5, 12)
    assert sum(a.ok for a in log) == 1
