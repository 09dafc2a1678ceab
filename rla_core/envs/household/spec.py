"""The household task spec: a pydantic schema, difficulty knobs and structural checks.

A spec is fully explicit JSON: rooms with their receptacles (and which start closed), objects with
their starting receptacle and state, the start room, the goal, the step limit, and the knobs + seed
it was generated from. `parse_spec` checks schema, names and references and that the goal is
possible in principle; solvability within the step limit is checked by the family with the oracle.
"""
from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from rla_core.envs.base import SpecError
from rla_core.envs.household import catalog

GoalType = Literal["put", "put_two", "clean", "heat", "cool", "examine"]
DEFAULT_GOAL_TYPES: list[str] = ["put", "examine", "clean", "heat", "cool"]
# Inclusive ranges of the integer knobs (one place: the schema below and `adjust` read them).
KNOB_BOUNDS: dict[str, tuple[int, int]] = {
    "rooms": (1, 4), "distractors": (0, 8), "closed": (0, 6), "step_limit": (4, 40),
}


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid")


class Knobs(_Model):
    """Difficulty knobs; each is one dial of `adjust`."""

    rooms: int = Field(1, ge=KNOB_BOUNDS["rooms"][0], le=KNOB_BOUNDS["rooms"][1], description="number of rooms")
    distractors: int = Field(2, ge=KNOB_BOUNDS["distractors"][0], le=KNOB_BOUNDS["distractors"][1],
                             description="objects not of the goal's type")
    closed: int = Field(1, ge=KNOB_BOUNDS["closed"][0], le=KNOB_BOUNDS["closed"][1],
                        description="closable receptacles that start closed")
    goal_type: GoalType | Annotated[list[GoalType], Field(min_length=1)] = Field(
        default_factory=lambda: list(DEFAULT_GOAL_TYPES), description="a goal type or a list to sample from"
    )
    step_limit: int = Field(12, ge=KNOB_BOUNDS["step_limit"][0], le=KNOB_BOUNDS["step_limit"][1],
                            description="policy turns before the episode ends")


class ReceptacleSpec(_Model):
    name: str  # "<type> <n>", e.g. "cabinet 1"; the type must be a catalogue receptacle
    closed: bool = False


class RoomSpec(_Model):
    name: str
    receptacles: list[ReceptacleSpec] = Field(min_length=1)


class ObjectSpec(_Model):
    name: str  # "<type> <n>", e.g. "mug 1"
    location: str  # a receptacle name
    clean: bool = False
    hot: bool = False
    cool: bool = False


class GoalSpec(_Model):
    type: GoalType
    object: str  # an object type, e.g. "mug"
    target: str | None = None  # a receptacle name; None for examine


class HouseholdSpec(_Model):
    rooms: list[RoomSpec] = Field(min_length=1, max_length=4)
    start_room: str
    objects: list[ObjectSpec] = Field(min_length=1)
    goal: GoalSpec
    step_limit: int = Field(ge=1, le=100)
    knobs: Knobs | None = None  # filled from the layout when absent
    seed: int | None = None


def _pydantic_message(error: ValidationError, prefix: str) -> str:
    parts: list[str] = []
    for item in error.errors()[:3]:
        # Drop union-member tags such as "literal['put',...]" from the location: they name no key.
        where = ".".join(str(p) for p in item["loc"] if not (isinstance(p, str) and "[" in p))
        parts.append(f"{prefix}{where}: {item['msg']} (got {item.get('input')!r})")
    return "; ".join(parts)


def parse_knobs(knobs: dict[str, Any] | None, strict: bool = False) -> Knobs:
    """Knobs with defaults filled in; SpecError naming the knob when one is out of range or unknown.
    `strict`: no coercion either (an int knob given as "3", 3.0 or true is an error)."""
    try:
        return Knobs.model_validate(knobs or {}, strict=strict)
    except ValidationError as error:
        raise SpecError(_pydantic_message(error, "knobs.")) from None


def _check_names(spec: HouseholdSpec) -> None:
    room_names = [room.name for room in spec.rooms]
    for name in room_names:
        if name not in catalog.ROOM_TEMPLATES:
            raise SpecError(f"room '{name}' is not a known room; valid: {sorted(catalog.ROOM_TEMPLATES)}")
    if len(set(room_names)) != len(room_names):
        raise SpecError(f"room names repeat: {room_names}")
    if spec.start_room not in room_names:
        raise SpecError(f"start_room '{spec.start_room}' is not one of the rooms {room_names}")
    seen: set[str] = set()
    for room in spec.rooms:
        for rec in room.receptacles:
            kind = _typed(rec.name, catalog.RECEPTACLE_TYPES, "receptacle")
            if rec.name in seen:
                raise SpecError(f"receptacle '{rec.name}' appears twice")
            if rec.closed and not catalog.RECEPTACLE_TYPES[kind][0]:
                raise SpecError(f"receptacle '{rec.name}' cannot be closed (a {kind} has no door)")
            seen.add(rec.name)
    desks = [n for n in seen if n.startswith(catalog.LAMP_RECEPTACLE + " ")]
    if len(desks) > 1:
        raise SpecError(f"at most one desk (it holds the desklamp); got {sorted(desks)}")
    objects = [obj.name for obj in spec.objects]
    if len(set(objects)) != len(objects):
        raise SpecError(f"object names repeat: {objects}")
    for obj in spec.objects:
        _typed(obj.name, catalog.OBJECT_TYPES, "object")
        if obj.location not in seen:
            raise SpecError(f"object '{obj.name}' is in '{obj.location}', which is not a receptacle of the spec")
        if obj.hot and obj.cool:
            raise SpecError(f"object '{obj.name}' cannot be both hot and cool")


def _typed(name: str, table: dict[str, Any], what: str) -> str:
    try:
        kind, _ = catalog.split_name(name)
    except ValueError as error:
        raise SpecError(f"{what} name {error}") from None
    if kind not in table:
        raise SpecError(f"{what} '{name}' has unknown type '{kind}'; valid: {sorted(table)}")
    return kind


def _check_goal(spec: HouseholdSpec) -> None:
    goal = spec.goal
    receptacles = {rec.name for room in spec.rooms for rec in room.receptacles}
    if goal.object not in catalog.OBJECT_TYPES:
        raise SpecError(f"goal.object '{goal.object}' is not an object type; valid: {sorted(catalog.OBJECT_TYPES)}")
    count = sum(catalog.split_name(obj.name)[0] == goal.object for obj in spec.objects)
    needed = catalog.objects_needed(goal.type)
    if count < needed:
        raise SpecError(f"goal '{goal.type}' needs {needed} {goal.object} object(s); the spec has {count}")
    if goal.type in catalog.TREATMENT_RECEPTACLE and goal.type not in catalog.OBJECT_TYPES[goal.object]:
        raise SpecError(f"goal '{goal.type}' is impossible: a {goal.object} cannot be {goal.type}ed")
    tool = catalog.goal_receptacle_type(goal.type)
    if tool and not any(catalog.split_name(r)[0] == tool for r in receptacles):
        raise SpecError(f"goal '{goal.type}' is impossible: the spec has no {tool}")
    if goal.type == "examine":
        if goal.target is not None:
            raise SpecError(f"goal 'examine' takes no target (got target '{goal.target}')")
    elif goal.target not in receptacles:
        raise SpecError(f"goal.target '{goal.target}' is not a receptacle of the spec")


def derive_knobs(spec: HouseholdSpec) -> Knobs:
    """The knobs a layout actually has (goal_type is the concrete type), clipped into KNOB_BOUNDS so
    that a hand-written spec with, say, 10 distractors still yields knobs that validate."""
    counts = {
        "rooms": len(spec.rooms),
        "closed": sum(rec.closed for room in spec.rooms for rec in room.receptacles),
        "distractors": sum(catalog.split_name(o.name)[0] != spec.goal.object for o in spec.objects),
        "step_limit": spec.step_limit,
    }
    clipped = {k: min(KNOB_BOUNDS[k][1], max(KNOB_BOUNDS[k][0], v)) for k, v in counts.items()}
    return Knobs(goal_type=spec.goal.type, **clipped)


def parse_spec(raw: dict[str, Any]) -> HouseholdSpec:
    """Schema + names + references + goal possibility. Raises SpecError with a message naming the problem."""
    if not isinstance(raw, dict):
        raise SpecError(f"a spec must be a JSON object, got {type(raw).__name__}")
    try:
        spec = HouseholdSpec.model_validate(raw)
    except ValidationError as error:
        raise SpecError(_pydantic_message(error, "spec.")) from None
    _check_names(spec)
    _check_goal(spec)
    if spec.knobs is None:
        spec.knobs = derive_knobs(spec)
    return spec
