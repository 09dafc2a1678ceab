"""The floor a TextWorld policy must clear: a policy that picks uniformly among the admissible commands.

It never gives an invalid answer, so it is the success a trained policy reaches only by reading nothing.
Plays every game of a task file (data/textworld/dev.jsonl, heldout.jsonl) `--episodes` times with the
run's horizon (rollout.max_steps of the config) and prints success with a 95 % Wilson interval.

    rla bench random-policy --tasks data/textworld/dev.jsonl --games runs/<run>/games \
        [--config configs/textworld.yaml] [--episodes 4] [--seed 0]

`--games` is a game cache (a run's games/); games it lacks are built there first.
"""
from __future__ import annotations

import argparse
import json
import random

from rla_core.config import load_config
from rla_core.envs.textworld.family import TEXTWORLD
from rla_core.judge.benchmark import random_chooser, scripted_trajectory
from rla_core.stats import wilson
from tasks.settings.episodic import load_task_file


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="rla bench random-policy", description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", required=True, help="a task file (data/textworld/dev.jsonl, heldout.jsonl)")
    parser.add_argument("--games", required=True, help="the game cache to play from (a run's games/)")
    parser.add_argument("--config", default="configs/textworld.yaml")
    parser.add_argument("--episodes", type=int, default=4)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    horizon = load_config([args.config]).rollout.max_steps
    TEXTWORLD.configure(args.games, workers=1)
    tasks = load_task_file(args.tasks, TEXTWORLD, horizon)
    choose = random_chooser(random.Random(args.seed))
    played = [scripted_trajectory(TEXTWORLD, task, choose, horizon) for task in tasks for _ in range(args.episodes)]
    wins = sum(t.success for t in played)
    low, high = wilson(wins, len(played))
    print(json.dumps({"episodes": len(played), "success": wins / len(played), "ci95": [low, high],
                      "mean_steps": sum(len(t.steps) for t in played) / len(played), "tasks": args.tasks,
                      "games": len(tasks), "horizon": horizon, "seed": args.seed}, indent=2))
    return 0


