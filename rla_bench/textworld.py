"""Benchmark of TextWorld games: game generation time per game, environment steps per second.

Usage: rla bench textworld [--games 12] [--episodes 3] [--workers 2] [--out bench/results/textworld.json]

1. Generation: `--games` fresh `custom` games (world_size 1-3, nb_objects 2-6, quest_length 1-3, as
   configs/textworld.yaml) built one after another into an empty cache, timing the three parts of a
   build separately: TextWorld's generator (`make_game`), its Inform 7 compiler (`compile_game`) and
   our check that the walkthrough wins through the engine; then the same number of other games built by
   `--workers` processes (GameCache.prepare), for the parallel rate.
2. Steps: random-policy episodes (20 steps or to the end) on those games through `textworld.start`
   with the admissible commands requested, with and without the engine's winning policy
   (`policy_commands`, what the walkthrough oracle needs), and through our TextWorldEpisode (cleaned
   text + an is_progress label on every step, as rollouts record them). Loading a game (start) is
   timed apart from stepping.
"""
from __future__ import annotations

import argparse
import json
import random
import statistics
import tempfile
import time
from pathlib import Path

from rla_core.envs.textworld.family import TextWorldFamily
from rla_core.envs.textworld.games import GameCache, _compile, game_content_hash, generate_game, play_walkthrough
from rla_core.envs.textworld.spec import parse_spec

KNOBS = {"world_size": [1, 2, 3], "nb_objects": [2, 4, 6], "quest_length": [1, 2, 3]}
MAX_STEPS = 20


def bench_generation(root: Path, count: int, rng: random.Random) -> tuple[dict, list[dict]]:
    root.mkdir(parents=True, exist_ok=True)
    family = TextWorldFamily()
    parts = {"make_game": [], "compile": [], "verify": []}
    specs = []
    for _ in range(count):
        spec = parse_spec(family.draft(KNOBS, rng))
        start = time.perf_counter()
        try:
            game = generate_game(spec)
        except Exception:
            continue
        made = time.perf_counter()
        data = game.serialize()
        z8 = root / f"{game_content_hash(data)}.z8"
        _compile(game, spec, z8)
        compiled = time.perf_counter()
        play_walkthrough(z8, data["metadata"]["walkthrough"], 200)
        verified = time.perf_counter()
        parts["make_game"].append(made - start)
        parts["compile"].append(compiled - made)
        parts["verify"].append(verified - compiled)
        specs.append({**spec, "_file": str(z8)})
    total = [sum(p) for p in zip(*parts.values())]
    result = {f"{name}_s_mean": statistics.mean(v) for name, v in parts.items()}
    result.update({"games": len(total), "sequential_s_per_game": statistics.mean(total),
                   "sequential_s_median": statistics.median(total)})
    return result, specs


def bench_parallel(root: Path, count: int, workers: int, rng: random.Random) -> dict:
    family = TextWorldFamily()
    drafts = [family.draft(KNOBS, rng) for _ in range(count)]
    start = time.perf_counter()
    done = GameCache(root).prepare(drafts, workers)
    seconds = time.perf_counter() - start
    return {"workers": workers, "games": done["built"] + done["refused"], "seconds": seconds,
            "s_per_game": seconds / max(done["built"] + done["refused"], 1)}


def bench_engine_steps(files: list[str], episodes: int, walkthrough: bool, rng: random.Random) -> dict:
    import textworld

    infos = textworld.EnvInfos(admissible_commands=True, won=True, lost=True, policy_commands=walkthrough)
    load = steps = 0.0
    count = 0
    for path in files:
        for _ in range(episodes):
            start = time.perf_counter()
            env = textworld.start(path, request_infos=infos)
            state = env.reset()
            loaded = time.perf_counter()
            for _ in range(MAX_STEPS):
                state, _, done = env.step(rng.choice(state["admissible_commands"]))
                count += 1
                if done:
                    break
            steps += time.perf_counter() - loaded
            load += loaded - start
            env.close()
    return {"policy_commands": walkthrough, "steps": count, "steps_per_s": count / steps,
            "load_reset_s_per_episode": load / (len(files) * episodes)}


def bench_episode_steps(root: Path, specs: list[dict], episodes: int, rng: random.Random) -> dict:
    family = TextWorldFamily()
    family.configure(games=root, workers=1)
    load = steps = 0.0
    count = 0
    for spec in specs:
        clean = {k: v for k, v in spec.items() if not k.startswith("_")}
        for _ in range(episodes):
            start = time.perf_counter()
            episode = family.make(clean)
            episode.reset()
            loaded = time.perf_counter()
            while not episode.done:
                command = rng.choice(episode.admissible_commands())
                episode.is_progress(command)
                episode.step(command)
                count += 1
            steps += time.perf_counter() - loaded
            load += loaded - start
            episode.close()
    return {"steps": count, "steps_per_s": count / steps, "make_reset_s_per_episode": load / (len(specs) * episodes)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="rla bench textworld", description=__doc__.splitlines()[0])
    parser.add_argument("--games", type=int, default=12)
    parser.add_argument("--episodes", type=int, default=3)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--out", default="bench/results/textworld.json")
    args = parser.parse_args(argv)
    rng = random.Random(0)
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        generate_game(parse_spec(TextWorldFamily().draft(KNOBS, random.Random(99))))  # imports and grammar: not timed
        generation, specs = bench_generation(root / "seq", args.games, rng)
        print(f"generation, sequential: {generation['sequential_s_per_game']:.2f} s/game (make_game "
              f"{generation['make_game_s_mean']:.2f} + compile {generation['compile_s_mean']:.2f} + verify "
              f"{generation['verify_s_mean']:.2f})")
        parallel = bench_parallel(root / "par", args.games, args.workers, rng)
        print(f"generation, {args.workers} workers: {parallel['s_per_game']:.2f} s/game ({parallel['games']} games "
              f"in {parallel['seconds']:.1f} s)")
        files = [s["_file"] for s in specs]
        without = bench_engine_steps(files, args.episodes, False, random.Random(1))
        with_walk = bench_engine_steps(files, args.episodes, True, random.Random(1))
        episode = bench_episode_steps(root / "seq", [{**s, "step_limit": MAX_STEPS} for s in specs], args.episodes,
                                      random.Random(1))
        for name, row in (("engine, no walkthrough", without), ("engine, with walkthrough", with_walk),
                          ("TextWorldEpisode (+labels)", episode)):
            print(f"steps, {name}: {row['steps_per_s']:.0f} steps/s ({row['steps']} steps)")
    result = {"generation": generation, "parallel_generation": parallel, "steps_without_walkthrough": without,
              "steps_with_walkthrough": with_walk, "episode_steps_with_labels": episode,
              "walkthrough_slowdown": without["steps_per_s"] / with_walk["steps_per_s"]}
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(result, indent=2) + "\n")
    print(f"wrote {args.out}")
    return 0


