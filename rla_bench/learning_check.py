"""The learning check on a real model: the household game on SmolLM2-135M-Instruct, the full loop (row d:
λ > 0, judge trained, tasks adapted) against outcome only (row a), one seed, one shared warm-start, and
held-out success and judge benchmark before/after for both rows.

    rla bench learning-check [--micro] [--out DIR] [--set KEY=VALUE ...]

On a GPU machine (infra/gpu_learning_check.sh) it runs configs/quickstart.yaml + configs/smol.yaml +
configs/gpu_check.yaml (the paper's proportions, sized for <= 10 minutes of one H200), with vLLM rollouts
and the DeepSpeed trainer when they are installed, else the transformers engine and the torch trainer on
the GPU. `--micro` shrinks everything to a few episodes on the CPU: the CI runs it, so the script has
worked end to end before it first meets a GPU.
"""
from __future__ import annotations

import argparse
import importlib.util
import json
import math
import time
from pathlib import Path

CONFIGS = ["configs/quickstart.yaml", "configs/smol.yaml", "configs/gpu_check.yaml"]
# A few episodes on the CPU: every real part once (SmolLM2's chat prompts, the judge's verdicts, the
# warm-start and one update of each model in each row), not a measurement.
MICRO = ["run.iterations=1", "environment.train_slots=8", "environment.heldout_file=null",
         "environment.heldout_tasks=1", "environment.reserved_files=[]", "eval.dev_file=null",
         "eval.dev_judge_benchmark=null", "eval.judge_benchmark=null", "eval.episodes_per_task=1",
         "eval.greedy_at_end=false",
         # the shortest household goals (examine with the lamp: 3 steps), so that a barely warm policy may win
         "environment.knobs={goal_type: examine, rooms: 1, distractors: 0, closed: 0, step_limit: 10}",
         "rollout.tasks_per_iteration=2", "rollout.n=2", "rollout.max_steps=4", "rollout.batch_size=64",
         "judge.m=2", "judge.max_new_tokens=12", "judge.batch_size=128",
         # six steps at a high lr teach the answer formats (\boxed{k}, a verdict in \boxed{±1}); fewer left
         # every answer unparsed and nothing to train on
         "bootstrap.demos=16", "bootstrap.policy_steps=6", "bootstrap.judge_steps=6", "bootstrap.batch_size=3",
         "bootstrap.lr=1e-3", "rollout.max_new_tokens=10",
         # the judge's labels on the warm-started policy's own steps: one fresh episode (smol.yaml plays 300).
         # Row (d) trains its judge only if the micro judge's two verdicts on some step differ: with 2 episodes,
         # under the tests' one thread, they never did (all +1), so the micro's judge is luck-bound either way
         "bootstrap.judge_policy_tasks=1",
         # and its verdicts sampled at temperature 1 (smol.yaml's 0.5 makes two verdicts on a step agree more often)
         "judge.temperature=1.0",
         "train.trainable=last_layers:2", "train.optimizer_steps=1", "train.micro_batch_size=8",
         # every task in band: the judge always has data, so row (d) updates it
         "environment.alpha_low=0.0", "environment.alpha_high=1.0", "models.device=cpu",
         # every SmolLM2 checkpoint is 538 MB, copied again by DVC (cache and remote) and the registry: 13 GB
         # for the two rows with them; both are tested with the tiny models elsewhere
         "versioning.dvc=false", "tracking.register_models=false"]


def backends(cuda: bool) -> list[str]:
    """vLLM rollouts and the DeepSpeed trainer on a GPU machine that has them; otherwise the defaults."""
    chosen = []
    if cuda and importlib.util.find_spec("vllm") is not None:
        chosen.append("rollout.backend=vllm")
    if cuda and importlib.util.find_spec("deepspeed") is not None:
        chosen.append("train.backend=deepspeed")
    return chosen


def report(results: list, rows: str) -> list[dict]:
    """One line per row: held-out success and judge benchmark balanced accuracy, before and after."""
    lines = []
    for result in results:
        if result.row not in rows:
            continue
        before, after = (result.success[0], result.success[-1]) if result.success else (math.nan, math.nan)
        bench = result.judge_bench
        lines.append({"row": result.row, "seed": result.seed, "iterations": result.iterations,
                      "heldout_before": before, "heldout_after": after,
                      "bench_before": bench[0] if bench else math.nan,
                      "bench_after": bench[-1] if bench else math.nan,
                      "episodes": result.episodes, "seconds": result.seconds})
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="rla bench learning-check", description=__doc__.split("\n\n")[0])
    parser.add_argument("--micro", action="store_true", help="a few episodes on the CPU (what the CI runs)")
    parser.add_argument("--out", default="runs", help="run.output_dir (default runs)")
    parser.add_argument("--name", default="learning-check", help="ablation folder under --out")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="more config overrides")
    args = parser.parse_args(argv)

    import torch

    from flows.ablation import ablation
    from tasks.reports.ablation import read_run

    overrides = [f"run.output_dir={args.out}"] + (MICRO if args.micro else backends(torch.cuda.is_available()))
    overrides += args.set
    start = time.perf_counter()
    result = ablation(CONFIGS, overrides, 1, "ad", args.name)
    root = Path(result["root"])
    runs = [read_run(path, path.name.split("-")[0], int(path.name.rsplit("seed", 1)[1]))
            for path in sorted(root.glob("*-seed*")) if path.is_dir()]
    lines = report(runs, "ad")
    print(f"{'row':4s} {'held-out before':>15s} {'after':>7s} {'judge bench before':>18s} {'after':>7s} "
          f"{'episodes':>8s} {'stage s':>8s}")
    for line in lines:
        print(f"{line['row']:4s} {line['heldout_before']:15.3f} {line['heldout_after']:7.3f} "
              f"{line['bench_before']:18.3f} {line['bench_after']:7.3f} {line['episodes']:8.0f} "
              f"{line['seconds']:8.1f}")
    wall = time.perf_counter() - start
    print(f"wall {wall:.0f} s; cuda {torch.cuda.is_available()}; overrides {' '.join(overrides)}")
    (root / "learning_check.json").write_text(json.dumps({"rows": lines, "wall_s": wall, "overrides": overrides},
                                                         indent=2) + "\n")
    return 0
