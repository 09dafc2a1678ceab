"""GPU check of the "deepspeed" trainer backend against the "torch" backend (one CUDA device, one rank).

Runs 5 optimizer steps of the same update on the same model/data/seed with: torch (fp32),
DeepSpeed ZeRO-2 and ZeRO-3 in fp32 and in bf16. Prints one JSON object (last line of stdout,
also written to --out): per-run step losses, max relative loss diff vs torch, mean step time
(after the first step), peak CUDA memory, plus versions. fp32 runs should match torch within 1e-4
relative; bf16 runs are reported, not asserted (bf16 weights change the numbers by ~1e-2).

    python tests/gpu/test_gpu_deepspeed.py --out gpu_check_deepspeed.json     # ~1–2 min on one GPU
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

from rla_core.config import DeepSpeedConfig, ModelSpec, TrainConfig
from rla_core.models.factory import build_model
from rla_core.models.tokenizer import train_tokenizer
from rla_core.schemas import TrainingSample
from rla_core.training import get_trainer

RUNS = [("torch", None, False), ("zero2_fp32", 2, False), ("zero3_fp32", 3, False),
        ("zero2_bf16", 2, True), ("zero3_bf16", 3, True)]


def make_samples(count: int, vocab: int, seed: int) -> list[TrainingSample]:
    rng = random.Random(seed)
    out = []
    for index in range(count):
        prompt = [rng.randrange(3, vocab) for _ in range(rng.randint(16, 96))]
        response = [rng.randrange(3, vocab) for _ in range(rng.randint(8, 64))]
        out.append(TrainingSample(prompt_ids=prompt, response_ids=response, advantage=rng.uniform(-1.5, 1.5),
                                  task_id=f"t{index}", sample_index=index, step_index=0))
    return out


def run_one(name: str, stage: int | None, bf16: bool, tokenizer, spec: ModelSpec, samples, args) -> dict:
    ds = DeepSpeedConfig(zero_stage=stage if stage is not None else 0, bf16=bf16, master_port=args.port)
    cfg = TrainConfig(minibatch_size=args.minibatch, micro_batch_size=args.micro, max_optimizer_steps=args.steps,
                      grad_clip=1.0, deepspeed=ds)
    model = build_model(spec, tokenizer, seed=0)
    torch.cuda.empty_cache()
    torch.cuda.reset_peak_memory_stats()
    if stage is None:
        trainer = get_trainer("torch")(model.to("cuda"), cfg, args.lr)
    else:
        trainer = get_trainer("deepspeed")(model, cfg, args.lr)
    trainer.model.eval()
    batches = trainer.minibatches(samples, 0)
    scored = iter(trainer.score([s for batch in batches for s in batch]))
    losses, grad_norms, times = [], [], []
    for batch in batches:
        items = [next(scored) for _ in batch]
        torch.cuda.synchronize()
        start = time.perf_counter()
        metrics = trainer.optimizer_step(items)
        torch.cuda.synchronize()
        times.append(time.perf_counter() - start)
        losses.append(metrics["loss"])
        grad_norms.append(metrics["grad_norm"])
    result = {"losses": losses, "grad_norms": grad_norms,
              "step_s_mean_after_first": sum(times[1:]) / max(1, len(times) - 1), "step_s_first": times[0],
              "peak_mem_gib": torch.cuda.max_memory_allocated() / 2**30}
    del trainer, model
    return result


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hidden", type=int, default=256)
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--samples", type=int, default=80)
    parser.add_argument("--minibatch", type=int, default=16)
    parser.add_argument("--micro", type=int, default=8)
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--lr", type=float, default=1e-3)
    parser.add_argument("--port", type=int, default=29517)
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args(argv)
    assert torch.cuda.is_available(), "this check needs a CUDA device"
    import deepspeed
    import transformers

    tokenizer = train_tokenizer([f"take apple {i} from shelf {i * 7} \\boxed{{{i}}}" for i in range(400)],
                                vocab_size=1000)
    spec = ModelSpec(hidden_size=args.hidden, num_layers=args.layers, num_heads=max(1, args.hidden // 64),
                     intermediate_size=4 * args.hidden, max_positions=256)
    samples = make_samples(args.samples, len(tokenizer), seed=0)
    report: dict = {"versions": {"torch": torch.__version__, "deepspeed": deepspeed.__version__,
                                 "transformers": transformers.__version__,
                                 "device": torch.cuda.get_device_name(0)},
                    "setup": vars(args) | {"out": str(args.out)}, "runs": {}}
    for name, stage, bf16 in RUNS:
        started = time.perf_counter()
        try:
            report["runs"][name] = run_one(name, stage, bf16, tokenizer, spec, samples, args)
        except Exception as err:  # report and continue: one failing mode must not hide the others
            report["runs"][name] = {"error": f"{type(err).__name__}: {err}"}
        report["runs"][name]["wall_s"] = time.perf_counter() - started
    reference = report["runs"]["torch"].get("losses")
    for name, run in report["runs"].items():
        if reference and "losses" in run:
            pairs = list(zip(run["losses"], reference))
            run["max_rel_diff_vs_torch"] = max(abs(a - b) / max(abs(b), 1e-8) for a, b in pairs)
            run["max_abs_diff_vs_torch"] = max(abs(a - b) for a, b in pairs)
    report["fp32_parity_ok"] = all(report["runs"][n].get("max_rel_diff_vs_torch", 1.0) <= 1e-4
                                   for n in ("zero2_fp32", "zero3_fp32"))
    text = json.dumps(report)
    if args.out is not None:
        args.out.write_text(json.dumps(report, indent=2))
    print(text)
    return report


def test_deepspeed_fp32_matches_the_torch_backend():
    """ZeRO-2 and ZeRO-3 in fp32 give the torch backend's losses within 1e-4 relative."""
    report = main([])
    assert report["fp32_parity_ok"], report["runs"]

if __name__ == "__main__":
    main()
