"""The adapt stage's rewrite callable (tasks/stages/rewriting.py): which environment model the llm rewriter
samples from, and that the configured prompt mode reaches it."""
from __future__ import annotations

import json
import random

from rla_core.adaptation.rewriters import build_rewrite_prompt
from rla_core.config import load_config
from rla_core.envs.household import HOUSEHOLD
from rla_core.schemas import CriticFeedback, Task
from tasks.stages import rewriting
from tasks.paths import RunPaths
from tasks.storage.files import write_json
from tasks.settings.base import warm_starts_environment


def test_environment_model_is_the_path_else_the_warm_start_else_init(tmp_path):
    paths = RunPaths.of(tmp_path)
    cfg = load_config(overrides=["environment.rewriter=llm"])
    assert rewriting.environment_model_dir(cfg, paths) == paths.init_models / "environment"
    (paths.bootstrap / "environment").mkdir(parents=True)
    assert rewriting.environment_model_dir(cfg, paths) == paths.init_models / "environment"  # no model in it
    (paths.bootstrap / "environment" / "config.json").write_text("{}")
    assert rewriting.environment_model_dir(cfg, paths) == paths.bootstrap / "environment"
    real = load_config(overrides=["environment.rewriter=llm", "models.environment.path=/models/real"])
    assert str(rewriting.environment_model_dir(real, paths)) == "/models/real"


def test_only_the_llm_rewriters_tiny_model_is_warm_started():
    assert not warm_starts_environment(load_config())
    assert warm_starts_environment(load_config(overrides=["environment.rewriter=llm"]))
    for extra in ("models.environment.path=/models/real", "bootstrap.environment_steps=0",
                  "bootstrap.environment_tasks=0"):
        assert not warm_starts_environment(load_config(overrides=["environment.rewriter=llm", extra]))


def test_make_rewrite_uses_the_configured_prompt_mode(tmp_path, monkeypatch):
    seen: list[str] = []

    def fake_llm_generate(cfg, paths):
        return lambda prompts: seen.extend(prompts) or ["nothing"] * len(prompts)

    monkeypatch.setattr(rewriting, "_llm_generate", fake_llm_generate)
    write_json(RunPaths.of(tmp_path).reserved, [])
    spec = HOUSEHOLD.generate({"goal_type": "put"}, random.Random(0), 12)
    task = Task(task_id="s-v0", slot_id="s", spec=spec, difficulty=HOUSEHOLD.difficulty(spec))
    for mode in ("compact", "full"):
        cfg = load_config(overrides=["environment.rewriter=llm", f"environment.rewrite_prompt={mode}"])
        seen.clear()
        candidate, log = rewriting.make_rewrite(cfg, RunPaths.of(tmp_path))(task, "harder", CriticFeedback(),
                                                                           random.Random(0))
        assert candidate is None and len(log) == cfg.environment.attempts
        assert seen[0] == build_rewrite_prompt(task, "harder", CriticFeedback(), HOUSEHOLD, mode)


def test_llm_rewrite_of_reserved_content_is_refused(tmp_path, monkeypatch):
    """The run's seed/reserved.json reaches the real rewriter: an answer that plays a reserved game is a
    refused attempt, and the same answer is the candidate when that game is not reserved."""
    reserved_spec = HOUSEHOLD.generate({"goal_type": "put"}, random.Random(5), 12)
    monkeypatch.setattr(rewriting, "_llm_generate",
                        lambda cfg, paths: lambda prompts: [json.dumps(reserved_spec)] * len(prompts))
    spec = HOUSEHOLD.generate({"goal_type": "put"}, random.Random(0), 12)
    task = Task(task_id="s-v0", slot_id="s", spec=spec, difficulty=HOUSEHOLD.difficulty(spec))
    cfg = load_config(overrides=["environment.rewriter=llm", "environment.rewrite_prompt=full"])
    paths = RunPaths.of(tmp_path)
    write_json(paths.reserved, [HOUSEHOLD.content_hash(reserved_spec)])
    candidate, log = rewriting.make_rewrite(cfg, paths)(task, "harder", CriticFeedback(), random.Random(0))
    assert candidate is None and [a.reserved for a in log] == [True] * cfg.environment.attempts
    write_json(paths.reserved, [])
    candidate, log = rewriting.make_rewrite(cfg, paths)(task, "harder", CriticFeedback(), random.Random(0))
    assert candidate is not None and HOUSEHOLD.content_hash(candidate.spec) == HOUSEHOLD.content_hash(reserved_spec)


def test_each_generate_call_has_its_own_deterministic_seed():
    seed = rewriting.call_seed(0, ["a prompt"] * 3)
    assert seed == rewriting.call_seed(0, ["a prompt"] * 3) and 0 <= seed < 2**32
    assert len({seed, rewriting.call_seed(1, ["a prompt"] * 3), rewriting.call_seed(0, ["another"] * 3)}) == 3
