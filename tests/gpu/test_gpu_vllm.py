"""GPU check of the vLLM rollout backend against the transformers backend (the CUDA twin of
tests/rla_core/rollout/test_vllm_engine.py, sized up and timed).

Usage (on a CUDA machine with the gpu extra installed):
    python tests/gpu/test_gpu_vllm.py [--prompts 64] [--steps 16] [--dtype float32] [--tol 1e-3]

Checks, each printed as PASS/FAIL with numbers, exit status 1 if any fails:
  1. greedy ids of vLLM == greedy ids of the transformers backend (run on CPU in float32), and the
     largest |Δ log-prob| of the shared tokens is below --tol;
  2. after a perturbation of every weight, `load_weights` updates the running engine in place (same
     `llm` object, no rebuild) and check 1 holds on the new weights;
  3. a failing in-place update falls back to a rebuild, and check 1 holds afterwards;
  4. n>1 sampling returns n generations per prompt, grouped by prompt.
GPU kernels (TF32, fused attention) may flip a greedy choice where two logits are nearly tied; the
report names the first diverging prompt so such a case can be told from a real bug.
"""
from __future__ import annotations

import argparse
import json
import sys
import time

import pytest
import torch

pytestmark = [pytest.mark.gpu, pytest.mark.vllm]  # opt-in: pytest -m gpu (on a CUDA machine)

from rla_core.config import ModelSpec, VllmConfig
from rla_core.models.factory import build_model
from rla_core.models.tokenizer import train_tokenizer
from rla_core.rollout.base import SamplingParams, get_engine

TEXTS = ["go to fridge 1 and open it", "take apple 1 from countertop 1", "\\boxed{1} \\boxed{2} \\boxed{12}",
         "You arrive at cabinet 3. The cabinet 3 is closed.", "Your task is to: put a clean mug in cabinet 2."]


def _args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--prompts", type=int, default=64, help="prompts per generate call")
    parser.add_argument("--steps", type=int, default=16, help="max new tokens")
    parser.add_argument("--hidden", type=int, default=256, help="model hidden size (head_dim = hidden/heads)")
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--heads", type=int, default=4)
    parser.add_argument("--dtype", default="float32", help="vLLM dtype; the reference is always float32")
    parser.add_argument("--tol", type=float, default=1e-3, help="max |Δ log-prob| allowed")
    parser.add_argument("--gpu-memory-utilization", type=float, default=0.3)
    parser.add_argument("--weight-sync", default="load_weights", choices=["load_weights", "sleep_wake"])
    return parser.parse_args(argv)


def _setup(args: argparse.Namespace):
    tokenizer = train_tokenizer(TEXTS * 40, 400)
    spec = ModelSpec(hidden_size=args.hidden, num_layers=args.layers, num_heads=args.heads,
                     intermediate_size=4 * args.hidden, max_positions=256)
    model = build_model(spec, tokenizer, seed=0).eval()
    with torch.no_grad():  # a louder eos row makes some greedy continuations stop early
        model.get_input_embeddings().weight[tokenizer.eos_token_id] *= 6.0
    words = " ".join(TEXTS).split()
    prompts = [tokenizer(" ".join(words[i % 7: i % 7 + 2 + i % 23]))["input_ids"] for i in range(args.prompts)]
    return model, tokenizer, prompts


def _perturb(model, seed: int) -> None:
    with torch.no_grad(), torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        for parameter in model.parameters():
            parameter.add_(0.05 * torch.randn_like(parameter))


def compare_greedy(vllm_engine, hf_engine, prompts, steps: int, tol: float) -> dict:
    params = SamplingParams(steps, 0.0, seed=0)
    start = time.perf_counter()
    ours = vllm_engine.generate(prompts, params)
    seconds = time.perf_counter() - start
    theirs = hf_engine.generate(prompts, params)
    diverging = [i for i, (a, b) in enumerate(zip(ours, theirs)) if a.token_ids != b.token_ids]
    gap = max(abs(x - y) for a, b in zip(ours, theirs) for x, y in zip(a.logprobs, b.logprobs))
    return {"ok": not diverging and gap < tol, "diverging_prompts": diverging[:10], "n_diverging": len(diverging),
            "max_logprob_gap": gap, "vllm_generate_s": seconds,
            "eos_stopped": sum(len(g.token_ids) < steps for g in ours)}


def check_in_place(vllm_engine, hf_engine, model, prompts, args) -> dict:
    llm, rebuilds = vllm_engine.llm, vllm_engine.rebuilds
    _perturb(model, seed=1)
    start = time.perf_counter()
    vllm_engine.load_weights(model)
    seconds = time.perf_counter() - start
    result = compare_greedy(vllm_engine, hf_engine, prompts, args.steps, args.tol)
    same = vllm_engine.llm is llm and vllm_engine.rebuilds == rebuilds
    return {**result, "ok": result["ok"] and same, "in_place": same, "load_weights_s": seconds}


def check_rebuild(vllm_engine, hf_engine, model, prompts, args) -> dict:
    old = vllm_engine.llm

    def broken(*_, **__):
        raise RuntimeError("simulated reload failure")

    old.collective_rpc = broken
    _perturb(model, seed=2)
    start = time.perf_counter()
    vllm_engine.load_weights(model)
    seconds = time.perf_counter() - start
    result = compare_greedy(vllm_engine, hf_engine, prompts, args.steps, args.tol)
    rebuilt = vllm_engine.llm is not old and vllm_engine.rebuilds == 1
    return {**result, "ok": result["ok"] and rebuilt, "rebuilt": rebuilt, "rebuild_s": seconds}


def check_n(vllm_engine, prompts, steps: int) -> dict:
    greedy = vllm_engine.generate(prompts[:8], SamplingParams(steps, 0.0, n=3))
    single = vllm_engine.generate(prompts[:8], SamplingParams(steps, 0.0, n=1))
    grouped = len(greedy) == 24 and all(g.token_ids == single[i // 3].token_ids for i, g in enumerate(greedy))
    sampled = vllm_engine.generate(prompts[:8], SamplingParams(steps, 1.0, seed=3, n=4))
    distinct = len({tuple(g.token_ids) for g in sampled[:4]})
    return {"ok": grouped and len(sampled) == 32 and distinct > 1, "grouped": grouped, "distinct_of_4": distinct}


def main(argv: list[str] | None = None) -> int:
    args = _args(argv)
    if not torch.cuda.is_available():
        print("no CUDA device: this check is for GPUs (the CPU twin is tests/rla_core/rollout/test_vllm_engine.py)")
        return 2
    model, tokenizer, prompts = _setup(args)
    config = VllmConfig(dtype=args.dtype, gpu_memory_utilization=args.gpu_memory_utilization, max_model_len=256,
                        weight_sync=args.weight_sync)
    start = time.perf_counter()
    vllm_engine = get_engine("vllm")(model, tokenizer, batch_size=args.prompts, vllm=config)
    report: dict = {"build_s": time.perf_counter() - start, "device": torch.cuda.get_device_name(0)}
    hf_engine = get_engine("transformers")(model, tokenizer, batch_size=args.prompts)  # CPU reference
    try:
        report["greedy"] = compare_greedy(vllm_engine, hf_engine, prompts, args.steps, args.tol)
        report["load_weights"] = check_in_place(vllm_engine, hf_engine, model, prompts, args)
        report["n_samples"] = check_n(vllm_engine, prompts, args.steps)
        report["rebuild_fallback"] = check_rebuild(vllm_engine, hf_engine, model, prompts, args)
    finally:
        vllm_engine.close()
    checks = {k: v for k, v in report.items() if isinstance(v, dict)}
    for name, result in checks.items():
        print(f"{'PASS' if result['ok'] else 'FAIL'} {name}: {json.dumps(result)}")
    print(json.dumps({"build_s": report["build_s"], "device": report["device"]}))
    return 0 if all(r["ok"] for r in checks.values()) else 1


def test_vllm_matches_the_transformers_backend():
    """Every check of the module doc passes (exit status 0)."""
    assert main([]) == 0

if __name__ == "__main__":
    sys.exit(main())
