"""The floor a TextWorld policy must clear: a policy that picks uniformly among the admissible commands.

It never gives an invalid answer, so it is the success a trained policy reaches only by reading nothing.
Plays every game of a task file (data/textworld/dev.jsonl, heldout.jsonl) `--episodes` times with the
run's horizon (rollout.max_steps of the config) and prints success with a 95 % Wilson interval.

    python bench/textworld_random_policy.py --tasks data/textworld/dev.jsonl --games runs/<run>/games \
        [--config configs/textworld.yaml] [--episodes 4] [--seed 0]

`--games` is a game cache (a run's games/); games it lacks are built there first.
"""
from __future__ import annotations

import argparse
import json
import random
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from rla_core.config import load_config  # noqa: E402
from rla_core.envs.textworld.family import TEXTWORLD  # noqa: E402
from tasks.game_eval import wilson  # noqa: E402


def play(specs: list[dict], episodes: int, horizon: int, rng: random.Random) -> dict:
    wins = played = steps = 0
    for spec in specs:
        for _ in range(episodes):
            episode = TEXTWORLD.make(spec)
            episode.reset()
            for _ in range(horizon):
                commands = episode.admissible_commands()
                if not commands:
                    break
                steps += 1
                if episode.step(rng.choice(commands)).done:
                    break
            wins += episode.won
            played += 1
            episode.close()
    low, high = wilson(wins, played)
    return {"episodes": played, "success": wins / played, "ci95": [low, high], "mean_steps": steps / played}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", required=True, help="a task file (JSON lines with a `spec` each)")
    parser.add_argument("--games", required=True, help="the game cache to play from (a run's games/)")
    parser.add_argument("--config", default="configs/textworld.yaml")
    parser.add_argument("--episodes", type=int, default=4)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    cfg = load_config([args.config])
    TEXTWORLD.configure(args.games, workers=1)
    specs = [json.loads(line)["spec"] for line in Path(args.tasks).read_text().splitlines() if line.strip()]
    result = play(specs, args.episodes, cfg.rollout.max_steps, random.Random(args.seed))
    result.update(tasks=args.tasks, games=len(specs), horizon=cfg.rollout.max_steps, seed=args.seed)
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
