"""The text-environment interface and its registry.

An environment family (e.g. `household`) turns a JSON task spec into playable episodes and can
validate, generate, solve and re-difficult its own specs. Rollout, adaptation and bootstrap code talk
to this interface only; variants are looked up by name in `ENVIRONMENTS`.
"""
from __future__ import annotations

import random
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

from rla_core.errors import BadValue, UserError
from rla_core.registry import Registry
from rla_core.schemas import CriticFeedback, Task


class SpecError(UserError, ValueError):
    """A task spec fails structural validation (schema, references, solvability)."""


@dataclass(frozen=True)
class Adjustment:
    """What a procedural rewrite changed: one knob, from → to, and the evidence that chose it."""

    knob: str
    before: Any
    after: Any
    evidence: str | None  # the critic-feedback bucket that chose the knob; None = the fallback order
    reason: str  # one line for logs and the task history

    @property
    def from_feedback(self) -> bool:
        return self.evidence is not None


@dataclass(frozen=True)
class StepOutcome:
    observation: str
    done: bool
    won: bool


@runtime_checkable
class Episode(Protocol):
    """One playable episode of one task. Deterministic given the spec."""

    goal: str  # natural-language goal shown to the policy and the judge

    def reset(self) -> str:
        """Start (or restart) the episode; returns the initial observation."""

    def admissible_commands(self) -> list[str]:
        """Commands valid in the current state, in a stable order."""

    def step(self, command: str) -> StepOutcome:
        """Apply an admissible command (an inadmissible one leaves the state unchanged)."""

    def is_progress(self, command: str) -> bool:
        """Oracle label: does `command` make progress on some shortest plan from the current state?"""

    def oracle_plan(self) -> list[str]:
        """A shortest list of commands that reaches the goal from the current state ([] if won)."""


class EnvironmentFamily(Protocol):
    name: str

    def validate(self, spec: dict[str, Any], horizon: int | None = None) -> dict[str, Any]:
        """Return the normalised spec or raise SpecError (schema, references, solvable by the oracle
        within the spec's own step limit and, when given, within `horizon` turns)."""

    def make(self, spec: dict[str, Any]) -> Episode:
        """A fresh episode for a validated spec."""

    def generate(self, knobs: dict[str, Any], rng: random.Random, horizon: int | None = None) -> dict[str, Any]:
        """A random valid spec at the given difficulty knobs (defaults fill missing knobs)."""

    def difficulty(self, spec: dict[str, Any]) -> float:
        """A scalar difficulty for metrics (e.g. the oracle plan length)."""

    def knobs_of(self, spec: dict[str, Any]) -> dict[str, Any]:
        """The difficulty knobs a spec was generated with."""

    def content_hash(self, spec: dict[str, Any]) -> str:
        """A hash of what is played (not of how the spec was generated): two specs that give the same
        game have the same content hash whatever their seed or knobs fields say."""

    def adjust(
        self, spec: dict[str, Any], direction: str, feedback: CriticFeedback, rng: random.Random,
        horizon: int | None = None,
    ) -> tuple[dict[str, Any], Adjustment]:
        """Procedural rewrite: a new spec one knob harder/easier, the knob chosen from the critic
        feedback; difficulty moves only inside `horizon` turns."""

    def describe_schema(self) -> str:
        """A short text of the spec schema, for LLM rewriters' prompts."""

    def rewrite_context(self, spec: dict[str, Any]) -> str:
        """A compact description of a spec for a small LLM rewriter's prompt: its goal text, its
        difficulty knobs as JSON (the concrete values it has, in the form `spec_from_answer` reads back)
        and its oracle plan length; a few lines, not the whole spec."""

    def spec_from_answer(self, answer: dict[str, Any], horizon: int | None = None) -> dict[str, Any]:
        """The validated spec an LLM rewriter's answer (a decoded JSON object) stands for.

        The answer is either a full spec (validated as by `validate`) or the generator form
        `{"knobs": {...}, "seed": <int>}`, which the family expands with its own generator at those knobs
        and seed (so that the generator form of a generated spec expands back to exactly that spec).
        Untrusted input: anything malformed (wrong types, unknown knobs, out-of-range numbers) raises
        SpecError naming the problem.
        """


def count_evidence(feedback: CriticFeedback, bucket_of: Callable[[str], str | None]
                   ) -> tuple[Counter[str], dict[str, str]]:
    """Rejected-step counts per evidence bucket (`bucket_of(action)`, None = no bucket) in `feedback`,
    and the most rejected action of each bucket: what a procedural rewriter chooses its knob from."""
    counts: Counter[str] = Counter()
    examples: dict[str, str] = {}
    for item in feedback.actions:
        bucket = bucket_of(item.action)
        if bucket:
            counts[bucket] += item.count
            examples.setdefault(bucket, item.action)
    return counts, examples


ENVIRONMENTS: Registry[EnvironmentFamily] = Registry("environment", "environment.name",
                                                   {"household": "rla_core.envs.household",
                                                    "coding": "rla_core.envs.coding.problems",
                                                    "textworld": "rla_core.envs.textworld"})


def register_environment(family: EnvironmentFamily) -> EnvironmentFamily:
    return ENVIRONMENTS.add(family.name, family)


def get_environment(name: str) -> EnvironmentFamily:
    return ENVIRONMENTS.get(name)


def check_task_lines(numbered: list[tuple[int, Task]], family: EnvironmentFamily, horizon: int | None,
                     where: str) -> None:
    """Each (line, task) of a task file is for `family` and has a valid spec at `horizon`; else one
    error `where:LINE: task ID: what is wrong`. A family that builds its games (TextWorld) builds the
    missing ones in parallel first."""
    prepare = getattr(family, "prepare", None)
    if prepare is not None:
        prepare([task.spec for _, task in numbered if task.env == family.name])
    for line, task in numbered:
        if task.env != family.name:
            raise BadValue(f"{where}:{line}: task {task.task_id} is for '{task.env}', not '{family.name}'")
        try:
            family.validate(task.spec, horizon)
        except SpecError as err:
            raise SpecError(f"{where}:{line}: task {task.task_id}: {err}") from None
