"""Does RL fit the games it trains on? Plays the seed slots' original (never rewritten) games with the
policy a run starts iteration 1 from (the warm-start) and the one after its last iteration.

Train success counts each slot's current version, which adaptation may have made easier; this scores
both policies on the same fixed games instead.

    rla bench slot-games --run runs/<run> [--episodes 4] [--seed 123]
"""
from __future__ import annotations

import argparse
import json
from pathlib import Path

from rla_core.adaptation.store import TaskStore
from rla_core.config import load_run_config
from rla_core.rollout.runner import rollout_metrics
from tasks.common import bind_environment
from tasks.stages.engines import rollout_tasks
from rla_core.stats import wilson
from tasks.paths import RunPaths


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="rla bench slot-games", description=__doc__.splitlines()[0])
    parser.add_argument("--run", required=True, help="a finished run folder")
    parser.add_argument("--episodes", type=int, default=4, help="sampled episodes per slot game")
    parser.add_argument("--seed", type=int, default=123)
    args = parser.parse_args(argv)
    run = Path(args.run)
    cfg = load_run_config(run / "config.yaml")
    paths = RunPaths.of(run)
    bind_environment(cfg, run)
    roots = [slot.root for slot in TaskStore.load(paths.seed_store).slots]
    report = {"run": str(run), "games": len(roots), "episodes_per_game": args.episodes, "seed": args.seed}
    for name, k in (("warm_start", 1), ("final", cfg.run.iterations + 1)):
        played, _ = rollout_tasks(paths, cfg, roots, paths.model_dir(k, "policy"), args.episodes, 1.0, args.seed,
                                  f"slot games ({name})")
        metrics = rollout_metrics(played)
        wins = sum(t.success for t in played)
        report[name] = {**{n: round(v, 4) for n, v in metrics.items()}, "ci95": [round(x, 4) for x in
                                                                               wilson(wins, len(played))]}
    print(json.dumps(report, indent=2))
    return 0


