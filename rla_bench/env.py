"""Benchmark of the household environment: env steps/s, oracle-label calls/s, generation specs/s.

Usage: rla bench env [--specs 50] [--episodes 20] [--knobs '{"rooms": 2}']
Episodes are played by a uniformly random policy over admissible commands (so they run to the
step limit and visit many off-plan states). Label calls use a fresh episode per trajectory; episodes of
one spec share its oracle cache (as `make` does in a rollout), which starts cold for each spec.
"""
from __future__ import annotations

import argparse
import json
import random
import time
from typing import Any

from rla_core.envs.base import EnvironmentFamily, get_environment
from rla_core.envs.household import HouseholdFamily

Trajectory = tuple[dict[str, Any], list[str]]


def _rate(count: int, seconds: float) -> str:
    return f"{count / seconds:,.0f}/s ({count} in {seconds:.2f} s)"


def bench_generate(env: EnvironmentFamily, knobs: dict[str, Any], count: int, rng: random.Random) -> list[dict]:
    start = time.perf_counter()
    specs = [env.generate(knobs, rng) for _ in range(count)]
    print("generate+validate:", _rate(len(specs), time.perf_counter() - start))
    plans = [env.difficulty(s) for s in specs]
    print(f"oracle plan length: mean {sum(plans) / len(plans):.2f}, min {min(plans):.0f}, max {max(plans):.0f}")
    return specs


def bench_steps(env: EnvironmentFamily, specs: list[dict], episodes: int, rng: random.Random) -> list[Trajectory]:
    """Random-policy episodes; each step = admissible_commands() + step()."""
    trajectories: list[Trajectory] = []
    steps = wins = 0
    widths: list[int] = []
    start = time.perf_counter()
    for spec in specs:
        for _ in range(episodes):
            episode = env.make(spec)
            episode.reset()
            commands, done = [], False
            while not done:
                admissible = episode.admissible_commands()
                widths.append(len(admissible))
                commands.append(rng.choice(admissible))
                outcome = episode.step(commands[-1])
                done, steps, wins = outcome.done, steps + 1, wins + outcome.won
            trajectories.append((spec, commands))
    print("env steps (make+reset+admissible+step):", _rate(steps, time.perf_counter() - start),
          f"| random-policy win rate {wins / len(trajectories):.2f}",
          f"| admissible mean {sum(widths) / len(widths):.1f}, max {max(widths)}")
    return trajectories


def bench_labels(env: HouseholdFamily, trajectories: list[Trajectory]) -> None:
    """is_progress on every step of every trajectory, a fresh episode per trajectory."""
    env.clear_cache()
    labels = good = 0
    start = time.perf_counter()
    for spec, commands in trajectories:
        episode = env.make(spec)
        episode.reset()
        for command in commands:
            good += episode.is_progress(command)
            labels += 1
            episode.step(command)
    print("is_progress (cache cold per spec, shared by its trajectories):", _rate(labels, time.perf_counter() - start),
          f"| good fraction {good / labels:.2f}")


def bench_plans(env: HouseholdFamily, specs: list[dict]) -> None:
    env.clear_cache()
    start = time.perf_counter()
    for spec in specs:
        episode = env.make(spec)
        episode.reset()
        episode.oracle_plan()
    print("make+reset+oracle_plan (cold):", _rate(len(specs), time.perf_counter() - start))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="rla bench env", description=__doc__.splitlines()[0])
    parser.add_argument("--specs", type=int, default=50, help="specs generated")
    parser.add_argument("--episodes", type=int, default=20, help="random-policy episodes per spec")
    parser.add_argument("--knobs", default="{}", help="difficulty knobs as JSON")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    env, rng = get_environment("household"), random.Random(args.seed)
    specs = bench_generate(env, json.loads(args.knobs), args.specs, rng)
    trajectories = bench_steps(env, specs, args.episodes, rng)
    bench_labels(env, trajectories)
    bench_plans(env, specs)
    return 0


