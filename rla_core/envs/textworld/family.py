"""The `textworld` environment family: games made and played by TextWorld behind the environment
interface (validate, make, generate, difficulty, knobs, content hash, adjust, rewrite prompts).

Every game goes through one `GameCache` (a folder; `use_cache` points it at a run's `games/`), so a
spec is built and verified once. Generation knobs (`environment.knobs`):

    generator: custom | coin_collector | treasure_hunter   (or a list to draw from; default custom)
    world_size, nb_objects, quest_length (custom), level (challenges): an int or a list to draw from
    pool: draw from this many fixed (knobs, seed) drafts instead of fresh seeds, so that the tokenizer
          corpus, the warm-start and the seed slots reuse each other's games (optional)
    step_limit: the spec's turn limit (default 20)
"""
from __future__ import annotations

import json
import os
import random
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from rla_core.envs.base import Adjustment, SpecError
from rla_core.envs.textworld import rewriter
from rla_core.envs.textworld.episode import TextWorldEpisode, clean_goal
from rla_core.envs.textworld.games import GameCache
from rla_core.envs.textworld.spec import (DEFAULT_KNOBS, DEFAULT_STEP_LIMIT, GENERATORS, SEED_BOUND, build_key,
                                          parse_knobs, parse_spec)
from rla_core.schemas import CriticFeedback

CACHE_ENV = "RLA_TEXTWORLD_GAMES"  # the game cache when no run set one (default ~/.cache/rlanything/textworld)
GENERATE_TRIES = 50
CONFIG_KEYS = frozenset({"generator", "pool", "step_limit"}) | {k for ks in GENERATORS.values() for k in ks}

SCHEMA_TEXT = """\
TextWorld game spec (JSON object), built by TextWorld's generator:
  generator: "custom" (default) | "coin_collector" | "treasure_hunter"
  knobs: custom: {"world_size": rooms 1-12, "nb_objects": 1-30, "quest_length": walkthrough steps 1-8};
         challenges: {"level": 1-30}
  seed: integer in [0, 2**31); step_limit: max turns (the walkthrough must fit in it)
  objective (optional): text that replaces the game's objective (letters, digits, spaces, .,!?;:-())
Or a game file: {"game_file": "path/to/game.z8", "step_limit": 20}.
Example: {"generator": "custom", "knobs": {"world_size": 2, "nb_objects": 4, "quest_length": 2}, "seed": 7, \
"step_limit": 20}"""


def _choose(value: Any, rng: random.Random) -> Any:
    return rng.choice(value) if isinstance(value, list) else value


class TextWorldFamily:
    name = "textworld"
    observation_chars = 400  # cap on a cleaned observation (characters)
    goal_chars = 400

    def __init__(self) -> None:
        self._cache: GameCache | None = None
        self.workers = max(1, min(4, os.cpu_count() or 1))

    # ------------------------------------------------------------------ the cache
    @property
    def cache(self) -> GameCache:
        if self._cache is None:
            default = Path(os.environ.get(CACHE_ENV) or Path.home() / ".cache" / "rlanything" / "textworld")
            self._cache = GameCache(default)
        return self._cache

    def configure(self, games: str | Path, workers: int = 0, observation_chars: int | None = None,
                  goal_chars: int | None = None, archive: str | Path | None = None) -> None:
        """Build and find games under `games` from now on (a run's `games/`); `workers` build processes
        (0 = the CPU count, at most 4); caps on the cleaned texts; `archive`: a shipped tar.xz of built
        games (data/textworld/games.tar.xz) unpacked into the cache once, so they are not built again. A
        cap left None is the family's default, not whatever an earlier call set (the family is shared by a
        process: a run bound after another must not inherit the other's caps)."""
        self._cache = GameCache(games)
        if archive is not None:
            self._cache.import_archive(Path(archive))
        self.workers = workers or max(1, min(4, os.cpu_count() or 1))
        self.observation_chars = observation_chars or type(self).observation_chars
        self.goal_chars = goal_chars or type(self).goal_chars

    def record(self, spec: dict[str, Any]) -> dict[str, Any]:
        """The build record (content hash, walkthrough, objective, file) of a spec, building it if needed."""
        return self.cache.get(spec)

    def game_file(self, spec: dict[str, Any]) -> Path:
        spec = parse_spec(spec)
        return self.cache.game_path(spec, self.cache.get(spec))

    def prepare(self, specs: Sequence[dict[str, Any]], progress: Callable[[int], None] | None = None) -> dict[str, int]:
        """Build the games of `specs` that are not cached yet, in parallel (`workers` processes)."""
        return self.cache.prepare(specs, self.workers, progress)

    # ------------------------------------------------------------------ the interface
    def validate(self, spec: dict[str, Any], horizon: int | None = None) -> dict[str, Any]:
        """Normalised spec, or SpecError: structure, the engine builds the game, and its walkthrough wins
        through the engine within min(step_limit, horizon) turns."""
        parsed = parse_spec(spec)
        steps = len(self.cache.get(parsed)["walkthrough"])
        if steps > parsed["step_limit"]:
            raise SpecError(f"not solvable within step_limit={parsed['step_limit']}: the walkthrough has {steps} steps")
        if horizon is not None and steps > horizon:
            raise SpecError(f"not solvable within the episode horizon of {horizon} turns: the walkthrough has "
                            f"{steps} steps")
        return parsed

    def make(self, spec: dict[str, Any]) -> TextWorldEpisode:
        parsed = parse_spec(spec)
        record = self.cache.get(parsed)
        return TextWorldEpisode(self.cache.game_path(parsed, record), parsed["step_limit"], record["objective"],
                                self.observation_chars, self.goal_chars)

    def draft(self, knobs: dict[str, Any], rng: random.Random) -> dict[str, Any]:
        """An unbuilt spec at the configured knobs (lists are drawn from); see the module doc."""
        unknown = sorted(set(knobs) - CONFIG_KEYS)
        if unknown:
            raise SpecError(f"unknown textworld knob(s) {unknown}; known: {sorted(CONFIG_KEYS)}")
        pool = knobs.get("pool")
        if pool is not None:
            rng = random.Random(f"textworld-pool/{rng.randrange(int(pool))}")
        generator = _choose(knobs.get("generator", "custom"), rng)
        if not isinstance(generator, str) or generator not in GENERATORS:
            raise SpecError(f"unknown generator {generator!r}; choose one of {sorted(GENERATORS)}")
        concrete = {k: _choose(knobs.get(k, DEFAULT_KNOBS[generator][k]), rng) for k in GENERATORS[generator]}
        return {"generator": generator, "knobs": parse_knobs(generator, concrete), "seed": rng.randrange(SEED_BOUND),
                "step_limit": int(knobs.get("step_limit", DEFAULT_STEP_LIMIT))}

    def generate(self, knobs: dict[str, Any], rng: random.Random, horizon: int | None = None) -> dict[str, Any]:
        """A valid spec at the knobs: drafts until the engine builds one that fits the horizon."""
        last = None
        for _ in range(GENERATE_TRIES):
            try:
                return self.validate(self.draft(knobs, rng), horizon)
            except SpecError as err:
                last = err
        raise SpecError(f"no valid game at knobs {knobs} in {GENERATE_TRIES} tries; last: {last}")

    def warm(self, knobs: dict[str, Any], rng: random.Random, count: int,
             progress: Callable[[int], None] | None = None) -> dict[str, int]:
        """Build in parallel the first `count` drafts `generate` would try with a copy of `rng` (it
        leaves `rng` alone): a cache warmer for a sequential loop of `generate` calls."""
        copy = random.Random()
        copy.setstate(rng.getstate())
        drafts: dict[str, dict[str, Any]] = {}
        for _ in range(20 * count):  # a pool repeats drafts: `count` distinct ones, as the loop will need
            draft = self.draft(knobs, copy)
            drafts.setdefault(build_key(draft), draft)
            if len(drafts) >= count:
                break
        return self.prepare(list(drafts.values()), progress)

    def difficulty(self, spec: dict[str, Any]) -> float:
        """The walkthrough's length (commands)."""
        return float(len(self.cache.get(parse_spec(spec))["walkthrough"]))

    def knobs_of(self, spec: dict[str, Any]) -> dict[str, Any]:
        parsed = parse_spec(spec)
        if "game_file" in parsed:
            return {}
        return {"generator": parsed["generator"], **parsed["knobs"]}

    def content_hash(self, spec: dict[str, Any]) -> str:
        """sha256[:16] of the game TextWorld built (world, quests, objective, names), not of its seed."""
        return self.cache.get(parse_spec(spec))["content"]

    def adjust(self, spec: dict[str, Any], direction: str, feedback: CriticFeedback, rng: random.Random,
               horizon: int | None = None) -> tuple[dict[str, Any], Adjustment]:
        return rewriter.adjust(self, spec, direction, feedback, rng, horizon)

    def describe_schema(self) -> str:
        return SCHEMA_TEXT

    def rewrite_context(self, spec: dict[str, Any]) -> str:
        parsed = parse_spec(spec)
        record = self.cache.get(parsed)
        return (f"Goal: {clean_goal(record['objective'], self.goal_chars)}\n"
                f"Knobs: {json.dumps(self.knobs_of(parsed))}\nWalkthrough: {len(record['walkthrough'])} steps.")

    def generator_answer(self, spec: dict[str, Any]) -> str:
        """The generator form {"knobs": {"generator", <knobs>, "step_limit"}, "seed"} of a generated spec,
        which `spec_from_answer` expands back to it; a spec with its own objective (or a game file) has no
        generator form and is answered as the full spec."""
        parsed = parse_spec(spec)
        if "game_file" in parsed or "objective" in parsed:
            return json.dumps(parsed, sort_keys=True)
        knobs = {**self.knobs_of(parsed), "step_limit": parsed["step_limit"]}
        return json.dumps({"knobs": knobs, "seed": parsed["seed"]})

    def spec_from_answer(self, answer: dict[str, Any], horizon: int | None = None) -> dict[str, Any]:
        """A full spec is validated; {"knobs": {"generator"?, ...}, "seed"} is built by the generator.
        Untrusted: anything malformed raises SpecError naming it."""
        if not isinstance(answer, dict):
            raise SpecError(f"an answer must be a JSON object, got {type(answer).__name__}")
        if set(answer) != {"knobs", "seed"}:
            return self.validate(answer, horizon)
        knobs = answer["knobs"]
        if not isinstance(knobs, dict):
            raise SpecError(f"knobs must be a JSON object, got {type(knobs).__name__}")
        knobs = dict(knobs)
        generator = knobs.pop("generator", "custom")
        step_limit = knobs.pop("step_limit", DEFAULT_STEP_LIMIT)
        if not isinstance(generator, str) or generator not in GENERATORS:
            raise SpecError(f"unknown generator {str(generator)[:40]!r}; choose one of {sorted(GENERATORS)}")
        return self.validate({"generator": generator, "knobs": knobs, "seed": answer["seed"],
                              "step_limit": step_limit}, horizon)


TEXTWORLD = TextWorldFamily()
