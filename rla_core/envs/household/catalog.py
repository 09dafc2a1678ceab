"""The household vocabulary: object types, receptacle types, room templates and goal types.

Everything a spec may name lives here, so that validation, generation and the rewriter's schema
text all read one table.
"""
from __future__ import annotations

# Object type -> the treatments that apply to it (clean with a sinkbasin, heat with a microwave,
# cool with a fridge). Types with no treatment can still be put, put in twos and examined.
OBJECT_TYPES: dict[str, frozenset[str]] = {
    "apple": frozenset({"clean", "heat", "cool"}),
    "potato": frozenset({"clean", "heat", "cool"}),
    "tomato": frozenset({"clean", "heat", "cool"}),
    "egg": frozenset({"heat", "cool"}),
    "bread": frozenset({"heat", "cool"}),
    "lettuce": frozenset({"clean", "cool"}),
    "mug": frozenset({"clean", "heat", "cool"}),
    "cup": frozenset({"clean", "heat", "cool"}),
    "bowl": frozenset({"clean", "heat", "cool"}),
    "plate": frozenset({"clean", "heat", "cool"}),
    "spoon": frozenset({"clean"}),
    "fork": frozenset({"clean"}),
    "cloth": frozenset({"clean"}),
    "book": frozenset(),
    "cellphone": frozenset(),
    "keychain": frozenset(),
    "pen": frozenset(),
    "pencil": frozenset(),
    "remotecontrol": frozenset(),
    "pillow": frozenset(),
    "candle": frozenset(),
    "creditcard": frozenset(),
}

# Receptacle type -> (closable, preposition used in "put X in/on R").
RECEPTACLE_TYPES: dict[str, tuple[bool, str]] = {
    "countertop": (False, "on"),
    "cabinet": (True, "in"),
    "fridge": (True, "in"),
    "microwave": (True, "in"),
    "sinkbasin": (False, "in"),
    "drawer": (True, "in"),
    "diningtable": (False, "on"),
    "shelf": (False, "on"),
    "garbagecan": (False, "in"),
    "bed": (False, "on"),
    "desk": (False, "on"),
    "dresser": (False, "on"),
    "sofa": (False, "on"),
    "coffeetable": (False, "on"),
    "sidetable": (False, "on"),
    "armchair": (False, "on"),
}

# Room templates in display order; a generated room holds a subset of its template's types.
ROOM_TEMPLATES: dict[str, tuple[str, ...]] = {
    "kitchen": ("countertop", "cabinet", "fridge", "microwave", "sinkbasin", "drawer", "diningtable"),
    "bathroom": ("sinkbasin", "cabinet", "countertop", "shelf", "garbagecan", "drawer"),
    "bedroom": ("bed", "desk", "drawer", "shelf", "dresser"),
    "livingroom": ("sofa", "coffeetable", "cabinet", "sidetable", "armchair", "shelf", "drawer"),
}

# Treatment -> the receptacle type that performs it. The desk holds the one desklamp.
TREATMENT_RECEPTACLE: dict[str, str] = {"clean": "sinkbasin", "heat": "microwave", "cool": "fridge"}
LAMP_RECEPTACLE = "desk"
LAMP_NAME = "desklamp 1"
FLAG_BITS: dict[str, int] = {"clean": 1, "hot": 2, "cool": 4}
TREATMENT_FLAG: dict[str, str] = {"clean": "clean", "heat": "hot", "cool": "cool"}

# Goal types and their difficulty level (sub-goal count): put < examine < treat-then-put < put_two.
GOAL_LEVELS: dict[str, int] = {"put": 0, "examine": 1, "clean": 2, "heat": 2, "cool": 2, "put_two": 3}
GOAL_TYPES: tuple[str, ...] = tuple(GOAL_LEVELS)
GOAL_ADJECTIVE: dict[str, str] = {"clean": "clean", "heat": "hot", "cool": "cool"}


def goal_receptacle_type(goal_type: str) -> str | None:
    """The receptacle type a goal type needs besides the target (sinkbasin, microwave, fridge, desk)."""
    if goal_type == "examine":
        return LAMP_RECEPTACLE
    return TREATMENT_RECEPTACLE.get(goal_type)


def objects_needed(goal_type: str) -> int:
    return 2 if goal_type == "put_two" else 1


def article(name: str) -> str:
    """'a mug 1' / 'an apple 1'."""
    return ("an " if name[0] in "aeiou" else "a ") + name


def plural(word: str) -> str:
    return word + ("es" if word.endswith("o") else "s")


def join_names(names: list[str]) -> str:
    """ALFWorld-style list: 'a mug 1, and an apple 1'; 'nothing' when empty."""
    if not names:
        return "nothing"
    items = [article(n) for n in names]
    if len(items) == 1:
        return items[0]
    return ", ".join(items[:-1]) + ", and " + items[-1]


def split_name(name: str) -> tuple[str, int]:
    """'cabinet 2' -> ('cabinet', 2); raises ValueError on any other shape."""
    kind, _, number = name.rpartition(" ")
    if not kind or not number.isdigit() or number.startswith("0") or " " in kind:
        raise ValueError(f"'{name}' is not of the form '<type> <number>' (e.g. 'cabinet 1')")
    return kind, int(number)
