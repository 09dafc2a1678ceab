"""The procedural rewriter of TextWorld games: regenerate the game with one knob turned, the knob
chosen from the critic feedback.

The rejected actions of a `CriticFeedback` are sorted into evidence buckets by their command's verb,
weighted by how often each was rejected; the biggest bucket picks the knob of a `custom` game:

    navigation (go …)                                   -> world_size, then quest_length
    objects (take/put/insert/drop/open/close/unlock/…)  -> nb_objects, then quest_length
    long quests (look/inventory/examine, no command)    -> quest_length, then nb_objects
    no rejected action                                  -> quest_length, nb_objects, world_size

(wandering - looking around, examining, no valid answer - is what a policy that has lost its place in a
long quest does). Challenge games (coin_collector, treasure_hunter) have one knob, `level`.
"harder" raises the knob (nb_objects by 2, the others by 1), "easier" lowers it; a knob at its bound,
or one whose new value the engine cannot build, passes to the next. The result is a freshly generated
game (new seed from `rng`) whose walkthrough is not shorter (harder) or longer (easier) than the
parent's, built and verified by the engine like every spec.
"""
from __future__ import annotations

import random
from collections import Counter
from typing import TYPE_CHECKING, Any

from rla_core.envs.base import Adjustment, SpecError, count_evidence
from rla_core.envs.textworld.spec import GENERATORS, KNOB_BOUNDS, SEED_BOUND, parse_spec
from rla_core.schemas import NO_ACTION, CriticFeedback

if TYPE_CHECKING:
    from rla_core.envs.textworld.family import TextWorldFamily

DIRECTED_DRAWS = 4
BUCKET_KNOBS: dict[str, tuple[str, ...]] = {
    "navigation": ("world_size", "quest_length"),
    "objects": ("nb_objects", "quest_length"),
    "long quests": ("quest_length", "nb_objects"),
}
OBJECT_VERBS = ("take", "put", "insert", "drop", "open", "close", "unlock", "lock", "eat", "drink", "cook",
                "slice", "chop", "dice", "prepare")
VERB_BUCKET = {"go": "navigation", **{v: "objects" for v in OBJECT_VERBS},
               "look": "long quests", "inventory": "long quests", "examine": "long quests"}
FALLBACK = ("quest_length", "nb_objects", "world_size", "level")
KNOB_STEP = {"world_size": 1, "nb_objects": 2, "quest_length": 1, "level": 1}


def bucket_of(action: str) -> str | None:
    """The evidence bucket of one rejected action ('go east' -> 'navigation'), None if unknown."""
    if action == NO_ACTION:
        return "long quests"
    return VERB_BUCKET.get(action.split(" ", 1)[0].lower())


def classify_feedback(feedback: CriticFeedback) -> tuple[Counter[str], dict[str, str]]:
    """Rejected-step counts per bucket in `feedback`, and the most rejected action of each bucket."""
    return count_evidence(feedback, bucket_of)


def knob_order(generator: str, counts: Counter[str]) -> list[tuple[str, str | None]]:
    """(knob, bucket that chose it) in preference order for `generator`; bucket None = fallback."""
    allowed = set(GENERATORS[generator])
    order: list[tuple[str, str | None]] = []
    for bucket in sorted(counts, key=lambda b: (-counts[b], list(BUCKET_KNOBS).index(b))):
        order += [(knob, bucket) for knob in BUCKET_KNOBS[bucket]]
        if "level" in allowed:
            order.append(("level", bucket))
    order += [(knob, None) for knob in FALLBACK]
    seen: set[str] = set()
    return [(k, b) for k, b in order if k in allowed and not (k in seen or seen.add(k))]


def turn_knob(knob: str, value: int, direction: str) -> int | None:
    low, high = KNOB_BOUNDS[knob]
    new = min(high, max(low, value + (1 if direction == "harder" else -1) * KNOB_STEP[knob]))
    return None if new == value else new


def adjust(family: TextWorldFamily, spec: dict[str, Any], direction: str, feedback: CriticFeedback,
           rng: random.Random, horizon: int | None = None) -> tuple[dict[str, Any], Adjustment]:
    """(new spec, the knob turned and why). SpecError if every knob is stuck (or a game-file spec)."""
    if direction not in ("harder", "easier"):
        raise ValueError(f"direction must be 'harder' or 'easier', got {direction!r}")
    parent = parse_spec(spec)
    if "game_file" in parent:
        raise SpecError("a game-file task has no generator knobs to turn")
    generator, current = parent["generator"], parent["knobs"]
    before = family.difficulty(parent)
    counts, examples = classify_feedback(feedback)
    total = sum(counts.values())
    for knob, bucket in knob_order(generator, counts):
        new_value = turn_knob(knob, current[knob], direction)
        if new_value is None:
            continue
        knobs = {**current, knob: new_value}
        for _ in range(DIRECTED_DRAWS):
            candidate = {"generator": generator, "knobs": knobs, "seed": rng.randrange(SEED_BOUND),
                         "step_limit": parent["step_limit"]}
            try:
                candidate = family.validate(candidate, horizon)
            except SpecError:
                continue
            after = family.difficulty(candidate)
            if (after >= before) if direction == "harder" else (after <= before):
                break
        else:
            continue
        if bucket:
            evidence = f"{counts[bucket]}/{total} rejected steps were {bucket} (e.g. '{examples[bucket]}')"
        else:
            evidence = f"no rejected step points to a knob ({total} classified); fallback knob"
        reason = f"{direction}: {knob} {current[knob]} -> {new_value}; {evidence}"
        return candidate, Adjustment(knob=knob, before=current[knob], after=new_value, evidence=bucket,
                                     reason=reason)
    raise SpecError(f"cannot make the game {direction}: every knob is at its bound or the engine cannot build it")
