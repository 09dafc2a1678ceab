"""Score one kept checkpoint of `rla bench judge-warmstart --keep` on the run's HELD-OUT judge benchmark, as
the run's baseline evaluation would score that judge (the evaluation's seed, eval.benchmark_m verdicts per
step). Only for a length already chosen on dev: the checkpoint at a step count equals the judge `bootstrap`
trains with bootstrap.judge_steps set to it (tests/flows/test_ablation.py), so this is the held-out number
that a run with that setting logs as bench/*, without re-running its warm start.

    python bench/heldout_judge_checkpoint.py --run RUN --step 240 [--form verdict] [--out FILE]
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
    parser.add_argument("--out", default=None, help="write the scores as JSON here too")
    args = parser.parse_args(argv)

    from rla_core.config import load_config
    from rla_core.errors import BadValue, MissingFile
    from tasks.common import eval_seed
    from tasks.paths import RunPaths
    from tasks.settings import setting_for
    from tasks.settings.episodic import score_judge_benchmark

    run = Path(args.run).resolve()
    folder = run / "bench_judge_warmstart" / args.form / f"step{args.step}"
    if not (folder / "config.json").is_file():
        raise MissingFile(f"{folder} is missing: run `rla bench judge-warmstart --run {run} --steps ... --keep` first")
    paths = RunPaths.of(run)
    cfg = load_config([run / "config.yaml"], ["eval.reuse_judge_scores=false"])  # scratch: never cached
    if not setting_for(cfg).episodic:
        raise BadValue("the coding judge's held-out benchmark is scored by `rla run`'s evaluation; this is for the games")
    began = time.perf_counter()
    scores = score_judge_benchmark(paths, cfg, folder, paths.judge_benchmark, folder / "heldout_verdicts.json",
                                   eval_seed(cfg), cfg.eval.benchmark_m, f"held-out judge benchmark (step {args.step})")
    result = {"run": str(run), "step": args.step, "seconds": time.perf_counter() - began, **scores}
    print(json.dumps(result, indent=1))
    if args.out:
        Path(args.out).write_text(json.dumps(result, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
