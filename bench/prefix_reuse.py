"""Time the household/TextWorld rollout and judge stages with and without `rollout.prefix_reuse`, on a run's DEV
tasks (speed only: nothing is chosen from these episodes), arms alternating, and say how far the samples moved.

    python bench/prefix_reuse.py --run RUN --policy DIR [--judge DIR --m 3] [--tasks 16 --n 4 --arms off,on,off,on]
        [--out F]

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


def _ratio(rows: list[dict]) -> float:
    """Mean seconds of the arms with prefix_reuse on over the mean of those with it off."""
    mean = {arm: [r["seconds"] for r in rows if r["prefix_reuse"] == arm] for arm in ("on", "off")}
    return round((sum(mean["on"]) / len(mean["on"])) / (sum(mean["off"]) / len(mean["off"])), 3)


def _judge_arms(paths, cfg, trajectories, judge: Path, arms: list[str], m: int) -> dict:
    """The judge stage's m verdicts on every step of `trajectories`, once per arm (judge_all, the stage's
    own call); the arms with the same setting must give the same verdicts (checked)."""
    from tasks.stages.engines import judge_all

    rows, verdicts = [], {}
    for arm in arms:
        cfg.rollout.prefix_reuse = arm == "on"
        began = time.perf_counter()
        judged, metrics = judge_all(paths, cfg, trajectories, judge, cfg.run.seed, f"judge, prefix_reuse {arm}", m)
        seconds = time.perf_counter() - began
        said = [tuple(s.verdict for s in j.samples) for j in judged]
        if arm in verdicts and verdicts[arm] != said:
            raise RuntimeError(f"two judge arms with prefix_reuse {arm} gave different verdicts")
        verdicts[arm] = said
        rows.append({"prefix_reuse": arm, "seconds": round(seconds, 1), "steps": len(judged),
                     **{k: round(v, 4) for k, v in metrics.items()}})
        print(json.dumps(rows[-1]), flush=True)
    out = {"m": m, "arms": rows}
    if len(verdicts) == 2:
        pairs = [(a, b) for x, y in zip(verdicts["off"], verdicts["on"]) for a, b in zip(x, y)]
        out["verdicts_equal"] = f"{sum(a == b for a, b in pairs)} of {len(pairs)}"
        out["ratio_on_off"] = _ratio(rows)
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--run", required=True, help="run folder: its config, dev tasks and seed")
    parser.add_argument("--policy", required=True, help="policy checkpoint folder")
    parser.add_argument("--tasks", type=int, default=16, help="dev tasks played (default 16)")
    parser.add_argument("--n", type=int, default=4, help="episodes per task (default 4)")
    parser.add_argument("--arms", default="off,on,off,on", help="prefix_reuse per arm, in order")
    parser.add_argument("--rollout-arms", default=None, help="the rollout's arms, if not --arms (e.g. off: play once "
                        "for the judge arms)")
    parser.add_argument("--judge", default=None, help="judge checkpoint folder: also time the judge stage on the "
                        "first arm's episodes, with the same arms")
    parser.add_argument("--m", type=int, default=None, help="judge samples per step (default: the run's judge.m)")
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
    if any(a not in ("on", "off") for a in arms + (args.rollout_arms or "off").split(",")) or args.tasks <= 0 or args.n <= 0:
        raise BadValue("--arms is a comma list of on/off; --tasks and --n are positive")
    cfg = load_config([paths.config])
    bind_environment(cfg, run)
    tasks = read_records(paths.dev, Task)[:args.tasks]
    rows, episodes, first = [], {}, None
    rollout_arms = args.rollout_arms.split(",") if args.rollout_arms else arms
    for arm in rollout_arms:
        cfg.rollout.prefix_reuse = arm == "on"
        began = time.perf_counter()
        trajectories, metrics = rollout_tasks(paths, cfg, tasks, policy, args.n, cfg.rollout.temperature,
                                              cfg.run.seed, f"rollout, prefix_reuse {arm}")
        seconds = time.perf_counter() - began
        actions = _actions(trajectories)
        if arm in episodes and episodes[arm] != actions:
            raise RuntimeError(f"two arms with prefix_reuse {arm} played different episodes")
        episodes[arm] = actions
        first = first or trajectories
        turns = sum(len(t.steps) for t in trajectories)
        rows.append({"prefix_reuse": arm, "seconds": round(seconds, 1), "turns": turns,
                     "seconds_per_turn": round(seconds / max(turns, 1), 4),
                     **{k: round(v, 4) for k, v in metrics.items()}})
        print(json.dumps(rows[-1]), flush=True)
    result = {"run": str(run), "policy": str(policy), "tasks": args.tasks, "n": args.n, "arms": rows}
    if len(episodes) == 2:
        same = sum(a == b for a, b in zip(episodes["off"], episodes["on"]))
        result["episodes_identical"] = f"{same} of {len(episodes['off'])}"
        result["ratio_on_off"] = _ratio(rows)
    if args.judge:
        result["judge"] = _judge_arms(paths, cfg, first, Path(args.judge).resolve(), arms, args.m or cfg.judge.m)
    print(json.dumps(result, indent=1))
    if args.out:
        Path(args.out).write_text(json.dumps(result, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
