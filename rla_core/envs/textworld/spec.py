"""The TextWorld task spec: which game to play and for how long.

Two forms, both JSON objects:

- generated: {"generator": "custom", "knobs": {"world_size": 2, "nb_objects": 4, "quest_length": 2},
  "seed": 7, "step_limit": 20} - built by TextWorld's own generator (`tw-make custom --world-size 2
  --nb-objects 4 --quest-length 2 --seed 7` makes the same game). The challenge generators take one knob:
  {"generator": "coin_collector" | "treasure_hunter", "knobs": {"level": 3}, ...}. An optional
  "objective" replaces the engine's objective text (the engine compiles it into the game).
- a file: {"game_file": "path/to/game.z8", "step_limit": 20} - any game TextWorld made, with its
  `.json` sidecar beside it (the engine needs it for admissible commands and the walkthrough).

`parse_spec` checks the structure only (types, names, ranges) and returns the normalised spec; whether
the engine can build the game and its walkthrough wins in time is checked by the family's `validate`.
"""
from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path
from typing import Any

from rla_core.envs.base import SpecError

# generator -> its knobs, in the order the procedural rewriter tries them when feedback does not choose
GENERATORS: dict[str, tuple[str, ...]] = {
    "custom": ("quest_length", "nb_objects", "world_size"),
    "coin_collector": ("level",),
    "treasure_hunter": ("level",),
}
CHALLENGE_NAMES = {"coin_collector": "tw-coin_collector", "treasure_hunter": "tw-treasure_hunter"}
KNOB_BOUNDS: dict[str, tuple[int, int]] = {
    "world_size": (1, 12),
    "nb_objects": (1, 30),
    "quest_length": (1, 8),
    "level": (1, 20),  # treasure_hunter takes 20-30 s to generate at level 25 (minutes at 30)
}
DEFAULT_KNOBS: dict[str, dict[str, int]] = {
    "custom": {"world_size": 2, "nb_objects": 4, "quest_length": 2},
    "coin_collector": {"level": 1},
    "treasure_hunter": {"level": 1},
}
DEFAULT_STEP_LIMIT = 20
MAX_STEP_LIMIT = 200
MAX_OBJECTIVE_CHARS = 600
_OBJECTIVE_BAD = re.compile(r"[^A-Za-z0-9 .,!?;:()\-]")
SEED_BOUND = 2**31  # TextWorld seeds numpy generators, which take 32-bit seeds
SPEC_KEYS = frozenset({"generator", "knobs", "seed", "step_limit", "objective"})
FILE_KEYS = frozenset({"game_file", "step_limit"})


def _int(name: str, value: Any, low: int, high: int) -> int:
    if not isinstance(value, int) or isinstance(value, bool):
        raise SpecError(f"{name} must be an integer, got {type(value).__name__} {str(value)[:40]!r}")
    if not low <= value <= high:
        raise SpecError(f"{name} must be in [{low}, {high}], got {value}")
    return value


def parse_knobs(generator: str, knobs: Any) -> dict[str, int]:
    """The concrete knobs of one game: every knob of the generator, defaults filled, strictly typed."""
    if not isinstance(knobs, dict):
        raise SpecError(f"knobs must be a JSON object, got {type(knobs).__name__}")
    allowed = GENERATORS[generator]
    unknown = sorted(set(knobs) - set(allowed))
    if unknown:
        raise SpecError(f"unknown knob(s) {unknown} for generator '{generator}' (knobs: {list(allowed)})")
    out = dict(DEFAULT_KNOBS[generator])
    for name, value in knobs.items():
        out[name] = _int(f"knob {name}", value, *KNOB_BOUNDS[name])
    return {name: out[name] for name in sorted(out)}


def parse_spec(spec: Any) -> dict[str, Any]:
    """The normalised spec (defaults filled) or SpecError naming what is wrong."""
    if not isinstance(spec, dict):
        raise SpecError(f"a textworld spec must be a JSON object, got {type(spec).__name__}")
    step_limit = _int("step_limit", spec.get("step_limit", DEFAULT_STEP_LIMIT), 1, MAX_STEP_LIMIT)
    if "game_file" in spec:
        unknown = sorted(set(spec) - FILE_KEYS)
        if unknown:
            raise SpecError(f"a game-file spec takes only {sorted(FILE_KEYS)}, got also {unknown}")
        path = spec["game_file"]
        if not isinstance(path, str) or not path:
            raise SpecError("game_file must be a non-empty path string")
        if not path.endswith(".z8"):
            raise SpecError(f"game_file must be a TextWorld .z8 game, got {path!r}")
        return {"game_file": path, "step_limit": step_limit}
    unknown = sorted(set(spec) - SPEC_KEYS)
    if unknown:
        raise SpecError(f"unknown field(s) {unknown}; a generated spec has {sorted(SPEC_KEYS)}")
    generator = spec.get("generator", "custom")
    if not isinstance(generator, str) or generator not in GENERATORS:
        raise SpecError(f"unknown generator {str(generator)[:40]!r}; choose one of {sorted(GENERATORS)}")
    if "seed" not in spec:
        raise SpecError("a generated spec needs a 'seed'")
    out: dict[str, Any] = {
        "generator": generator,
        "knobs": parse_knobs(generator, spec.get("knobs", {})),
        "seed": _int("seed", spec["seed"], 0, SEED_BOUND - 1),
        "step_limit": step_limit,
    }
    objective = spec.get("objective")
    if objective is not None:
        if not isinstance(objective, str) or not objective.strip():
            raise SpecError("objective must be a non-empty string")
        if len(objective) > MAX_OBJECTIVE_CHARS:
            raise SpecError(f"objective is {len(objective)} characters, at most {MAX_OBJECTIVE_CHARS}")
        bad = sorted(set(_OBJECTIVE_BAD.findall(" ".join(objective.split()))))
        if bad:  # Inform 7 reads quotes and brackets as markup: the game would not compile or say something else
            raise SpecError(f"objective may hold letters, digits, spaces and .,!?;:-() only, not {''.join(bad)!r}")
        out["objective"] = " ".join(objective.split())
    return out


def build_key(spec: dict[str, Any]) -> str:
    """sha256[:16] of what the generator is asked to build (generator, knobs, seed, objective), or of
    the game file's resolved path and the bytes of it and its .json: the game cache's index key."""
    if "game_file" in spec:
        path = Path(spec["game_file"]).resolve()
        sidecar = path.with_suffix(".json")
        digest = hashlib.sha256(path.read_bytes()).hexdigest() if path.is_file() else "missing"
        # the sidecar too: a game refused for a missing or broken .json is looked at again once it is fixed
        side = hashlib.sha256(sidecar.read_bytes()).hexdigest() if sidecar.is_file() else "missing"
        what: dict[str, Any] = {"game_file": str(path), "sha256": digest, "json_sha256": side}
    else:
        what = {k: spec[k] for k in ("generator", "knobs", "seed") if k in spec}
        if spec.get("objective"):
            what["objective"] = spec["objective"]
    return hashlib.sha256(json.dumps(what, sort_keys=True).encode()).hexdigest()[:16]
