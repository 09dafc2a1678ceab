"""Engines live across stages of one process: reused per role, fed new weights, closed when replaced."""
from __future__ import annotations

import pytest
import torch

from rla_core.config import Config, ModelSpec
from rla_core.models.factory import build_model, save_pretrained
from rla_core.models.tokenizer import train_tokenizer
from rla_core.rollout.base import register_engine
from tasks.stages import engines

EVENTS: list[tuple[str, int]] = []


class CountingEngine:
    """Records what the cache does to it; samples nothing."""

    def __init__(self, model, number: int) -> None:
        self.model, self.number = model, number

    def load_weights(self, model) -> None:
        self.model = model
        EVENTS.append(("load_weights", self.number))

    def sleep(self) -> None:
        EVENTS.append(("sleep", self.number))

    def close(self) -> None:
        EVENTS.append(("close", self.number))


@register_engine("counting-test")
def _make(model, tokenizer, batch_size=64, **_):
    number = sum(event == "build" for event, _ in EVENTS)
    EVENTS.append(("build", number))
    return CountingEngine(model, number)


@pytest.fixture()
def model_dirs(tmp_path):
    tokenizer = train_tokenizer(["go to the desk \\boxed{1}"] * 20, vocab_size=300)
    spec = ModelSpec(hidden_size=16, num_layers=1, num_heads=2, intermediate_size=32, max_positions=64)
    dirs = []
    for seed in (0, 1):
        path = tmp_path / f"model{seed}"
        save_pretrained(build_model(spec, tokenizer, seed=seed), tokenizer, path)
        dirs.append(path)
    EVENTS.clear()
    yield dirs
    for role in list(engines.live_roles()):
        engines.close_engine(role)


def _first_weight(engine) -> torch.Tensor:
    return next(engine.model.parameters()).detach().clone()


def test_a_role_keeps_its_engine_and_gets_new_weights(model_dirs, tmp_path):
    cfg = Config().model_copy(update={"rollout": Config().rollout.model_copy(update={"backend": "counting-test"})})
    first, _ = engines.engine_for(cfg, tmp_path, "policy", model_dirs[0], 8)
    again, _ = engines.engine_for(cfg, tmp_path, "policy", model_dirs[0], 8)
    assert again is first and EVENTS == [("build", 0)]  # same weights: nothing to do
    before = _first_weight(first)
    updated, _ = engines.engine_for(cfg, tmp_path, "policy", model_dirs[1], 8)
    assert updated is first and EVENTS[-1] == ("load_weights", 0)
    assert not torch.equal(before, _first_weight(updated))
    engines.engine_for(cfg, tmp_path, "judge", model_dirs[0], 8)
    assert set(engines.live_roles()) == {"policy", "judge"}
    engines.sleep_engines()
    assert sorted(e for e in EVENTS if e[0] == "sleep") == [("sleep", 0), ("sleep", 1)]


def test_another_run_or_engine_config_replaces_and_closes_the_engine(model_dirs, tmp_path):
    cfg = Config().model_copy(update={"rollout": Config().rollout.model_copy(update={"backend": "counting-test"})})
    first, _ = engines.engine_for(cfg, tmp_path / "run-a", "policy", model_dirs[0], 8)
    second, _ = engines.engine_for(cfg, tmp_path / "run-b", "policy", model_dirs[0], 8)
    assert second is not first and ("close", 0) in EVENTS
    third, _ = engines.engine_for(cfg, tmp_path / "run-b", "policy", model_dirs[0], 16)
    assert third is not second and ("close", 1) in EVENTS
    for role in list(engines.live_roles()):
        engines.close_engine(role)
    assert engines.live_roles() == {} and ("close", 2) in EVENTS


def test_transformers_engines_are_built_per_call_and_never_kept(model_dirs, tmp_path):
    cfg = Config()
    first, _ = engines.engine_for(cfg, tmp_path, "policy", model_dirs[0], 8)
    second, _ = engines.engine_for(cfg, tmp_path, "policy", model_dirs[0], 8)
    assert first is not second and engines.live_roles() == {}


def test_the_transformers_engine_samples_with_the_configured_sampler(model_dirs, tmp_path):
    for sampler in ("multinomial", "inverse_cdf"):
        cfg = Config().model_copy(update={"rollout": Config().rollout.model_copy(update={"sampler": sampler})})
        engine, _ = engines.engine_for(cfg, tmp_path, "policy", model_dirs[0], batch_size=8)
        assert engine.sampler == sampler


def test_a_run_folder_written_before_the_sampler_key_samples_with_multinomial(model_dirs, tmp_path):
    """The seam old run folder → run_config → engine_for: the stages of a run written before
    `rollout.sampler` existed sample as that run did."""
    import yaml

    from rla_core.config import config_to_yaml
    from tasks.paths import run_config

    run = tmp_path / "old-run"
    run.mkdir()
    written = yaml.safe_load(config_to_yaml(Config()))
    del written["rollout"]["sampler"]
    (run / "config.yaml").write_text(yaml.safe_dump(written))
    engine, _ = engines.engine_for(run_config(run), run, "judge", model_dirs[0], batch_size=8)
    assert engine.sampler == "multinomial"
    (run / "config.yaml").write_text(config_to_yaml(Config()))
    engine, _ = engines.engine_for(run_config(run), run, "judge", model_dirs[0], batch_size=8)
    assert engine.sampler == "inverse_cdf"
