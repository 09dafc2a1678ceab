"""The stages that prepare a run (run scope): seed task store + held-out set, models, supervised
warm-start. Their bodies are the run's setting's (tasks/settings/)."""
from __future__ import annotations

from pathlib import Path

from rla_core.config import Config
from tasks.paths import RunPaths
from tasks.settings import setting_for
from tasks.stage import stage
from tasks.summaries import SetupSummary


@stage(scope="run", folder="seed", summary=SetupSummary)
def seed(paths: RunPaths, cfg: Config, k: int, out: Path) -> dict:
    """The seed task store (train slots) and the held-out tasks, disjoint by content; held-out, dev and
    `environment.reserved_files` content recorded in seed/reserved.json (never a slot, a demonstration
    or, through a rewrite, a training task)."""
    return setting_for(cfg).seed(paths, cfg)


@stage(scope="run", folder="models/init", summary=SetupSummary)
def init_models(paths: RunPaths, cfg: Config, k: int, out: Path) -> dict:
    """The tokenizer and the tiny policy, judge and environment models (or the configured ones)."""
    return setting_for(cfg).init_models(paths, cfg)


@stage(scope="run", folder="models/bootstrap", summary=SetupSummary)
def bootstrap(paths: RunPaths, cfg: Config, k: int, out: Path) -> dict:
    """Supervised warm-start of the policy, the judge and (llm rewriter) the environment model."""
    return setting_for(cfg).bootstrap(paths, cfg)
