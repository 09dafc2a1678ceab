"""One judge-shaped and one rollout-shaped decode call of the transformers engine, by sampler
(`rollout.sampler`: multinomial, inverse_cdf), alternating in one process.

- judge: 85 real judge prompts of a run's iteration (the middle of its length-sorted step prompts, as the
  engine's length-sorted chunks would hold them) × m = 3 samples, up to 12 tokens, with the judge that
  iteration started from; and the same call for 1 token, which is the prefill (and one draw).
- rollout: 256 prompts of 150-169 random tokens × 1 sample, 6 tokens, with the policy that iteration
  started from.

Prints seconds of each call (median of `--repeats`) and the tokens generated.

    python bench/sampler_chunks.py --run runs/quickstart [--iteration 2] [--repeats 5]
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch  # noqa: E402

from rla_core.judge.judge import step_prompts  # noqa: E402
from rla_core.rollout import hf_engine  # noqa: E402
from rla_core.rollout.base import SamplingParams  # noqa: E402
from rla_core.schemas import Trajectory  # noqa: E402
from tasks.common import load_model  # noqa: E402
from tasks.paths import RunPaths, run_config  # noqa: E402
from tasks.storage import read_records  # noqa: E402

SAMPLERS = ("multinomial", "inverse_cdf")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--run", required=True, help="a run folder whose iteration has rolled out")
    parser.add_argument("--iteration", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--out", default="bench/results/sampler_chunks.json")
    args = parser.parse_args()
    paths, cfg = RunPaths.of(args.run), run_config(args.run)
    trajectories = read_records(paths.it(args.iteration).trajectories, Trajectory)
    judge, tokenizer = load_model(paths.model_dir(args.iteration, "judge"))
    policy, _ = load_model(paths.model_dir(args.iteration, "policy"))
    judge.eval(), policy.eval()
    steps = sorted(tokenizer([p for t in trajectories for p in step_prompts(t, cfg.rollout.history_turns)])["input_ids"],
                   key=len)
    middle = len(steps) // 2
    judge_chunk = steps[middle:middle + 85]
    draw = torch.Generator().manual_seed(0)
    rollout_chunk = [torch.randint(3, policy.config.vocab_size, (150 + i % 20,), generator=draw).tolist()
                     for i in range(256)]
    calls = {
        "judge 85x3, 12 tokens": (judge, judge_chunk, SamplingParams(12, 1.0, 0, n=3)),
        "judge 85x3, 1 token (prefill)": (judge, judge_chunk, SamplingParams(1, 1.0, 0, n=3)),
        "rollout 256x1, 6 tokens": (policy, rollout_chunk, SamplingParams(6, 1.0, 0)),
    }
    times: dict[str, dict[str, list[float]]] = {name: {s: [] for s in SAMPLERS} for name in calls}
    tokens: dict[str, dict[str, int]] = {name: {} for name in calls}
    for repeat in range(args.repeats + 1):  # the first round warms up and is not counted
        for name, (model, prompts, params) in calls.items():
            for sampler in (SAMPLERS if repeat % 2 == 0 else SAMPLERS[::-1]):
                start = time.perf_counter()
                out = hf_engine.sample_batch(model, prompts, params, tokenizer.eos_token_id, tokenizer.pad_token_id,
                                             torch.Generator().manual_seed(0), sampler)
                if repeat:
                    times[name][sampler].append(time.perf_counter() - start)
                tokens[name][sampler] = sum(len(ids) for ids, _ in out)
    print(f"prompt tokens: judge chunk {len(judge_chunk[0])}-{len(judge_chunk[-1])}, rollout chunk 150-169\n")
    print("| call | multinomial s | inverse CDF s | old / new | tokens (old / new) |\n|---|---|---|---|---|")
    result = {"run": args.run, "iteration": args.iteration, "repeats": args.repeats, "calls": {}}
    for name in calls:
        old, new = (statistics.median(times[name][s]) for s in SAMPLERS)
        print(f"| {name} | {old:.3f} | {new:.3f} | {old / new:.2f}x | {tokens[name]['multinomial']} / "
              f"{tokens[name]['inverse_cdf']} |")
        result["calls"][name] = {"seconds": times[name], "tokens": tokens[name]}
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(result, indent=2))
    print(f"\nwrote {args.out}")


if __name__ == "__main__":
    main()
