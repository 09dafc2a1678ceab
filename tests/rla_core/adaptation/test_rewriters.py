"""Rewriters against a small fake environment family: ids, versions, validation, attempts, registry."""
from __future__ import annotations

import random
from typing import Any

import pytest

from rla_core.adaptation.rewriters import (
    LLMRewriter,
    ProceduralRewriter,
    candidate_task,
    first_json_object,
    get_rewriter,
    spec_hash,
)
from rla_core.envs.base import Adjustment, SpecError
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


def parent(size: int = 2, version: int = 0) -> Task:
    return Task(task_id="s0-root", slot_id="s0", env="fake", spec={"size": size}, difficulty=float(size), version=version)


def test_spec_hash_and_candidate_id_are_deterministic():
    # sha256('{"size":3}')[:8], computed once by hand with hashlib
    assert spec_hash({"size": 3}) == "5437a864"
    task = candidate_task(parent(version=4), {"size": 3}, FakeFamily())
    assert (task.task_id, task.slot_id, task.env, task.version, task.difficulty) == ("s0-v5-5437a864", "s0", "fake", 5, 3.0)


def test_procedural_harder():
    family = FakeFamily()
    task, metrics, log = ProceduralRewriter().rewrite(parent(2), "harder", SHELF, 3, random.Random(0), family)
    assert task.spec == {"size": 3} and task.task_id == "s0-v1-5437a864" and task.version == 1
    assert metrics == {"rewrite_attempts": 1.0, "rewrite_ok": 1.0, "rewrite_valid_attempts": 1.0,
                       "rewrite_from_feedback": 1.0, "difficulty_before": 2.0, "difficulty_after": 3.0,
                       "difficulty_delta": 1.0}
    assert [(a.attempt, a.ok, a.reason, a.knob, a.from_feedback) for a in log] == [
        (0, True, "size 2 -> 3", "size", True)]
    assert family.adjust_calls == 1  # stops at the first valid attempt


def test_procedural_gives_up_after_attempts():
    family = FakeFamily()
    task, metrics, log = ProceduralRewriter().rewrite(parent(5), "harder", NO_FEEDBACK, 3, random.Random(0), family)
    assert task is None and metrics["rewrite_ok"] == 0.0 and metrics["rewrite_attempts"] == 3.0
    assert "difficulty_after" not in metrics
    assert [a.ok for a in log] == [False, False, False] and "cannot make size 5 harder" in log[0].error


def test_llm_first_valid_answer_wins_and_prompt_has_context():
    prompts: list[list[str]] = []

    def generate(batch: list[str]) -> list[str]:
        prompts.append(batch)
        return ["no json here", 'Here: {"size": 9}', 'same {"size": 2}', 'ok {"size": 1} done', '{"size": 4}']

    task, metrics, log = LLMRewriter(generate).rewrite(parent(2), "easier", SHELF, 5, random.Random(0), FakeFamily())
    assert len(prompts) == 1 and len(prompts[0]) == 5  # one batched call
    prompt = prompts[0][0]
    assert '{"size": 2}' in prompt and '{"size": integer 1..5}' in prompt
    assert "easier" in prompt and SHELF.render() in prompt  # the critic's own rendering, whole
    assert task.spec == {"size": 1} and task.task_id == "s0-v1-fe36923e" and task.difficulty == 1.0
    assert [a.ok for a in log] == [False, False, False, True]
    assert "no JSON object" in log[0].error and "SpecError" in log[1].error and log[2].error == "unchanged spec"
    assert log[3].raw == 'ok {"size": 1} done'
    assert metrics["rewrite_attempts"] == 4.0 and metrics["difficulty_delta"] == -1.0


def test_llm_all_invalid_and_wrong_answer_count():
    family = FakeFamily()
    task, metrics, log = LLMRewriter(lambda b: ["{}"] * len(b)).rewrite(parent(), "harder", NO_FEEDBACK, 2,
                                                                        random.Random(0), family)
    assert task is None and metrics["rewrite_ok"] == 0.0 and len(log) == 2
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
    with pytest.raises(KeyError, match=r"valid: \['llm', 'procedural'\]"):
        get_rewriter("magic")
    with pytest.raises(ValueError, match="generate"):
        get_rewriter("llm")
    with pytest.raises(ValueError):
        ProceduralRewriter().rewrite(parent(), "harder", NO_FEEDBACK, 0, random.Random(0), FakeFamily())
