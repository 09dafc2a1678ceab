"""GPU check of the transformers rollout backend: CUDA greedy decoding equals CPU greedy decoding token
for token on a tiny model, and the batched decode rate on CUDA vs CPU (same prompts, same batch size).

    python tests/gpu/test_gpu_engine.py --out gpu_check_engine.json     # < 1 min on one GPU
Prints one JSON object: tokens_equal (fraction of prompts whose greedy ids match), max |Δ logprob|,
and episodes/s per device for greedy and sampled (n = 3) decoding.
"""
from __future__ import annotations

import argparse
import json
import random
import time
from pathlib import Path

import pytest
import torch

pytestmark = [pytest.mark.gpu]  # opt-in: pytest -m gpu (on a CUDA machine)

from rla_core.config import ModelSpec
from rla_core.models.factory import build_model
from rla_core.models.tokenizer import train_tokenizer
from rla_core.rollout.base import SamplingParams, get_engine


def timed_generate(engine, prompts, params, device: str) -> tuple[list, float]:
    if device == "cuda":
        torch.cuda.synchronize()
    start = time.perf_counter()
    out = engine.generate(prompts, params)
    if device == "cuda":
        torch.cuda.synchronize()
    return out, time.perf_counter() - start


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--prompts", type=int, default=512)
    parser.add_argument("--batch", type=int, default=256)
    parser.add_argument("--new-tokens", type=int, default=12)
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args(argv)
    assert torch.cuda.is_available(), "this check needs a CUDA device"
    tokenizer = train_tokenizer([f"go to shelf {i} take apple {i * 3} \\boxed{{{i % 9}}}" for i in range(400)],
                                vocab_size=800)
    model = build_model(ModelSpec(hidden_size=96, num_layers=3, num_heads=4, intermediate_size=256,
                                  max_positions=512), tokenizer, seed=0).eval()
    rng = random.Random(0)
    prompts = [[rng.randrange(2, len(tokenizer)) for _ in range(rng.randint(40, 200))] for _ in range(args.prompts)]
    report: dict = {"torch": torch.__version__, "device": torch.cuda.get_device_name(0), "setup": vars(args) | {"out": str(args.out)}}
    results = {}
    for device in ("cpu", "cuda"):
        engine = get_engine("transformers")(model.to(device), tokenizer, batch_size=args.batch)
        greedy, greedy_s = timed_generate(engine, prompts, SamplingParams(args.new_tokens, temperature=0.0), device)
        _, sampled_s = timed_generate(engine, prompts, SamplingParams(args.new_tokens, temperature=1.0, n=3), device)
        results[device] = greedy
        report[device] = {"greedy_episodes_per_s": len(prompts) / greedy_s,
                          "sampled_n3_generations_per_s": 3 * len(prompts) / sampled_s}
    pairs = list(zip(results["cpu"], results["cuda"], strict=True))
    report["tokens_equal"] = sum(a.token_ids == b.token_ids for a, b in pairs) / len(pairs)
    report["max_abs_logprob_diff"] = max(
        max((abs(x - y) for x, y in zip(a.logprobs, b.logprobs)), default=0.0) for a, b in pairs if a.token_ids == b.token_ids)
    text = json.dumps(report)
    if args.out is not None:
        args.out.write_text(json.dumps(report, indent=2))
    print(text)
    return report


def test_cuda_greedy_decoding_equals_cpu_greedy_decoding():
    """Greedy ids on CUDA equal those on CPU for (almost) every prompt; near-tied logits may flip a few
    (the 0.95 floor is a first guess, to be set from the first GPU run's report)."""
    report = main(["--prompts", "128", "--batch", "64"])
    assert report["tokens_equal"] >= 0.95, report

if __name__ == "__main__":
    main()
