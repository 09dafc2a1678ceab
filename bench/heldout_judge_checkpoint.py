"""Score one kept checkpoint of `rla bench judge-warmstart --keep` on the run's HELD-OUT judge benchmark, as
the run's baseline evaluation would score that judge (the evaluation's seed, eval.benchmark_m verdicts per
step). Only for a length already chosen on dev: the checkpoint at a step count equals the judge `bootstrap`
trains with bootstrap.judge_steps set to it (tests/flows/test_ablation.py), so this is the held-out number
that a run with that setting logs as bench/*, without re-running its warm start.

With --dev it scores the DEV judge benchmark instead, as `rla bench judge-warmstart` does (eval.dev_benchmark_m
verdicts per step): how a sampling setting (--set judge.temperature=0.5) is chosen for a kept checkpoint. On
held-out, --set only repeats a setting dev chose.

    python bench/heldout_judge_checkpoint.py --run RUN --step 240 [--form verdict] [--folder bench_judge_warmstart]
        [--dev] [--set KEY=VALUE ...] [--out FILE]
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
    parser.add_argument("--run", required=True)
    parser.add_argument("--step", type=int, required=True)
    parser.add_argument("--form", default="verdict", help="the checkpoint's form folder (the games: verdict)")
    parser.add_argument("--folder", default="bench_judge_warmstart",
                        help="the bench's folder in the run (one moved aside to keep it from the next bench)")
    parser.add_argument("--dev", action="store_true", help="score the dev judge benchmark instead of held-out")
    parser.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                        help="change the run's config for this scoring (e.g. judge.temperature=0.5)")
    parser.add_argument("--out", default=None, help="write the scores as JSON here too")
    args = parser.parse_args(argv)

    from rla_core.config import load_config
    from rla_core.errors import BadValue, MissingFile
    from tasks.common import eval_seed
    from tasks.paths import RunPaths
    from tasks.settings import setting_for
    from tasks.settings.episodic import score_judge_benchmark

    run = Path(args.run).resolve()
    folder = run / args.folder / args.form / f"step{args.step}"
    if not (folder / "config.json").is_file():
        raise MissingFile(f"{folder} is missing: run `rla bench judge-warmstart --run {run} --steps ... --keep` first")
    paths = RunPaths.of(run)
    cfg = load_config([run / "config.yaml"], [*args.overrides, "eval.reuse_judge_scores=false"])  # scratch: no cache
    if not setting_for(cfg).episodic:
        raise BadValue("the coding judge's held-out benchmark is scored by `rla run`'s evaluation; this is for the games")
    split = "dev" if args.dev else "held-out"
    benchmark, m = (paths.judge_benchmark_dev, cfg.eval.dev_benchmark_m) if args.dev else \
        (paths.judge_benchmark, cfg.eval.benchmark_m)
    began = time.perf_counter()
    verdicts = folder / ("dev_verdicts.json" if args.dev else "heldout_verdicts.json")
    scores = score_judge_benchmark(paths, cfg, folder, benchmark, verdicts, eval_seed(cfg), m,
                                   f"{split} judge benchmark (step {args.step})")
    result = {"run": str(run), "step": args.step, "folder": args.folder, "split": split, "m": m,
              "overrides": args.overrides, "temperature": cfg.judge.temperature,
              "seconds": time.perf_counter() - began, **scores}
    print(json.dumps(result, indent=1))
    if args.out:
        Path(args.out).write_text(json.dumps(result, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
