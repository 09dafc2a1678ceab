"""Builds the rewrite callable the adaptation stage uses, from the configured rewriter.

The "llm" rewriter samples from the environment model (a local HF directory, or the tiny one built
at set-up); both rewriters go through the environment family's validation and the same acceptance.
"""
from __future__ import annotations

import random
from pathlib import Path

from rla_core.adaptation.cycle import Rewrite
from rla_core.adaptation.rewriters import RewriteResult, get_rewriter
from rla_core.config import Config
from rla_core.envs.base import get_environment
from rla_core.rollout.base import SamplingParams
from rla_core.schemas import CriticFeedback, Direction, Task
from tasks.engines import engine_for
from tasks.paths import RunPaths

LLM_MAX_NEW_TOKENS = 384


def _llm_generate(cfg: Config, paths: RunPaths):
    model_dir = Path(cfg.models.environment.path or paths.init_models / "environment")
    engine, tokenizer = engine_for(cfg, paths.root, "environment", model_dir, batch_size=8)

    def generate(prompts: list[str]) -> list[str]:
        ids = tokenizer(prompts)["input_ids"]
        params = SamplingParams(LLM_MAX_NEW_TOKENS, temperature=1.0, seed=cfg.run.seed)
        return [g.text for g in engine.generate(ids, params)]

    return generate


def make_rewrite(cfg: Config, paths: RunPaths) -> Rewrite:
    """The configured rewriter as the adaptation cycle's callable; validation uses the episode horizon."""
    env = cfg.environment
    generate = _llm_generate(cfg, paths) if env.rewriter == "llm" else None
    rewriter = get_rewriter(env.rewriter, generate=generate)
    family = get_environment(env.name)

    def rewrite(task: Task, direction: Direction, feedback: CriticFeedback, rng: random.Random) -> RewriteResult:
        return rewriter.rewrite(task, direction, feedback, env.attempts, rng, family, horizon=cfg.rollout.max_steps)

    return rewrite
