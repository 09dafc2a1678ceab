"""Play a run's HELD-OUT tasks with one policy checkpoint, as the run's evaluation plays them (the evaluation's
seed; eval.episodes_per_task episodes per task, or one when greedy as eval.greedy_at_end plays), at a
temperature of your choice: e.g. the greedy success of a warm start whose run ran without eval.greedy_at_end.
Only for a policy already chosen on dev; the episodes go to OUT_DIR/heldout_trajectories.jsonl (never into
the run folder).

    python bench/heldout_policy_checkpoint.py --run RUN --policy DIR [--temperature 0] --out-dir OUT_DIR
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--run", required=True, help="run folder: its config, held-out tasks and seed")
    parser.add_argument("--policy", default=None, help="policy checkpoint folder (default: RUN/models/bootstrap/policy)")
    parser.add_argument("--temperature", type=float, default=0.0, help="sampling temperature (default 0: greedy)")
    parser.add_argument("--out-dir", required=True, help="folder for heldout_trajectories.jsonl and scores.json")
    args = parser.parse_args(argv)

    from rla_core.config import load_config
    from rla_core.errors import BadValue, MissingFile
    from rla_core.rollout.runner import rollout_metrics
    from rla_core.schemas import Task
    from tasks.common import bind_environment, eval_seed
    from tasks.paths import RunPaths
    from tasks.settings import setting_for
    from tasks.stages.engines import rollout_tasks
    from tasks.storage.files import read_records, write_records

    run = Path(args.run).resolve()
    paths = RunPaths.of(run)
    policy = Path(args.policy).resolve() if args.policy else paths.bootstrap / "policy"
    for need in (paths.config, paths.heldout, policy / "config.json"):
        if not need.is_file():
            raise MissingFile(f"{need} is missing: give a run folder past its seed stage and a policy checkpoint")
    if args.temperature < 0:
        raise BadValue(f"--temperature must be >= 0, got {args.temperature}")
    out = Path(args.out_dir).resolve()
    if out == run or run in out.parents:
        raise BadValue(f"--out-dir {out} is inside the run folder; give a folder outside it")
    cfg = load_config([paths.config])
    if not setting_for(cfg).episodic:
        raise BadValue("the coding setting's held-out pass@1 is scored by `rla run`'s evaluation; "
                       "this script is for the games")
    # as every stage: TextWorld plays the run's games with the run's caps on the texts (without it, before
    # 2026-12-06: the family's 400-character observations where a run trained on 200, games built elsewhere)
    bind_environment(cfg, run)
    out.mkdir(parents=True, exist_ok=True)
    began = time.perf_counter()
    tasks = read_records(paths.heldout, Task)
    episodes = cfg.eval.episodes_per_task if args.temperature > 0 else 1
    trajectories, _ = rollout_tasks(paths, cfg, tasks, policy, episodes, args.temperature,
                                    eval_seed(cfg), f"held-out (temperature {args.temperature:g})")
    write_records(out / "heldout_trajectories.jsonl", trajectories)
    result = {"run": str(run), "policy": str(policy), "temperature": args.temperature,
              "seconds": time.perf_counter() - began,
              **{f"heldout/{n}": v for n, v in rollout_metrics(trajectories).items()}}
    (out / "scores.json").write_text(json.dumps(result, indent=1) + "\n")
    print(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
