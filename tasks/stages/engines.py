"""Rollout engines that live across the stages and iterations run by one process, one per model role.

Building a vLLM engine takes from seconds to minutes, so a process keeps one engine per role (policy,
judge, environment) and hands it the new weights after each update (`load_weights`: in place, with a
rebuild fallback inside the engine) instead of building a new one every iteration. Before a training
stage the live engines are put to sleep, so they give their GPU memory to the trainer
(rollout.vllm.weight_sync = sleep_wake; a no-op otherwise). The transformers engine costs nothing
to build and holds nothing: it is built per call and never cached.

`rollout_tasks` and `judge_all` play tasks with the policy and judge steps with the judge through
these engines; every stage that samples from a model (rollout, judge, evaluation, warm-start, data
build) goes through them.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rla_core.config import Config
from rla_core.envs.base import get_environment
from rla_core.judge.judge import judge_trajectories
from rla_core.models.precision import for_sampling
from rla_core.rollout.base import RolloutEngine, SamplingParams, get_engine
from rla_core.rollout.runner import play
from rla_core.schemas import JudgedStep, Task, Trajectory
from tasks.common import load_model, progress_bar
from tasks.paths import RunPaths


@dataclass
class _Live:
    key: tuple
    engine: RolloutEngine
    model_dir: Path


_LIVE: dict[str, _Live] = {}


def _key(cfg: Config, run_root: Path, batch_size: int) -> tuple:
    # An engine serves one run (its tokenizer) with one engine config; anything else gets a new one.
    return (cfg.rollout.backend, cfg.rollout.vllm.model_dump_json(), batch_size, str(run_root.resolve()))


def engine_for(cfg: Config, run_root: Path, role: str, model_dir: Path, batch_size: int) -> tuple[RolloutEngine, Any]:
    """(engine sampling from the weights in `model_dir`, tokenizer) for `role`."""
    model, tokenizer = load_model(model_dir, cfg.models.torch_device())
    factory = get_engine(cfg.rollout.backend)
    if cfg.rollout.backend == "transformers":  # (vLLM has its own rollout.vllm.dtype)
        model = for_sampling(model, cfg.models.compute_dtype(role))
        attention = cfg.rollout.decode_attention_for(getattr(cfg.models, role).path is not None)
        return factory(model, tokenizer, batch_size=batch_size, sampler=cfg.rollout.sampler,
                       decode_attention=attention, drop_finished=cfg.rollout.drop_finished), tokenizer
    key, live = _key(cfg, run_root, batch_size), _LIVE.get(role)
    if live is not None and live.key == key:
        if Path(model_dir).resolve() != live.model_dir:
            live.engine.load_weights(model)
            live.model_dir = Path(model_dir).resolve()
        return live.engine, tokenizer
    if live is not None:
        close_engine(role)
    engine = factory(model, tokenizer, batch_size=batch_size, vllm=cfg.rollout.vllm, model_dir=model_dir)
    _LIVE[role] = _Live(key, engine, Path(model_dir).resolve())
    return engine, tokenizer


def sleep_engines() -> None:
    """Let every live engine release its accelerator memory (before a training update)."""
    for live in _LIVE.values():
        getattr(live.engine, "sleep", lambda: None)()


def close_engine(role: str) -> None:
    live = _LIVE.pop(role, None)
    if live is not None:
        getattr(live.engine, "close", lambda: None)()


def live_roles() -> dict[str, Path]:
    """role → the weights its live engine samples from (for tests and logs)."""
    return {role: live.model_dir for role, live in _LIVE.items()}


def rollout_tasks(paths: RunPaths, cfg: Config, tasks: list[Task], model_dir: Path, n: int,
                  temperature: float, seed: int, desc: str) -> tuple[list[Trajectory], dict[str, float]]:
    """N episodes of every task with the policy in `model_dir`, all generated together per turn."""
    engine, tokenizer = engine_for(cfg, paths.root, "policy", model_dir, cfg.rollout.batch_size)
    jobs = [(t, j) for t in tasks for j in range(n)]
    params = SamplingParams(cfg.rollout.max_new_tokens, temperature, seed)
    with progress_bar(len(jobs), desc) as bar:
        return play(engine, tokenizer, get_environment(cfg.environment.name), jobs, params,
                    cfg.rollout.max_steps, cfg.rollout.history_turns, progress=bar.update,
                    reuse_prefixes=cfg.rollout.prefix_reuse)


def judge_all(paths: RunPaths, cfg: Config, trajectories: list[Trajectory], model_dir: Path, seed: int,
              desc: str, m: int | None = None) -> tuple[list[JudgedStep], dict[str, float]]:
    """m (default judge.m) judge samples of every step of every trajectory."""
    m = m or cfg.judge.m
    engine, tokenizer = engine_for(cfg, paths.root, "judge", model_dir, cfg.judge.batch_size)
    params = SamplingParams(cfg.judge.max_new_tokens, cfg.judge.temperature, seed)
    total = sum(len(t.steps) for t in trajectories) * m
    with progress_bar(total, desc, unit="verdict") as bar:
        return judge_trajectories(engine, tokenizer, trajectories, m, params, cfg.rollout.history_turns,
                                  progress=bar.update, reuse_prefixes=cfg.rollout.prefix_reuse)
