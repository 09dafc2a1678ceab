"""Do the two samplers (`rollout.sampler`) draw from the same distribution on the real judge? Scores a run's
warm-started judge on the run's judge benchmark with each sampler and several sampling seeds, and compares
the mean verdict rates (p+, p-, balanced accuracy) with their standard errors over the seeds.

Same model, same prompts, only the draws differ: if the samplers agree in distribution, the differences
of the means are within about two standard errors.

    python bench/sampler_distribution.py --run runs/quickstart [--seeds 6]
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from rla_core.judge.benchmark import BenchmarkStep, score_benchmark  # noqa: E402
from rla_core.rollout.base import SamplingParams  # noqa: E402
from rla_core.rollout.hf_engine import TransformersEngine  # noqa: E402
from tasks.common import load_model  # noqa: E402
from tasks.paths import RunPaths, run_config  # noqa: E402
from tasks.storage import read_records  # noqa: E402

RATES = ("p_pos", "p_neg", "balanced_acc")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--run", required=True, help="a run folder with a warm-started judge")
    parser.add_argument("--seeds", type=int, default=6, help="sampling seeds per sampler")
    parser.add_argument("--out", default="bench/results/sampler_distribution.json")
    args = parser.parse_args()
    paths, cfg = RunPaths.of(args.run), run_config(args.run)
    steps = read_records(paths.judge_benchmark, BenchmarkStep)
    model, tokenizer = load_model(paths.bootstrap / "judge")
    rates: dict[str, dict[str, list[float]]] = {}
    for sampler in ("multinomial", "inverse_cdf"):
        engine = TransformersEngine(model, tokenizer, batch_size=cfg.judge.batch_size, sampler=sampler)
        rates[sampler] = {name: [] for name in RATES}
        for seed in range(args.seeds):
            params = SamplingParams(cfg.judge.max_new_tokens, cfg.judge.temperature, 1000 + seed)
            _, metrics = score_benchmark(engine, tokenizer, steps, cfg.eval.benchmark_m, params, cfg.rollout.history_turns)
            for name in RATES:
                rates[sampler][name].append(metrics[name])
            print(f"{sampler} seed {1000 + seed}: " + ", ".join(f"{n} {metrics[n]:.4f}" for n in RATES), flush=True)
    print(f"\n{len(steps)} benchmark steps x m = {cfg.eval.benchmark_m}, {args.seeds} seeds per sampler; mean ± SE\n")
    print("| rate | multinomial | inverse CDF | difference (new - old) |\n|---|---|---|---|")
    summary = {}
    for name in RATES:
        old, new = rates["multinomial"][name], rates["inverse_cdf"][name]
        se = [statistics.stdev(v) / len(v) ** 0.5 for v in (old, new)]
        diff, diff_se = statistics.mean(new) - statistics.mean(old), (se[0] ** 2 + se[1] ** 2) ** 0.5
        summary[name] = {"multinomial": old, "inverse_cdf": new, "difference": diff, "difference_se": diff_se}
        print(f"| {name} | {statistics.mean(old):.4f} ± {se[0]:.4f} | {statistics.mean(new):.4f} ± {se[1]:.4f} | "
              f"{diff:+.4f} ± {diff_se:.4f} |")
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps({"run": args.run, "steps": len(steps), "m": cfg.eval.benchmark_m,
                                          "seeds": args.seeds, "rates": summary}, indent=2))
    print(f"\nwrote {args.out}")


if __name__ == "__main__":
    main()
