"""Judge checkpoints on episodes a policy played, against the oracle labels of their steps: p+, p-, balanced
accuracy. The judge benchmark holds fixed steps of a tiny policy, a random one and a slipping oracle; in the
loop the judge reads the run's own policy's steps, and this scores it on those (e.g. a policy checkpoint's DEV
episodes, the dev_trajectories.jsonl of `rla bench policy-warmstart --keep`). Every judge reads the same
steps with the evaluation's seed and eval.judge_m samples a step. Held-out episodes are refused: this is
for choosing on dev. `disagreeing_steps_rate` is the share of steps whose samples do not all give the same
verdict: in the loop only those steps train the judge (its advantages are a z-score over a step's m samples).

    python bench/judge_on_episodes.py --run RUN --episodes FILE --judge DIR [--judge DIR ...] [--set KEY=VALUE]
        [--out FILE]

--set changes the run's config for the scoring (e.g. judge.temperature=0.5, a setting to choose on dev).
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
    parser.add_argument("--run", required=True, help="run folder: its config and the evaluation's seed")
    parser.add_argument("--episodes", required=True, help="trajectories (JSON lines) with oracle-labelled steps")
    parser.add_argument("--judge", action="append", required=True, help="judge checkpoint folder (repeatable)")
    parser.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                        help="change the run's config for this scoring (e.g. judge.temperature=0.5)")
    parser.add_argument("--out", default=None, help="write the rows as JSON here too")
    args = parser.parse_args(argv)

    from rla_core.config import load_config
    from rla_core.errors import BadValue, MissingFile
    from rla_core.judge.judge import verdict_rates
    from rla_core.schemas import Task, Trajectory
    from tasks.common import bind_environment, eval_seed
    from tasks.paths import RunPaths
    from tasks.stages.engines import judge_all
    from tasks.storage.files import read_records

    run, episodes = Path(args.run).resolve(), Path(args.episodes).resolve()
    paths = RunPaths.of(run)
    judges = [Path(j).resolve() for j in args.judge]
    for need in (paths.config, paths.heldout, episodes, *(j / "config.json" for j in judges)):
        if not need.is_file():
            raise MissingFile(f"{need} is missing: give a run past its seed stage, an episodes file and judge folders")
    trajectories = read_records(episodes, Trajectory)
    heldout = {t.task_id for t in read_records(paths.heldout, Task)}
    if heldout & {t.task_id for t in trajectories}:
        raise BadValue(f"{episodes} holds episodes of the run's held-out tasks: score judges on dev episodes")
    if not any(s.oracle_good is not None for t in trajectories for s in t.steps):
        raise BadValue(f"{episodes}: no step carries an oracle label")
    cfg = load_config([paths.config], [*args.overrides, "eval.reuse_judge_scores=false"])
    bind_environment(cfg, run)
    rows = []
    for judge in judges:
        began = time.perf_counter()
        judged, _ = judge_all(paths, cfg, trajectories, judge, eval_seed(cfg), f"judge {judge.name}", cfg.eval.judge_m)
        pairs = [(j.oracle_good, s.verdict) for j in judged if j.oracle_good is not None for s in j.samples]
        # in the loop a step trains the judge only when its m verdicts differ (judge_samples skips the rest)
        disagreeing = sum(len({s.verdict for s in j.samples}) > 1 for j in judged)
        rows.append({"judge": str(judge), "episodes": len(trajectories), "verdicts": len(pairs),
                     "good_steps": sum(1 for j in judged if j.oracle_good), "seconds": time.perf_counter() - began,
                     "unparsed_rate": sum(v == 0 for _, v in pairs) / max(len(pairs), 1),
                     "disagreeing_steps_rate": disagreeing / max(len(judged), 1), **verdict_rates(pairs)})
    result = {"run": str(run), "episodes": str(episodes), "m": cfg.eval.judge_m, "overrides": args.overrides,
              "temperature": cfg.judge.temperature, "rows": rows}
    print(json.dumps(result, indent=1))
    if args.out:
        Path(args.out).write_text(json.dumps(result, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
