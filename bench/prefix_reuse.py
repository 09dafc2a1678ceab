"""Time the household/TextWorld rollout with and without `rollout.prefix_reuse`, on a run's DEV tasks (speed
only: nothing is chosen from these episodes), arms alternating, and say how far the episodes moved.

    python bench/prefix_reuse.py --run RUN --policy DIR [--tasks 16 --n 4 --arms off,on,off,on] [--out F]

Each arm plays the first --tasks dev tasks × --n episodes at the run's rollout temperature and seed, as the
rollout stage plays them; the arms with the same setting must give the same episodes (checked).
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def _actions(trajectories) -> list[tuple]:
    return [tuple(s.action for s in t.steps) for t in trajectories]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--run", required=True, help="run folder: its config, dev tasks and seed")
    parser.add_argument("--policy", required=True, help="policy checkpoint folder")
    parser.add_argument("--tasks", type=int, default=16, help="dev tasks played (default 16)")
    parser.add_argument("--n", type=int, default=4, help="episodes per task (default 4)")
    parser.add_argument("--arms", default="off,on,off,on", help="prefix_reuse per arm, in order")
    parser.add_argument("--out", default=None, help="JSON file for the result")
    args = parser.parse_args(argv)

    from rla_core.config import load_config
    from rla_core.errors import BadValue, MissingFile
    from rla_core.schemas import Task
    from tasks.common import bind_environment
    from tasks.paths import RunPaths
    from tasks.stages.engines import rollout_tasks
    from tasks.storage.files import read_records

    run, policy = Path(args.run).resolve(), Path(args.policy).resolve()
    paths = RunPaths.of(run)
    for need in (paths.config, paths.dev, policy / "config.json"):
        if not need.is_file():
            raise MissingFile(f"{need} is missing: give a run folder past its seed stage and a policy checkpoint")
    arms = args.arms.split(",")
    if any(a not in ("on", "off") for a in arms) or args.tasks <= 0 or args.n <= 0:
        raise BadValue("--arms is a comma list of on/off; --tasks and --n are positive")
    cfg = load_config([paths.config])
    bind_environment(cfg, run)
    tasks = read_records(paths.dev, Task)[:args.tasks]
    rows, episodes = [], {}
    for arm in arms:
        cfg.rollout.prefix_reuse = arm == "on"
        began = time.perf_counter()
        trajectories, metrics = rollout_tasks(paths, cfg, tasks, policy, args.n, cfg.rollout.temperature,
                                              cfg.run.seed, f"rollout, prefix_reuse {arm}")
        seconds = time.perf_counter() - began
        actions = _actions(trajectories)
        if arm in episodes and episodes[arm] != actions:
            raise RuntimeError(f"two arms with prefix_reuse {arm} played different episodes")
        episodes[arm] = actions
        turns = sum(len(t.steps) for t in trajectories)
        rows.append({"prefix_reuse": arm, "seconds": round(seconds, 1), "turns": turns,
                     "seconds_per_turn": round(seconds / max(turns, 1), 4),
                     **{k: round(v, 4) for k, v in metrics.items()}})
        print(json.dumps(rows[-1]), flush=True)
    result = {"run": str(run), "policy": str(policy), "tasks": args.tasks, "n": args.n, "arms": rows}
    if len(episodes) == 2:
        same = sum(a == b for a, b in zip(episodes["off"], episodes["on"]))
        result["episodes_identical"] = f"{same} of {len(episodes['off'])}"
        mean = {arm: sum(r["seconds"] for r in rows if r["prefix_reuse"] == arm) / arms.count(arm) for arm in episodes}
        result["ratio_on_off"] = round(mean["on"] / mean["off"], 3)
    print(json.dumps(result, indent=1))
    if args.out:
        Path(args.out).write_text(json.dumps(result, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
