"""Builds the rewrite callable the adaptation stage uses, from the configured rewriter.

The "llm" rewriter samples from the environment model: `models.environment.path` when set (a real
model), else the warm-started tiny one (models/bootstrap/environment), else the untrained tiny one built
at set-up. Both rewriters go through the environment family's validation and the same acceptance.
"""
from __future__ import annotations

import hashlib
import random
from pathlib import Path

from rla_core.adaptation.cycle import Rewrite
from rla_core.adaptation.rewriters import RewriteResult, get_rewriter
from rla_core.config import Config
from rla_core.models.chat import encode_prompts
from rla_core.envs.base import get_environment
from rla_core.rollout.base import SamplingParams
from rla_core.schemas import CriticFeedback, Direction, Task
from tasks.stages.engines import engine_for
from rla_core.models.pretrained import resolve
from tasks.paths import RunPaths
from tasks.checks.reserved import reserved_hashes


def environment_model_dir(cfg: Config, paths: RunPaths) -> Path:
    """The environment model the llm rewriter samples from: the configured path, else the warm-start
    when the bootstrap wrote one, else the untrained tiny model."""
    if cfg.models.environment.path:
        return Path(resolve(cfg.models.environment.path))
    warm = paths.bootstrap / "environment"
    return warm if (warm / "config.json").is_file() else paths.init_models / "environment"


def call_seed(run_seed: int, prompts: list[str]) -> int:
    """The sampling seed of one generate call: sha256 of (run seed, prompts), first 4 bytes. One fixed
    seed for every call would give near-identical prompts (other slots, same knobs) the same answer."""
    digest = hashlib.sha256("\0".join([str(run_seed), *prompts]).encode("utf-8")).digest()
    return int.from_bytes(digest[:4], "big")


def _llm_generate(cfg: Config, paths: RunPaths):
    env = cfg.environment
    engine, tokenizer = engine_for(cfg, paths.root, "environment", environment_model_dir(cfg, paths), batch_size=8)

    def generate(prompts: list[str]) -> list[str]:
        # No special tokens: the warm-start tokenises its prompts the same way.
        ids = encode_prompts(tokenizer, prompts, add_special_tokens=False)
        params = SamplingParams(env.rewrite_max_new_tokens, temperature=env.rewrite_temperature,
                                seed=call_seed(cfg.run.seed, prompts))
        return [g.text for g in engine.generate(ids, params)]

    return generate


def make_rewrite(cfg: Config, paths: RunPaths) -> Rewrite:
    """The configured rewriter as the adaptation cycle's callable; validation uses the episode horizon, and
    an attempt that plays a reserved task (seed/reserved.json: held-out, dev, and so the judge benchmarks
    drawn from them) is refused inside the rewriter's attempts."""
    env = cfg.environment
    generate = _llm_generate(cfg, paths) if env.rewriter == "llm" else None
    rewriter = get_rewriter(env.rewriter, generate=generate, prompt_mode=env.rewrite_prompt)
    family = get_environment(env.name)
    reserved = reserved_hashes(paths)

    def rewrite(task: Task, direction: Direction, feedback: CriticFeedback, rng: random.Random) -> RewriteResult:
        return rewriter.rewrite(task, direction, feedback, env.attempts, rng, family, horizon=cfg.rollout.max_steps,
                                reserved=reserved)

    return rewrite
