"""Whole training iterations with `rollout.sampler = multinomial` (torch.multinomial, the engine's only
sampler until it got the key) against `inverse_cdf` (`rla_core.rollout.hf_engine.sample_rows`), in one process.

A scratch run of the config (default: the embedded defaults of rla_core/config.py; `--config
configs/quickstart.yaml` for the quickstart's) is prepared once, up to the iteration before the
timed one. Each arm then runs the timed iteration on its own copy of that run, with the sampler set in
the copy's config.yaml, in the order old, new, new, old, old, new, ... so that a drift of the machine's
speed hits both arms alike. Both arms start from the same models and tasks; their samples differ, so the
work they do (steps judged, policy samples) is reported beside the seconds.

    python bench/sampler_ab.py [--pairs 3] [--iteration 2] [--config C] [--set K=V] [--out F]
"""
from __future__ import annotations

import argparse
import json
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import yaml  # noqa: E402

from rla_bench.common import machine  # noqa: E402
from rla_bench.iteration import prepare_scratch, stage_seconds  # noqa: E402

# metrics that say how much work an arm did and how it went (substrings of the iteration's metric names)
WORK = ("judged_steps", "samples", "steps", "success", "balanced_acc", "p_pos", "p_neg")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", action="append", default=[], help="YAML override file (default: none, the embedded defaults)")
    parser.add_argument("--set", action="append", default=[], dest="overrides", metavar="KEY=VALUE")
    parser.add_argument("--iteration", type=int, default=2, help="the iteration timed")
    parser.add_argument("--pairs", type=int, default=3, help="old/new pairs")
    parser.add_argument("--workdir", default=None, help="scratch folder (default: a new temporary one)")
    parser.add_argument("--out", default="bench/results/sampler_ab.json")
    args = parser.parse_args()
    from flows.rl_iteration import rl_iteration

    arms = ("multinomial", "inverse_cdf")
    base = Path(args.workdir) if args.workdir else Path(tempfile.mkdtemp(prefix="rla-sampler-ab-"))
    prepared = base / "prepared"
    rows = []
    try:
        run_dir, _ = prepare_scratch(args.config, args.overrides, prepared, args.iteration)
        order = [name for pair in range(args.pairs)
                 for name in (("multinomial", "inverse_cdf") if pair % 2 == 0 else ("inverse_cdf", "multinomial"))]
        for index, name in enumerate(order):
            copy = base / f"{index}-{name}"
            shutil.copytree(prepared, copy, symlinks=True)
            copy_run = str(copy / Path(run_dir).name)
            config_file = Path(copy_run) / "config.yaml"
            tree = yaml.safe_load(config_file.read_text())
            tree["rollout"]["sampler"] = name
            config_file.write_text(yaml.safe_dump(tree, sort_keys=False))
            start = time.perf_counter()
            metrics = rl_iteration(copy_run, args.iteration)
            wall = time.perf_counter() - start
            row = {"arm": name, "wall_s": wall, "stages_s": stage_seconds(copy_run, args.iteration),
                   "work": {k: v for k, v in metrics.items() if any(w in k for w in WORK) and not k.startswith("time/")}}
            rows.append(row)
            print(f"[{index + 1}/{len(order)}] {name}: {wall:.1f} s  "
                  + "  ".join(f"{k} {v:.1f}" for k, v in row["stages_s"].items()), flush=True)
            shutil.rmtree(copy, ignore_errors=True)
    finally:
        shutil.rmtree(base, ignore_errors=True)
    summary = {}
    for name in arms:
        mine = [r for r in rows if r["arm"] == name]
        summary[name] = {"wall_s": [r["wall_s"] for r in mine], "median_wall_s": statistics.median(r["wall_s"] for r in mine),
                         "median_stage_s": {s: statistics.median(r["stages_s"][s] for r in mine) for s in mine[0]["stages_s"]}}
    old, new = summary["multinomial"], summary["inverse_cdf"]
    print("\n| stage | multinomial (median s) | inverse CDF (median s) | old / new |\n|---|---|---|---|")
    for stage in old["median_stage_s"]:
        a, b = old["median_stage_s"][stage], new["median_stage_s"][stage]
        print(f"| {stage} | {a:.2f} | {b:.2f} | {a / b:.2f}x |" if b > 0 else f"| {stage} | {a:.2f} | {b:.2f} | - |")
    print(f"| iteration wall | {old['median_wall_s']:.1f} | {new['median_wall_s']:.1f} | "
          f"{old['median_wall_s'] / new['median_wall_s']:.2f}x |")
    for r in rows:
        print(r["arm"], json.dumps(r["work"]))
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps({"machine": machine(), "iteration": args.iteration, "config": args.config,
                                          "overrides": args.overrides, "rows": rows, "summary": summary}, indent=2))
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
