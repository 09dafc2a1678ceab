"""Building, verifying and caching TextWorld games.

A game is built once per spec by TextWorld's own generator and compiler (Inform 7 to a Z-machine
`.z8` file plus the `.json` the engine tracks state with), then verified by playing its walkthrough
through the engine: a spec is valid only when the walkthrough wins.

The cache is a folder (a run's `games/`):

  <content>.z8, <content>.json   the game, named by its content hash (what is played: the world, the
                                 quests, the objective and names; not the seed that made it)
  index/<key>.json               spec key -> {content, walkthrough, objective, ...} or {error}

so a spec is never built twice, two specs that make the same game share its files, and a spec the
engine refused is not retried. `export` packs the games of some specs into a tar.xz (the shipped
held-out and dev games) and `import_archive` unpacks one into a cache, once. Every file is written under a temporary name and renamed, so parallel
builders (processes of `prepare`) and a killed build never leave a half-written game behind.
"""
from __future__ import annotations

import hashlib
import json
import os
import shutil
import tarfile
import tempfile
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor
from multiprocessing import get_context
from pathlib import Path
from typing import Any

from rla_core.envs.base import SpecError
from rla_core.envs.textworld.spec import CHALLENGE_NAMES, MAX_STEP_LIMIT, build_key, parse_spec

INDEX = "index"


def game_content_hash(data: dict[str, Any]) -> str:
    """sha256[:16] of a serialised TextWorld game without its metadata (uuid, seeds, walkthrough)."""
    played = {k: v for k, v in data.items() if k != "metadata"}
    return hashlib.sha256(json.dumps(played, sort_keys=True).encode()).hexdigest()[:16]


def _atomic_write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    with os.fdopen(fd, "w") as handle:
        handle.write(text)
    os.chmod(tmp, 0o644)  # as the game files: mkstemp makes 0600
    os.replace(tmp, path)


def _options(spec: dict[str, Any]):
    from textworld.generator.game import GameOptions

    options = GameOptions()
    options.seeds = spec["seed"]
    knobs = spec["knobs"]
    if spec["generator"] == "custom":  # as `tw-make custom --world-size --nb-objects --quest-length`
        options.nb_rooms = knobs["world_size"]
        options.nb_objects = knobs["nb_objects"]
        length = knobs["quest_length"]
        options.chaining.min_length = options.chaining.max_length = options.chaining.max_depth = length
    return options


def generate_game(spec: dict[str, Any]):
    """The textworld.Game of a generated spec (not compiled); SpecError when the engine cannot make it."""
    import textworld.challenges
    from textworld.generator import make_game
    from textworld.generator.chaining import QuestGenerationError

    options = _options(spec)
    try:
        if spec["generator"] == "custom":
            game = make_game(options)
        else:
            _, make, _ = textworld.challenges.CHALLENGES[CHALLENGE_NAMES[spec["generator"]]]
            game = make(settings={"level": spec["knobs"]["level"]}, options=options)
    except (QuestGenerationError, ValueError) as err:
        raise SpecError(f"TextWorld cannot make this game ({spec['generator']} {spec['knobs']}): "
                        f"{str(err).splitlines()[0][:200]}") from None
    if spec.get("objective"):
        game.objective = spec["objective"]
    return game


def _compile(game, spec: dict[str, Any], z8: Path) -> None:
    """Compile the game of a generated `spec` to `z8` (and its .json beside it) through a private
    temporary folder."""
    from textworld.generator import CouldNotCompileGameError, compile_game

    work = Path(tempfile.mkdtemp(dir=z8.parent, prefix=".build-"))
    try:
        options = _options(spec)
        options.path = str(work / "game.z8")
        options.force_recompile = True
        try:
            compile_game(game, options)
        except CouldNotCompileGameError as err:
            raise SpecError(f"Inform 7 cannot compile this game: {str(err).strip().splitlines()[-1][:200]}") from None
        os.replace(work / "game.json", z8.with_suffix(".json"))  # the sidecar first: a .z8 implies its .json
        os.replace(work / "game.z8", z8)
    finally:
        shutil.rmtree(work, ignore_errors=True)


def play_walkthrough(z8: Path, walkthrough: Sequence[str], step_limit: int) -> int:
    """Play `walkthrough` through the engine; the number of steps to the win, or SpecError."""
    import textworld

    if len(walkthrough) > step_limit:
        raise SpecError(f"not solvable within step_limit={step_limit}: the walkthrough has {len(walkthrough)} steps")
    env = textworld.start(str(z8), request_infos=textworld.EnvInfos(admissible_commands=True, won=True, lost=True))
    try:
        state = env.reset()
        for index, command in enumerate(walkthrough, start=1):
            if command not in state["admissible_commands"]:
                raise SpecError(f"walkthrough step {index} '{command}' is not admissible in the engine")
            state, _, done = env.step(command)
            if state["won"]:
                return index
            if done:
                raise SpecError(f"the walkthrough loses the game at step {index} ('{command}')")
    finally:
        env.close()
    raise SpecError(f"the walkthrough ({len(walkthrough)} steps) does not win the game")


def _walkthrough_of(z8: Path, data: dict[str, Any]) -> list[str]:
    """The game's walkthrough: its metadata's, else the engine's winning policy at the start."""
    walk = data.get("metadata", {}).get("walkthrough")
    if walk:
        return list(walk)
    import textworld

    env = textworld.start(str(z8), request_infos=textworld.EnvInfos(policy_commands=True))
    try:
        return list(env.reset()["policy_commands"] or [])
    finally:
        env.close()


class GameCache:
    """The content-addressed game folder (see the module doc)."""

    def __init__(self, root: str | Path) -> None:
        self.root = Path(root)

    def index_file(self, spec: dict[str, Any]) -> Path:
        return self.root / INDEX / f"{build_key(spec)}.json"

    def lookup(self, spec: dict[str, Any]) -> dict[str, Any] | None:
        """The cached build record of a normalised spec (a refused one raises its SpecError again), or None."""
        path = self.index_file(spec)
        if not path.is_file():
            return None
        record = json.loads(path.read_text())
        if "error" in record:
            raise SpecError(record["error"])
        if "game_file" not in spec and not (self.root / record["file"]).is_file():
            return None  # the game itself was deleted: build again
        return record

    def game_path(self, spec: dict[str, Any], record: dict[str, Any]) -> Path:
        return Path(spec["game_file"]).resolve() if "game_file" in spec else self.root / record["file"]

    def get(self, spec: dict[str, Any]) -> dict[str, Any]:
        """The build record of `spec`, building and verifying the game first when it is not cached."""
        spec = parse_spec(spec)
        record = self.lookup(spec)
        if record is not None:
            return record
        try:
            record = self._build(spec)
        except SpecError as err:
            _atomic_write(self.index_file(spec), json.dumps({"error": str(err)}))
            raise
        _atomic_write(self.index_file(spec), json.dumps(record, sort_keys=True))
        return record

    def _build(self, spec: dict[str, Any]) -> dict[str, Any]:
        start = time.perf_counter()
        self.root.mkdir(parents=True, exist_ok=True)
        if "game_file" in spec:
            z8 = Path(spec["game_file"]).resolve()
            sidecar = z8.with_suffix(".json")
            if not z8.is_file():
                raise SpecError(f"game file not found: {spec['game_file']}")
            if not sidecar.is_file():
                raise SpecError(f"{spec['game_file']}: no {sidecar.name} beside it (TextWorld writes one with "
                                "every game; the engine needs it for admissible commands and the walkthrough)")
            data = json.loads(sidecar.read_text())
            content, file = game_content_hash(data), str(z8)
        else:
            game = generate_game(spec)
            data = game.serialize()
            content = game_content_hash(data)
            z8 = self.root / f"{content}.z8"
            if not (z8.is_file() and z8.with_suffix(".json").is_file()):
                _compile(game, spec, z8)
            file = z8.name
        walkthrough = _walkthrough_of(z8, data)
        if not walkthrough:
            raise SpecError("the game has no walkthrough (is it already won at the start?)")
        steps = play_walkthrough(z8, walkthrough, MAX_STEP_LIMIT)  # validate compares with the spec's limits
        infos = data.get("infos", [])
        return {
            "content": content, "file": file, "walkthrough": walkthrough[:steps], "objective": data.get("objective", ""),
            "rooms": sum(1 for _, info in infos if info.get("type") == "r"),
            "objects": sum(1 for _, info in infos if info.get("type") not in {"r", "d", "P", "I"}),
            "build_seconds": round(time.perf_counter() - start, 3),
        }

    def prepare(self, specs: Sequence[dict[str, Any]], workers: int = 1,
                progress: Callable[[int], None] | None = None) -> dict[str, int]:
        """Build every spec not yet cached, `workers` processes at a time; `progress(done)` after each.
        Refused specs are recorded (their SpecError comes back from `get`), not raised here."""
        todo, seen = [], set()
        for spec in specs:
            spec = parse_spec(spec)
            key = build_key(spec)
            if key in seen:
                continue
            seen.add(key)
            try:
                if self.lookup(spec) is None:
                    todo.append(spec)
            except SpecError:
                pass
        built = refused = 0
        bar = None
        if progress is None and len(todo) >= 4:
            from tqdm.auto import tqdm

            bar = tqdm(total=len(todo), desc="building TextWorld games", unit="game", leave=False,
                       dynamic_ncols=True, mininterval=1.0)
            progress = lambda done: bar.update(done - bar.n)  # noqa: E731
        if workers <= 1 or len(todo) <= 1:
            for spec in todo:
                try:
                    self.get(spec)
                    built += 1
                except SpecError:
                    refused += 1
                if progress:
                    progress(built + refused)
        else:
            # spawn, not fork: the parent holds torch's thread pools, which a fork can deadlock
            with ProcessPoolExecutor(workers, mp_context=get_context("spawn")) as pool:
                for ok in pool.map(_build_one, [str(self.root)] * len(todo), todo):
                    built += ok
                    refused += not ok
                    if progress:
                        progress(built + refused)
        if bar is not None:
            bar.close()
        return {"cached": len(seen) - len(todo), "built": built, "refused": refused}


    def export(self, specs: Sequence[dict[str, Any]], archive: Path) -> int:
        """Write the games of `specs` (built first when missing) with their index records to a tar.xz
        `archive` (what `rla data build` ships beside the held-out and dev files); returns the game count."""
        names: set[str] = set()
        for spec in specs:
            spec = parse_spec(spec)
            record = self.get(spec)
            if "game_file" in spec:
                raise SpecError("only generated games go into an archive, not game files")
            names |= {f"{INDEX}/{build_key(spec)}.json", record["file"], record["file"][:-3] + ".json"}
        archive.parent.mkdir(parents=True, exist_ok=True)
        tmp = archive.with_name(f".{archive.name}.tmp")
        with tarfile.open(tmp, "w:xz", preset=9) as tar:
            for name in sorted(names):
                info = tar.gettarinfo(self.root / name, arcname=name)
                info.mtime, info.uid, info.gid, info.uname, info.gname = 0, 0, 0, "", ""  # same bytes every time
                with open(self.root / name, "rb") as handle:
                    tar.addfile(info, handle)
        os.replace(tmp, archive)
        return sum(1 for n in names if n.endswith(".z8"))

    def import_archive(self, archive: Path) -> int:
        """Unpack an `export`ed archive into the cache once (a marker names its sha256); files already there
        are kept. Returns the number of files added (0 when it was imported before)."""
        digest = hashlib.sha256(archive.read_bytes()).hexdigest()[:16]
        marker = self.root / INDEX / f".imported-{digest}"
        if marker.is_file():
            return 0
        added = 0
        (self.root / INDEX).mkdir(parents=True, exist_ok=True)
        with tarfile.open(archive) as tar:
            for member in tar.getmembers():
                name = Path(member.name)
                if not member.isfile() or name.is_absolute() or ".." in name.parts or len(name.parts) > 2 \
                        or (len(name.parts) == 2 and name.parts[0] != INDEX):
                    raise SpecError(f"{archive}: unexpected member {member.name!r} (a game archive holds "
                                    "<content>.z8/.json and index/<key>.json only)")
                target = self.root / name
                if target.exists():
                    continue
                data = tar.extractfile(member).read()
                fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.")
                with os.fdopen(fd, "wb") as handle:
                    handle.write(data)
                os.chmod(tmp, 0o644)
                os.replace(tmp, target)
                added += 1
        _atomic_write(marker, archive.name + "\n")
        return added


def _build_one(root: str, spec: dict[str, Any]) -> bool:
    try:
        GameCache(root).get(spec)
        return True
    except SpecError:
        return False
