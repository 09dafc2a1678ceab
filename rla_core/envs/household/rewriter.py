"""The procedural rewriter: turn one difficulty knob, chosen from the critic feedback.

Feedback lines such as "step 3: go to drawer 1 — rejected: does not help the goal" are sorted into
evidence buckets by the rejected command's verb; the biggest bucket picks the knob:

    navigation (go to …)              -> rooms, then distractors
    containers (open/close …)          -> closed
    objects (take/put …)               -> distractors, then closed
    treatment (clean/heat/cool/use/examine) -> goal_type
    idle (look/inventory)              -> step_limit
    nothing informative                -> step_limit, distractors, closed, rooms, goal_type

"harder" raises the knob (step_limit: lowers it), "easier" lowers it; a knob at its bound, or one
whose new value admits no valid spec, passes to the next. The result is a freshly generated spec
(new seed from `rng`) whose oracle plan length moves in the asked direction when a few draws allow.
"""
from __future__ import annotations

import json
import random
import re
from collections import Counter
from typing import TYPE_CHECKING, Any

from rla_core.envs.base import SpecError
from rla_core.envs.household import catalog
from rla_core.envs.household.spec import KNOB_BOUNDS, derive_knobs, parse_spec

if TYPE_CHECKING:
    from rla_core.envs.household.family import HouseholdFamily

DIRECTED_DRAWS = 4  # draws tried for a spec whose plan length moves the asked way
BUCKET_KNOBS: dict[str, tuple[str, ...]] = {
    "navigation": ("rooms", "distractors"),
    "containers": ("closed",),
    "objects": ("distractors", "closed"),
    "treatment": ("goal_type",),
    "idle": ("step_limit",),
}
VERB_BUCKET = {"go": "navigation", "open": "containers", "close": "containers", "take": "objects",
               "put": "objects", "clean": "treatment", "heat": "treatment", "cool": "treatment",
               "use": "treatment", "examine": "treatment", "look": "idle", "inventory": "idle"}
FALLBACK = ("step_limit", "distractors", "closed", "rooms", "goal_type")
KNOB_STEP = {"rooms": 1, "distractors": 2, "closed": 1, "step_limit": -2}  # the "harder" step
_REJECTED = re.compile(r"step\s*\d+\s*[:.)]\s*(?P<cmd>.+?)\s*(?:—|–|--|-|:)\s*rejected", re.IGNORECASE)

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


def classify_feedback(feedback: str) -> tuple[Counter[str], dict[str, str]]:
    """Bucket counts of the rejected commands named in `feedback`, and the first example per bucket."""
    counts: Counter[str] = Counter()
    examples: dict[str, str] = {}
    for match in _REJECTED.finditer(feedback or ""):
        command = " ".join(match.group("cmd").lower().split())
        bucket = VERB_BUCKET.get(command.split(" ", 1)[0])
        if bucket:
            counts[bucket] += 1
            examples.setdefault(bucket, command)
    return counts, examples


def knob_order(counts: Counter[str]) -> list[tuple[str, str | None]]:
    """(knob, bucket that chose it) in preference order; bucket None for the fallback order."""
    order: list[tuple[str, str | None]] = []
    ranked = sorted(counts, key=lambda b: (-counts[b], list(BUCKET_KNOBS).index(b)))
    for bucket in ranked:
        order += [(knob, bucket) for knob in BUCKET_KNOBS[bucket]]
    order += [(knob, None) for knob in FALLBACK]
    seen: set[str] = set()
    return [(k, b) for k, b in order if not (k in seen or seen.add(k))]


def turn_knob(knob: str, value: Any, direction: str, rng: random.Random) -> Any | None:
    """The knob's next value in `direction`, or None at its bound."""
    sign = 1 if direction == "harder" else -1
    if knob == "goal_type":
        level = catalog.GOAL_LEVELS[value] + sign
        options = sorted(t for t, lv in catalog.GOAL_LEVELS.items() if lv == level)
        return rng.choice(options) if options else None
    low, high = KNOB_BOUNDS[knob]
    new = min(high, max(low, value + sign * KNOB_STEP[knob]))
    return None if new == value else new


def _directed_spec(family: HouseholdFamily, knobs: dict[str, Any], direction: str, before: float,
                   rng: random.Random) -> dict[str, Any] | None:
    """A valid spec at `knobs`, preferring one whose plan length moves the asked way; None if none."""
    fallback = None
    for _ in range(DIRECTED_DRAWS):
        try:
            spec = family.generate(knobs, rng)
        except SpecError:
            return fallback
        after = family.difficulty(spec)
        if (after >= before) if direction == "harder" else (after <= before):
            return spec
        fallback = fallback or spec
    return fallback


def adjust(family: HouseholdFamily, spec: dict[str, Any], direction: str, feedback: str,
           rng: random.Random) -> tuple[dict[str, Any], str]:
    """(new spec, one-line reason naming the knob and the evidence). SpecError if every knob is stuck."""
    if direction not in ("harder", "easier"):
        raise ValueError(f"direction must be 'harder' or 'easier', got {direction!r}")
    current = derive_knobs(parse_spec(spec)).model_dump()
    before = family.difficulty(spec)
    counts, examples = classify_feedback(feedback)
    total = sum(counts.values())
    for knob, bucket in knob_order(counts):
        new_value = turn_knob(knob, current[knob], direction, rng)
        if new_value is None:
            continue
        new_spec = _directed_spec(family, {**current, knob: new_value}, direction, before, rng)
        if new_spec is None:
            continue
        if bucket:
            evidence = f"{counts[bucket]}/{total} rejected steps were {bucket} (e.g. '{examples[bucket]}')"
        else:
            evidence = f"no decisive rejected steps in the feedback ({total} parsed); fallback knob"
        return new_spec, f"{direction}: {knob} {current[knob]} -> {new_value}; {evidence}"
    raise SpecError(f"cannot make the task {direction}: every knob is at its bound or admits no valid spec")
