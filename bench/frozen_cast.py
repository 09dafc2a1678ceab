"""Frozen linear weights cast to bfloat16 once per update (`rla_core.models.precision.FrozenLinearsCast`)
against autocast casting them at every forward pass: time and exactness, on a run's real model and pairs.

Two parts, each run in alternating arms (off, on, off, on: this machine is shared and noisy):
- the supervised warm start (`tasks.settings.base.warm_start_role`, the run's role pairs, batch, lr, seed,
  trainable subset and dtype) for --steps steps;
- one policy-gradient update (`TorchTrainer.train`, the torch backend a stage uses) on --samples of those
  pairs as samples with advantages ±1, `train.reference: initial` against the run's initial weights.
Each arm's final weights and losses are compared with the first arm's: the claim is "identical to the bit".

    python bench/frozen_cast.py --run RUN [--role policy] [--steps 6] [--samples 32] [--out FILE]

RUN: a run folder with its seed and initial models (e.g. a SmolLM2 household run), models.dtype bfloat16.
"""
from __future__ import annotations

import argparse
import contextlib
import json
import platform
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def _weights(model) -> dict:
    return {name: p.detach().clone() for name, p in model.named_parameters()}


def _same(a: dict, b: dict) -> bool:
    import torch

    return a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


def _warm_start(paths, cfg, role, pairs, steps):
    from tasks.settings.base import warm_start_role

    began = time.perf_counter()
    model, _, metrics = warm_start_role(paths, cfg, role, pairs, steps, cfg.bootstrap.lr)
    return time.perf_counter() - began, _weights(model), metrics["loss_last"]


def _update(paths, cfg, role, samples, cast: bool):
    from rla_core.models.precision import FrozenLinearsCast, autocast
    from rla_core.training import trainable
    from rla_core.training.base import get_trainer
    from tasks.common import load_model

    device = cfg.models.torch_device()
    model, _ = load_model(paths.init_models / role, device)
    trainable.apply(model, cfg.train.trainable, seed=0, stop_gradient=cfg.train.stop_gradient)
    reference, _ = load_model(paths.init_models / role, device)
    trainer = get_trainer("torch")(model, cfg.train, cfg.train.lr)
    dtype = cfg.models.compute_dtype(role)
    began = time.perf_counter()
    with autocast(dtype, device), (FrozenLinearsCast(model, dtype) if cast else contextlib.nullcontext()):
        metrics = trainer.train(samples, reference, 0)
    return time.perf_counter() - began, _weights(model), metrics["loss"]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--run", required=True)
    parser.add_argument("--role", default="policy", choices=["policy", "judge"])
    parser.add_argument("--steps", type=int, default=6, help="warm-start steps per arm")
    parser.add_argument("--samples", type=int, default=32, help="samples of the policy-gradient update")
    parser.add_argument("--out", default=None, help="write the result as JSON here too")
    args = parser.parse_args(argv)

    import torch

    import tasks.settings.base as base
    from rla_core.config import load_config
    from rla_core.models.precision import FrozenLinearsCast
    from rla_core.schemas import TrainingSample
    from tasks.paths import RunPaths
    from tasks.common import bind_environment
    from tasks.settings import setting_for

    run = Path(args.run).resolve()
    paths = RunPaths.of(run)
    cfg = load_config([run / "config.yaml"])
    bind_environment(cfg, run)
    dtype = cfg.models.compute_dtype(args.role)
    if dtype != torch.bfloat16:
        raise SystemExit(f"{run}: models.dtype gives {dtype} here; the cast only acts in bfloat16")
    pairs = setting_for(cfg).warm_start_pairs(paths, cfg, args.role)
    _, tokenizer = base.load_model(paths.init_models / args.role, "cpu")
    encoded = base.encode_pairs(tokenizer, pairs[: args.samples])  # the chat form the warm start trains on
    samples = [TrainingSample(prompt_ids=list(p), response_ids=list(r), advantage=1.0 if i % 2 else -1.0,
                              task_id=f"bench-{i // 4}", sample_index=i % 4, step_index=0)
               for i, (p, r) in enumerate(encoded)]
    plain = base.FrozenLinearsCast
    off = lambda model, dtype: FrozenLinearsCast(model, torch.float32)  # noqa: E731 - autocast casts each pass
    rows, first = [], {}
    for arm in ("off", "on", "off", "on"):
        base.FrozenLinearsCast = off if arm == "off" else plain
        try:
            ws_seconds, ws_weights, ws_loss = _warm_start(paths, cfg, args.role, pairs, args.steps)
        finally:
            base.FrozenLinearsCast = plain
        up_seconds, up_weights, up_loss = _update(paths, cfg, args.role, samples, cast=arm == "on")
        first.setdefault("ws", ws_weights)
        first.setdefault("up", up_weights)
        row = {"arm": arm, "warm_start_seconds": ws_seconds, "warm_start_seconds_per_step": ws_seconds / args.steps,
               "warm_start_loss_last": ws_loss, "warm_start_identical": _same(first["ws"], ws_weights),
               "update_seconds": up_seconds, "update_loss": up_loss, "update_identical": _same(first["up"], up_weights)}
        rows.append(row)
        print(json.dumps(row), flush=True)
    mean = lambda arm, key: sum(r[key] for r in rows if r["arm"] == arm) / 2  # noqa: E731
    result = {"run": str(run), "role": args.role, "trainable": cfg.train.trainable, "steps": args.steps,
              "samples": len(samples), "cpu": platform.processor() or platform.machine(),
              "threads": torch.get_num_threads(), "rows": rows,
              "warm_start_ratio_on_over_off": mean("on", "warm_start_seconds") / mean("off", "warm_start_seconds"),
              "update_ratio_on_over_off": mean("on", "update_seconds") / mean("off", "update_seconds"),
              "identical": all(r["warm_start_identical"] and r["update_identical"] for r in rows)}
    text = json.dumps(result, indent=1)
    print(text)
    if args.out:
        Path(args.out).write_text(text + "\n")
    return 0 if result["identical"] else 1


if __name__ == "__main__":
    raise SystemExit(main())
