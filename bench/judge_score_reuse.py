"""What reusing a fixed judge's benchmark scores saves (tasks/settings/judge_scores.py), on a real config.

Seeds a scratch run of the config (task files and the judge benchmarks only: no warm start), then scores
the held-out judge benchmark with the judge in --judge three times: the first scoring (a miss: it generates
and fills the cache), the same scoring again (a hit: it copies), and, with --check, once more with
eval.reuse_judge_scores: false (generates again) to show that the hit returned exactly what generating
returns. Prints the seconds of each and their ratio; --out writes them as JSON.

    python bench/judge_score_reuse.py --config configs/smol_coding.yaml --check
    python bench/judge_score_reuse.py --config configs/quickstart.yaml --judge runs/quickstart/models/bootstrap/judge

--judge defaults to the config's models.judge.path (a pretrained model such as smollm2-135m-instruct).
Each evaluation of a run with a fixed judge scores two benchmarks (held-out and dev): the time saved per
evaluation is about twice the held-out miss minus hit here when the two benchmarks are the same size.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import shutil
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--config", action="append", required=True, help="config file(s), as for `rla train`")
    parser.add_argument("--set", dest="overrides", action="append", default=[], help="KEY=VALUE overrides")
    parser.add_argument("--judge", default=None, help="judge model folder (default: models.judge.path)")
    parser.add_argument("--check", action="store_true", help="also score with reuse off and compare")
    parser.add_argument("--workdir", default=None, help="scratch folder (default: a temporary one, removed)")
    parser.add_argument("--out", default=None, help="write the results as JSON here")
    args = parser.parse_args(argv)

    import torch

    from flows.cli import embedded_environment

    embedded_environment()
    from flows.train import prepare_run_dir
    from rla_core.config import load_config
    from rla_core.models.pretrained import resolve
    from tasks.common import eval_seed
    from tasks.paths import RunPaths, run_config
    from tasks.settings import setting_for
    from tasks.settings.coding import score_benchmark
    from tasks.settings.episodic import score_judge_benchmark
    from tasks.stages.setup import seed

    scratch = Path(args.workdir or tempfile.mkdtemp(prefix="rla-judge-reuse-"))
    cfg = load_config(args.config, [*args.overrides, f"run.output_dir={scratch}", "run.name=judge-reuse",
                                    "tracking.register_models=false"])
    judge = Path(args.judge or resolve(cfg.models.judge.path or ""))
    if not (judge / "config.json").is_file():
        parser.error(f"--judge {judge}: not a model folder (no config.json)")
    try:
        run_dir = prepare_run_dir(cfg)
        seed.run_here(run_dir)
        paths, cfg = RunPaths.of(run_dir), run_config(run_dir)
        coding = setting_for(cfg).name == "coding"
        benchmark = paths.coding_benchmark if coding else paths.judge_benchmark
        if not benchmark.is_file():
            parser.error("the config has no judge benchmark (eval.judge_benchmark)")

        def scoring(the_cfg, name: str) -> tuple[float, dict]:
            out = paths.root / name
            start = time.perf_counter()
            if coding:
                metrics = score_benchmark(paths, the_cfg, judge, benchmark, out, eval_seed(the_cfg))
            else:
                metrics = score_judge_benchmark(paths, the_cfg, judge, benchmark, out, eval_seed(the_cfg),
                                                the_cfg.eval.benchmark_m)
            return time.perf_counter() - start, metrics

        print(f"judge {judge}; benchmark {benchmark.name}; {torch.get_num_threads()} threads")
        miss, first = scoring(cfg, "first.out")
        hit, again = scoring(cfg, "again.out")
        result = {"judge": str(judge), "benchmark_file": benchmark.name, "threads": torch.get_num_threads(),
                  "miss_seconds": round(miss, 3), "hit_seconds": round(hit, 4), "ratio": round(miss / hit, 1),
                  "hit_equals_first": again == first and _digest(paths.root / "first.out")
                  == _digest(paths.root / "again.out"), "metrics": first}
        if args.check:
            fresh_cfg = cfg.model_copy(deep=True)
            fresh_cfg.eval.reuse_judge_scores = False
            seconds, fresh = scoring(fresh_cfg, "fresh.out")
            result.update({"fresh_seconds": round(seconds, 3), "fresh_equals_hit": fresh == again and
                           _digest(paths.root / "fresh.out") == _digest(paths.root / "again.out")})
        print(json.dumps(result, indent=2))
        if args.out:
            Path(args.out).write_text(json.dumps(result, indent=2) + "\n")
        ok = result["hit_equals_first"] and result.get("fresh_equals_hit", True)
        return 0 if ok else 1
    finally:
        if not args.workdir:
            shutil.rmtree(scratch, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
