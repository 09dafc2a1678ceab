"""The `household` environment family: validate, make, generate, difficulty, knobs, adjust, schema,
and for LLM rewriters a compact rewrite context and the expansion of their answers."""
from __future__ import annotations

import functools
import hashlib
import json
import random
from typing import Any

from rla_core.envs.base import Adjustment, SpecError
from rla_core.envs.household import generator, rewriter
from rla_core.envs.household.episode import HouseholdEpisode
from rla_core.envs.household.oracle import INF, Oracle
from rla_core.envs.household.spec import HouseholdSpec, derive_knobs, parse_knobs, parse_spec
from rla_core.envs.household.world import Layout
from rla_core.schemas import CriticFeedback


def initial_plan(spec: HouseholdSpec) -> list[str]:
    """A shortest plan from the start of a parsed spec; SpecError if the goal is unreachable."""
    layout = Layout(spec)
    start = layout.initial_state()
    if layout.is_won(start):
        raise SpecError("the goal is already satisfied at the start")
    oracle = Oracle(layout)
    if oracle.distance(start) == INF:
        raise SpecError(f"the goal '{layout.goal_text()}' cannot be reached from the start")
    return oracle.plan(start)


GENERATOR_KEYS = frozenset({"knobs", "seed"})  # the generator form of an answer: {"knobs": {...}, "seed": int}
SEED_BOUND = 2**63  # seeds of the generator form lie in [0, SEED_BOUND); generated ones are < 2**31


def _answer_seed(value: Any) -> int:
    """The seed of a generator-form answer; SpecError unless a plain int in [0, SEED_BOUND)."""
    if not isinstance(value, int) or isinstance(value, bool):
        raise SpecError(f"seed must be an integer, got {type(value).__name__} {str(value)[:40]!r}")
    if not 0 <= value < SEED_BOUND:
        raise SpecError(f"seed must be in [0, 2**63), got {str(value)[:40]}")
    return value


@functools.lru_cache(maxsize=64)
def _compiled(spec_json: str) -> tuple[Layout, Oracle]:
    """Layout and oracle per distinct spec, so the N episodes of one task share the distance cache."""
    layout = Layout(parse_spec(json.loads(spec_json)))
    return layout, Oracle(layout)


class HouseholdFamily:
    """ALFWorld-like procedural household text game (see the package docstring)."""

    name = "household"

    def validate(self, spec: dict[str, Any], horizon: int | None = None) -> dict[str, Any]:
        """Normalised spec (defaults and knobs filled) or SpecError: schema, references, goal, and
        solvability within min(step_limit, horizon) turns."""
        parsed = parse_spec(spec)
        plan = initial_plan(parsed)
        if len(plan) > parsed.step_limit:
            raise SpecError(
                f"not solvable within step_limit={parsed.step_limit}: the shortest plan has {len(plan)} steps"
            )
        if horizon is not None and len(plan) > horizon:
            raise SpecError(f"not solvable within the episode horizon of {horizon} turns: "
                            f"the shortest plan has {len(plan)} steps")
        return parsed.model_dump()

    def make(self, spec: dict[str, Any]) -> HouseholdEpisode:
        """A fresh episode (schema and references are re-checked; solvability is not)."""
        layout, oracle = _compiled(json.dumps(spec, sort_keys=True))
        return HouseholdEpisode(layout, oracle)

    def clear_cache(self) -> None:
        """Forget the compiled layouts and oracle caches that `make` shares between episodes."""
        _compiled.cache_clear()

    def generate(self, knobs: dict[str, Any], rng: random.Random, horizon: int | None = None) -> dict[str, Any]:
        return generator.generate(knobs, rng, functools.partial(self.validate, horizon=horizon))

    def generate_from_seed(self, knobs: dict[str, Any], seed: int, horizon: int | None = None) -> dict[str, Any]:
        """Regenerate exactly: generate_from_seed(spec['knobs'], spec['seed']) == spec."""
        return generator.generate_from_seed(knobs, seed, functools.partial(self.validate, horizon=horizon))

    def difficulty(self, spec: dict[str, Any]) -> float:
        """The oracle's shortest-plan length from the start (number of commands)."""
        return float(len(initial_plan(parse_spec(spec))))

    def knobs_of(self, spec: dict[str, Any]) -> dict[str, Any]:
        """The knobs the spec was generated with (derived from the layout when it has none)."""
        return parse_spec(spec).knobs.model_dump()

    def content_hash(self, spec: dict[str, Any]) -> str:
        """sha256[:16] of the playable part (rooms, start room, objects, goal, step limit): not knobs/seed."""
        played = parse_spec(spec).model_dump(exclude={"knobs", "seed"})
        canonical = json.dumps(played, sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(canonical.encode("utf-8")).hexdigest()[:16]

    def adjust(
        self, spec: dict[str, Any], direction: str, feedback: CriticFeedback, rng: random.Random,
        horizon: int | None = None,
    ) -> tuple[dict[str, Any], Adjustment]:
        """A freshly generated spec one knob harder/easier, the knob chosen from the critic feedback."""
        return rewriter.adjust(self, spec, direction, feedback, rng, horizon)

    def describe_schema(self) -> str:
        return rewriter.SCHEMA_TEXT

    def rewrite_context(self, spec: dict[str, Any]) -> str:
        """Three lines: the goal text, the layout's own knobs as JSON (concrete goal type, as `adjust`
        reads them) and the oracle's shortest-plan length."""
        parsed = parse_spec(spec)
        knobs = derive_knobs(parsed).model_dump()
        return (f"Goal: {Layout(parsed).goal_text()}\nKnobs: {json.dumps(knobs)}\n"
                f"Oracle plan: {len(initial_plan(parsed))} steps.")

    def spec_from_answer(self, answer: dict[str, Any], horizon: int | None = None) -> dict[str, Any]:
        """A full spec is validated; the generator form {"knobs", "seed"} is expanded by
        `generate_from_seed` (knobs checked strictly: no "3" for 3). SpecError on anything malformed."""
        if not isinstance(answer, dict):
            raise SpecError(f"an answer must be a JSON object, got {type(answer).__name__}")
        if not answer or not set(answer) <= GENERATOR_KEYS:
            return self.validate(answer, horizon)
        if "knobs" not in answer or "seed" not in answer:
            raise SpecError(f"the generator form needs both 'knobs' and 'seed', got {sorted(answer)}")
        if not isinstance(answer["knobs"], dict):
            raise SpecError(f"knobs must be a JSON object, got {type(answer['knobs']).__name__}")
        knobs, seed = parse_knobs(answer["knobs"], strict=True), _answer_seed(answer["seed"])
        return self.generate_from_seed(knobs.model_dump(), seed, horizon)


HOUSEHOLD = HouseholdFamily()
