"""The stages that update the models (train_policy, train_judge) and evaluate them on held-out tasks."""
from __future__ import annotations

import os
from pathlib import Path

import torch

from rla_core.config import Config, TrainConfig
from rla_core.judge.benchmark import BenchmarkStep, score_benchmark
from rla_core.rollout.base import SamplingParams
from rla_core.rollout.runner import rollout_metrics
from rla_core.schemas import Task
from rla_core.training.base import get_trainer
from tasks.common import eval_seed, load_model, progress_bar, stage_seed
from tasks.engines import engine_for, sleep_engines
from tasks.iteration import judge_all, load_batch, rollout_tasks
from tasks.paths import RunPaths, run_config
from tasks.stage import stage
from tasks.storage import read_records, write_json, write_records


def train_role(paths: RunPaths, cfg: Config, k: int, out: Path, role: str, lr: float, enabled: bool) -> dict:
    """One model's update on its batch; the optimizer state comes from the previous update of that model.

    With train.backend = deepspeed and a torchrun/deepspeed launcher, every rank runs `train_rank`
    (same samples and seed on each; the backend splits each mini-batch over the ranks).
    """
    start_dir = paths.model_dir(k, role)
    samples = load_batch(paths, k, role)
    if not enabled or not samples:
        why = "disabled" if not enabled else "no samples"
        return {"model_dir": paths.rel(start_dir), "trained": False, "why": why, "metrics": {}}
    sleep_engines()  # live rollout engines hand their accelerator memory to the trainer
    ds = cfg.train.deepspeed
    if cfg.train.backend == "deepspeed" and ds.launcher != "inprocess":
        from rla_core.training.ds_launch import launch

        payload = {"run_dir": str(paths.root), "k": k, "out": str(out), "role": role, "lr": lr,
                   "train": cfg.train.model_dump(mode="json")}
        metrics = launch("tasks.training:train_rank", payload, ds, out / "launch")[0]
    else:
        metrics = _train_here(paths, cfg, k, out, role, lr, samples)
    return {"model_dir": paths.rel(out / "model"), "trained": True,
            "metrics": {f"{role}/{name}": value for name, value in metrics.items()}}


def _train_here(paths: RunPaths, cfg: Config, k: int, out: Path, role: str, lr: float,
                samples: list) -> dict[str, float]:
    start_dir = paths.model_dir(k, role)
    model, tokenizer = load_model(start_dir)
    state = start_dir / "optimizer.pt"
    trainer = get_trainer(cfg.train.backend)(model, cfg.train, lr, state if state.is_file() else None)
    reference = None
    if cfg.train.reference == "initial":
        reference, _ = load_model(paths.bootstrap / role)
    metrics = trainer.train(samples, reference, stage_seed(cfg, k, f"train_{role}"))
    trainer.save(out / "model", tokenizer=tokenizer)
    return metrics


def train_rank(payload: dict) -> dict[str, float]:
    """Launch target of one rank (rla_core.training.ds_launch): the same update as in-process."""
    ranks_here = int(os.environ.get("LOCAL_WORLD_SIZE", "1"))
    torch.set_num_threads(max(1, (os.cpu_count() or 1) // ranks_here))  # ranks must not oversubscribe cores
    paths = RunPaths.of(payload["run_dir"])
    cfg = run_config(payload["run_dir"])
    cfg = cfg.model_copy(update={"train": TrainConfig.model_validate(payload["train"])})
    k, role = payload["k"], payload["role"]
    return _train_here(paths, cfg, k, Path(payload["out"]), role, payload["lr"], load_batch(paths, k, role))


@stage()
def train_policy(paths: RunPaths, cfg: Config, k: int, out: Path) -> dict:
    return train_role(paths, cfg, k, out, "policy", cfg.train.lr, enabled=True)


@stage()
def train_judge(paths: RunPaths, cfg: Config, k: int, out: Path) -> dict:
    return train_role(paths, cfg, k, out, "judge", cfg.train.judge_lr, enabled=cfg.judge.train)


def evaluate_models(paths: RunPaths, cfg: Config, policy_dir: Path, judge_dir: Path, out: Path,
                    seed: int, final: bool = True) -> dict[str, float]:
    """Held-out success rate of a policy (eval.episodes_per_task episodes per task at eval.temperature),
    the judge on the fixed benchmark steps (`bench/*`) and, when `final` (the warm-start and the last
    evaluation): the greedy policy (`heldout_greedy/*`, with eval.greedy_at_end) and p₊/p₋ of the judge
    on the policy's held-out episodes (`heldout/judge_*`: a moving target, beside the benchmark)."""
    tasks = read_records(paths.heldout, Task)
    trajectories, _ = rollout_tasks(paths, cfg, tasks, policy_dir, cfg.eval.episodes_per_task,
                                    cfg.eval.temperature, seed, "held-out eval")
    write_records(out / "heldout_trajectories.jsonl", trajectories)
    metrics = {f"heldout/{n}": v for n, v in rollout_metrics(trajectories).items()}
    if final and cfg.eval.greedy_at_end and cfg.eval.temperature > 0:
        greedy, _ = rollout_tasks(paths, cfg, tasks, policy_dir, 1, 0.0, seed, "held-out eval (greedy)")
        metrics.update({f"heldout_greedy/{n}": v for n, v in rollout_metrics(greedy).items()})
    if final:
        _, judge_metrics = judge_all(paths, cfg, trajectories, judge_dir, seed, "held-out judge", cfg.eval.judge_m)
        metrics.update({f"heldout/judge_{n}": v for n, v in judge_metrics.items()})
    metrics["heldout/episodes"] = float(len(trajectories))
    if paths.judge_benchmark.is_file():
        metrics.update({f"bench/{n}": v for n, v in score_judge_benchmark(paths, cfg, judge_dir, out, seed).items()})
    write_json(out / "metrics.json", metrics)
    return metrics


def score_judge_benchmark(paths: RunPaths, cfg: Config, judge_dir: Path, out: Path, seed: int) -> dict[str, float]:
    """eval.benchmark_m verdicts of the judge in `judge_dir` on every step of the run's judge benchmark."""
    steps = read_records(paths.judge_benchmark, BenchmarkStep)
    engine, tokenizer = engine_for(cfg, paths.root, "judge", judge_dir, cfg.judge.batch_size)
    params = SamplingParams(cfg.judge.max_new_tokens, cfg.judge.temperature, seed)
    with progress_bar(len(steps) * cfg.eval.benchmark_m, "judge benchmark", unit="verdict") as bar:
        verdicts, metrics = score_benchmark(engine, tokenizer, steps, cfg.eval.benchmark_m, params,
                                            cfg.rollout.history_turns, progress=bar.update)
    write_json(out / "benchmark_verdicts.json", {s.step_id: v for s, v in zip(steps, verdicts)})
    return metrics


@stage(scope="run", folder="baseline")
def baseline(paths: RunPaths, cfg: Config, k: int, out: Path) -> dict:
    """Held-out metrics of the warm-started policy and judge (baseline/metrics.json)."""
    metrics = evaluate_models(paths, cfg, paths.bootstrap / "policy", paths.bootstrap / "judge", out, eval_seed(cfg))
    return {"metrics": metrics}


@stage(scope="run", folder="eval/iter_{k:04d}")
def evaluate_checkpoint(paths: RunPaths, cfg: Config, k: int, out: Path) -> dict:
    """Held-out metrics of the models after iteration k (0 = the warm-start), in eval/iter_k/ (`rla eval`)."""
    metrics = evaluate_models(paths, cfg, paths.model_dir(k + 1, "policy"), paths.model_dir(k + 1, "judge"), out,
                              eval_seed(cfg))
    return {"metrics": metrics}


@stage()
def evaluate(paths: RunPaths, cfg: Config, k: int, out: Path) -> dict:
    """Evaluate every `eval_every` iterations and at the last one; otherwise record a skip. The judge
    on the policy's own held-out episodes is scored at the last one only (the benchmark every time)."""
    every, last = cfg.run.eval_every, cfg.run.iterations
    if not (k == last or (every and k % every == 0)):
        return {"evaluated": False, "metrics": {}}
    metrics = evaluate_models(paths, cfg, paths.model_dir(k + 1, "policy"), paths.model_dir(k + 1, "judge"), out,
                              eval_seed(cfg), final=k == last)
    return {"evaluated": True, "metrics": metrics}
