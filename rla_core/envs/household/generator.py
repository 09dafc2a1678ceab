"""Knob-driven procedural generation of household specs.

`generate_from_seed(knobs, seed)` is a pure function of (knobs, seed); `generate(knobs, rng)` draws
the seed from `rng`. A layout is redrawn (same random stream) until the oracle solves it within
`step_limit`; after MAX_ATTEMPTS draws it raises SpecError naming the knobs.
"""
from __future__ import annotations

import random
from collections import Counter
from collections.abc import Callable
from typing import Any

from rla_core.envs.base import SpecError
from rla_core.envs.household import catalog
from rla_core.envs.household.spec import Knobs, parse_knobs

MAX_ATTEMPTS = 30
RECEPTACLES_PER_ROOM = (4, 5)  # inclusive range; keeps admissible lists short
EXTRA_CLOSABLE = ("cabinet", "drawer")  # added when a layout has fewer closables than `closed`


def _choose_rooms(goal_type: str, n_rooms: int, rng: random.Random) -> tuple[list[str], str | None]:
    """Room names in template order, and the room that must hold the goal's tool receptacle."""
    tool = catalog.goal_receptacle_type(goal_type)
    names = list(catalog.ROOM_TEMPLATES)
    eligible = [n for n in names if tool is None or tool in catalog.ROOM_TEMPLATES[n]]
    tool_room = rng.choice(eligible)
    others = [n for n in names if n != tool_room]
    chosen = {tool_room, *rng.sample(others, n_rooms - 1)}
    return [n for n in names if n in chosen], (tool_room if tool else None)


def _choose_receptacles(rooms: list[str], tool_room: str | None, goal_type: str, closed: int,
                        rng: random.Random) -> dict[str, list[str]]:
    """Receptacle types per room (tool first where needed), padded with closables to reach `closed`."""
    tool = catalog.goal_receptacle_type(goal_type)
    layout: dict[str, list[str]] = {}
    for room in rooms:
        pool = [t for t in catalog.ROOM_TEMPLATES[room] if t != catalog.LAMP_RECEPTACLE or room == tool_room]
        required = [tool] if room == tool_room and tool else []
        rest = [t for t in pool if t not in required]
        size = rng.randint(*RECEPTACLES_PER_ROOM)
        layout[room] = required + rng.sample(rest, min(len(rest), size - len(required)))
    while sum(catalog.RECEPTACLE_TYPES[t][0] for types in layout.values() for t in types) < closed:
        layout[rng.choice(rooms)].append(rng.choice(EXTRA_CLOSABLE))
    return layout


def _numbered(types: list[str]) -> list[str]:
    counts: Counter[str] = Counter()
    names = []
    for kind in types:
        counts[kind] += 1
        names.append(f"{kind} {counts[kind]}")
    return names


def _draw_spec(knobs: Knobs, seed: int, rng: random.Random) -> dict[str, Any]:
    goal_type = knobs.goal_type if isinstance(knobs.goal_type, str) else rng.choice(knobs.goal_type)
    rooms, tool_room = _choose_rooms(goal_type, knobs.rooms, rng)
    types_by_room = _choose_receptacles(rooms, tool_room, goal_type, knobs.closed, rng)
    flat = [(room, kind) for room in rooms for kind in types_by_room[room]]
    rec_names = _numbered([kind for _, kind in flat])
    tool = catalog.TREATMENT_RECEPTACLE.get(goal_type)
    target = None
    if goal_type != "examine":
        target = rng.choice([n for n in rec_names if catalog.split_name(n)[0] != tool])
    treat = goal_type if goal_type in catalog.TREATMENT_RECEPTACLE else None
    obj_type = rng.choice(sorted(t for t, ops in catalog.OBJECT_TYPES.items() if treat is None or treat in ops))
    others = sorted(t for t in catalog.OBJECT_TYPES if t != obj_type)
    obj_types = [obj_type] * catalog.objects_needed(goal_type) + [rng.choice(others) for _ in range(knobs.distractors)]
    sources = [n for n in rec_names if n != target]
    locations = [rng.choice(sources) for _ in range(catalog.objects_needed(goal_type))]
    locations += [rng.choice(rec_names) for _ in range(knobs.distractors)]
    objects = [{"name": n, "location": loc} for n, loc in zip(_numbered(obj_types), locations, strict=True)]
    closed = _choose_closed(rec_names, set(locations[:catalog.objects_needed(goal_type)]) | {target}, knobs.closed, rng)
    spec_rooms, names = [], iter(rec_names)
    for room in rooms:
        recs = [next(names) for _ in types_by_room[room]]
        spec_rooms.append({"name": room, "receptacles": [{"name": r, "closed": r in closed} for r in recs]})
    return {
        "rooms": spec_rooms, "start_room": rng.choice(rooms), "objects": objects,
        "goal": {"type": goal_type, "object": obj_type, "target": target},
        "step_limit": knobs.step_limit, "knobs": knobs.model_dump(), "seed": seed,
    }


def _choose_closed(rec_names: list[str], relevant: set[str | None], count: int, rng: random.Random) -> set[str]:
    """Close `count` closable receptacles, goal-relevant ones (sources, target) first, so the knob bites."""
    closable = [n for n in rec_names if catalog.RECEPTACLE_TYPES[catalog.split_name(n)[0]][0]]
    first = [n for n in closable if n in relevant]
    rest = [n for n in closable if n not in relevant]
    rng.shuffle(first)
    rng.shuffle(rest)
    return set((first + rest)[:count])


def generate_from_seed(knobs: dict[str, Any] | Knobs, seed: int,
                       validate: Callable[[dict[str, Any]], dict[str, Any]]) -> dict[str, Any]:
    """A valid spec at `knobs`; a pure function of (knobs, seed). `validate` raises SpecError on failure."""
    parsed = knobs if isinstance(knobs, Knobs) else parse_knobs(knobs)
    rng = random.Random(seed)
    last_error = ""
    for _ in range(MAX_ATTEMPTS):
        try:
            return validate(_draw_spec(parsed, seed, rng))
        except SpecError as error:  # usually: the drawn layout needs more than step_limit steps
            last_error = str(error)
    raise SpecError(f"no valid spec for knobs {parsed.model_dump()} in {MAX_ATTEMPTS} draws: {last_error}")


def generate(knobs: dict[str, Any] | Knobs, rng: random.Random,
             validate: Callable[[dict[str, Any]], dict[str, Any]]) -> dict[str, Any]:
    return generate_from_seed(knobs, rng.randrange(2**31), validate)
