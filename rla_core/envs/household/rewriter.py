"""The procedural rewriter: turn one difficulty knob, chosen from the critic feedback.

The rejected actions of a `CriticFeedback` are sorted into evidence buckets by their command's verb,
weighted by how often each was rejected; the biggest bucket picks the knob:

    navigation (go to …)                 -> rooms, then distractors
    containers (open/close …)             -> closed, then distractors
    objects (take/put …)                  -> distractors, then closed
    treatment (clean/heat/cool/use …)     -> goal_type
    idle (look/inventory/examine …)       -> step_limit, then distractors
    invalid (no command chosen)           -> distractors, then rooms (a shorter command list)
    no rejected action                    -> step_limit, distractors, closed, rooms, goal_type

"harder" raises the knob (step_limit: lowers it), "easier" lowers it; a knob at its bound, or one
whose new value admits no valid spec, passes to the next. `step_limit` only moves inside the episode
horizon (the runner's turn cap): a limit above the horizon is never reached, so raising it would
change nothing the policy meets. The result is a freshly generated spec (new seed from `rng`) whose
oracle plan length (for step_limit: turns to spare) does not move against the asked direction.
"""
from __future__ import annotations

import json
import random
from collections import Counter
from typing import TYPE_CHECKING, Any

from rla_core.envs.base import Adjustment, SpecError, count_evidence
from rla_core.envs.household import catalog
from rla_core.envs.household.spec import KNOB_BOUNDS, derive_knobs, parse_spec
from rla_core.schemas import NO_ACTION, CriticFeedback

if TYPE_CHECKING:
    from rla_core.envs.household.family import HouseholdFamily

DIRECTED_DRAWS = 4  # draws tried for a spec whose plan length does not move against the direction
BUCKET_KNOBS: dict[str, tuple[str, ...]] = {
    "navigation": ("rooms", "distractors"),
    "containers": ("closed", "distractors"),
    "objects": ("distractors", "closed"),
    "treatment": ("goal_type",),
    "idle": ("step_limit", "distractors"),
    "invalid": ("distractors", "rooms"),
}
VERB_BUCKET = {"go": "navigation", "open": "containers", "close": "containers", "take": "objects",
               "put": "objects", "clean": "treatment", "heat": "treatment", "cool": "treatment",
               "use": "treatment", "examine": "idle", "look": "idle", "inventory": "idle"}
FALLBACK = ("step_limit", "distractors", "closed", "rooms", "goal_type")
KNOB_STEP = {"rooms": 1, "distractors": 2, "closed": 1, "step_limit": -2}  # the "harder" step

EXAMPLE_SPEC = {
    "rooms": [{"name": "kitchen", "receptacles": [{"name": "countertop 1", "closed": False},
                                                  {"name": "cabinet 1", "closed": True}]}],
    "start_room": "kitchen", "objects": [{"name": "mug 1", "location": "countertop 1"}],
    "goal": {"type": "put", "object": "mug", "target": "cabinet 1"}, "step_limit": 12,
}
SCHEMA_TEXT = f"""\
Household task spec (JSON object):
  rooms: list of 1-4 {{"name": one of {sorted(catalog.ROOM_TEMPLATES)},
          "receptacles": [{{"name": "<type> <n>", "closed": bool}}]}}; closable types: \
{sorted(t for t, (c, _) in catalog.RECEPTACLE_TYPES.items() if c)}; other types: \
{sorted(t for t, (c, _) in catalog.RECEPTACLE_TYPES.items() if not c)}; at most one desk (it has the desklamp).
  start_room: a room name.
  objects: list of {{"name": "<type> <n>", "location": a receptacle name, "clean"/"hot"/"cool": bool}};
          types: {sorted(catalog.OBJECT_TYPES)}.
  goal: {{"type": one of {list(catalog.GOAL_TYPES)}, "object": an object type, "target": a receptacle name
          (null for examine)}}. clean/heat/cool need a sinkbasin/microwave/fridge and an object that allows it;
          put_two needs two objects of the type; examine needs a desk.
  step_limit: max turns; the oracle's shortest plan must fit in it.
  knobs (optional): {{"rooms", "distractors", "closed", "goal_type", "step_limit"}}; seed (optional): int.
Names must be unique; every location and target must name a receptacle of the spec.
Example: """ + json.dumps(EXAMPLE_SPEC)


def bucket_of(action: str) -> str | None:
    """The evidence bucket of one rejected action ('go to shelf 1' -> 'navigation'), None if unknown."""
    if action == NO_ACTION:
        return "invalid"
    return VERB_BUCKET.get(action.split(" ", 1)[0].lower())


def classify_feedback(feedback: CriticFeedback) -> tuple[Counter[str], dict[str, str]]:
    """Rejected-step counts per bucket in `feedback`, and the most rejected action of each bucket."""
    return count_evidence(feedback, bucket_of)


def knob_order(counts: Counter[str]) -> list[tuple[str, str | None]]:
    """(knob, bucket that chose it) in preference order; bucket None for the fallback order."""
    order: list[tuple[str, str | None]] = []
    ranked = sorted(counts, key=lambda b: (-counts[b], list(BUCKET_KNOBS).index(b)))
    for bucket in ranked:
        order += [(knob, bucket) for knob in BUCKET_KNOBS[bucket]]
    order += [(knob, None) for knob in FALLBACK]
    seen: set[str] = set()
    return [(k, b) for k, b in order if not (k in seen or seen.add(k))]


def turn_knob(knob: str, value: Any, direction: str, rng: random.Random, horizon: int | None = None) -> Any | None:
    """The knob's next value in `direction`, or None at its bound (step_limit: capped at the horizon)."""
    sign = 1 if direction == "harder" else -1
    if knob == "goal_type":
        level = catalog.GOAL_LEVELS[value] + sign
        options = sorted(t for t, lv in catalog.GOAL_LEVELS.items() if lv == level)
        return rng.choice(options) if options else None
    low, high = KNOB_BOUNDS[knob]
    if knob == "step_limit" and horizon is not None:
        high = min(high, horizon)
        value = min(value, high)  # a limit past the horizon acts as the horizon
    new = min(high, max(low, value + sign * KNOB_STEP[knob]))
    return None if new == value else new


def _slack(family: HouseholdFamily, spec: dict[str, Any], horizon: int | None) -> float:
    """Turns to spare: the effective turn limit minus the oracle plan length."""
    limit = spec["step_limit"] if horizon is None else min(spec["step_limit"], horizon)
    return limit - family.difficulty(spec)


def _directed_spec(family: HouseholdFamily, parent: dict[str, Any], knobs: dict[str, Any], knob: str,
                   direction: str, rng: random.Random, horizon: int | None) -> dict[str, Any] | None:
    """A valid spec at `knobs` that does not move against `direction`; None if no draw does.

    The measure is the oracle plan length, except for step_limit, whose knob is the turns to spare
    (a fresh layout may have a shorter plan, and a lower limit must still leave less slack)."""
    harder = direction == "harder"
    for _ in range(DIRECTED_DRAWS):
        try:
            spec = family.generate(knobs, rng, horizon=horizon)
        except SpecError:
            return None
        if knob == "step_limit":
            before, after = _slack(family, parent, horizon), _slack(family, spec, horizon)
            if (after < before) if harder else (after > before):
                return spec
            continue
        before, after = family.difficulty(parent), family.difficulty(spec)
        if (after >= before) if harder else (after <= before):
            return spec
    return None


def adjust(family: HouseholdFamily, spec: dict[str, Any], direction: str, feedback: CriticFeedback,
           rng: random.Random, horizon: int | None = None) -> tuple[dict[str, Any], Adjustment]:
    """(new spec, the knob turned and why). SpecError if every knob is stuck."""
    if direction not in ("harder", "easier"):
        raise ValueError(f"direction must be 'harder' or 'easier', got {direction!r}")
    current = derive_knobs(parse_spec(spec)).model_dump()
    counts, examples = classify_feedback(feedback)
    total = sum(counts.values())
    for knob, bucket in knob_order(counts):
        new_value = turn_knob(knob, current[knob], direction, rng, horizon)
        if new_value is None:
            continue
        new_spec = _directed_spec(family, spec, {**current, knob: new_value}, knob, direction, rng, horizon)
        if new_spec is None:
            continue
        if bucket:
            evidence = f"{counts[bucket]}/{total} rejected steps were {bucket} (e.g. '{examples[bucket]}')"
        else:
            evidence = f"no rejected step points to a knob ({total} classified); fallback knob"
        reason = f"{direction}: {knob} {current[knob]} -> {new_value}; {evidence}"
        return new_spec, Adjustment(knob=knob, before=current[knob], after=new_value, evidence=bucket, reason=reason)
    raise SpecError(f"cannot make the task {direction}: every knob is at its bound or admits no valid spec")
