"""GPU routing without a server: which stages leave the iteration's process, with which parameters, and
how a routed stage's failure or missing outputs fail the iteration."""
from __future__ import annotations

from types import SimpleNamespace

import prefect.deployments
import pytest

from flows import routing
from flows.routing import StageFailed, StageRunner, stage_parameters
from flows.rl_iteration import ITERATION
from flows.stage import STAGES, run_stage
from flows.train import prepare_run_dir
from rla_core.config import ConfigError, config_to_yaml, load_config
from rla_core.errors import UnknownName
from tasks.paths import RunPaths
from tasks.stage import stage
from tasks.storage.files import mark_done, write_text
from tasks.summaries import StageSummary


class WhereSummary(StageSummary):
    where: str


def _run_dir(tmp_path, *overrides: str) -> str:
    cfg = load_config(None, [f"run.output_dir={tmp_path}", "run.name=r", *overrides])
    paths = RunPaths.of(tmp_path / "r")
    write_text(paths.config, config_to_yaml(cfg))
    return str(paths.root)


def _local(calls: list):
    """Stand-ins for the iteration's stages, under the same names, that record where they ran."""
    def declare(name: str):
        def body(paths, cfg, k, out) -> dict:
            calls.append((str(paths.root), k))
            return {"where": "here"}
        body.__name__ = name
        return stage(summary=WhereSummary)(body)
    return [declare(s.name) for s in ITERATION]


def test_without_a_gpu_deployment_every_stage_runs_here(tmp_path, monkeypatch):
    monkeypatch.setattr(routing, "run_routed", lambda *a: pytest.fail("nothing may be routed"))
    runner = StageRunner.of(_run_dir(tmp_path), 3, ITERATION)
    calls: list = []
    for local in _local(calls):
        assert runner(local)["where"] == "here"
    assert runner.routed == frozenset() and calls == [(runner.run_dir, 3)] * len(ITERATION)


def test_gpu_stages_go_to_the_deployment_and_the_rest_stay(tmp_path, monkeypatch):
    routed = []
    monkeypatch.setattr(routing, "run_routed", lambda dep, run_dir, k, stage: routed.append((dep, k, stage)) or {})
    run_dir = _run_dir(tmp_path, "orchestration.gpu_deployment=rla-stage/gpu")
    runner, calls = StageRunner.of(run_dir, 2, ITERATION), []
    locals_ = _local(calls)
    for local in locals_:
        runner(local)
    assert routed == [("rla-stage/gpu", 2, s) for s in ("rollout", "judge", "train_policy", "train_judge")]
    assert len(calls) == len(ITERATION) - 4
    mark_done(RunPaths.of(run_dir).stage(2, "judge"), {"where": "done before"})  # resumed: no GPU run
    routed.clear()
    assert runner(next(s for s in locals_ if s.name == "judge")) == {"where": "done before", "resumed": True}
    assert routed == []


def test_unknown_gpu_stage_names_the_valid_ones(tmp_path):
    run_dir = _run_dir(tmp_path, "orchestration.gpu_deployment=x/y", "orchestration.gpu_stages=[rollout, rollot]")
    with pytest.raises(ConfigError, match="rollot.*valid.*train_policy"):
        StageRunner.of(run_dir, 1, ITERATION)


def test_stage_parameters_match_the_stage_flow_signature(tmp_path):
    run_dir = _run_dir(tmp_path)
    params = stage_parameters(str(tmp_path / "a" / ".." / "r"), "4", "judge")
    assert (params["run_dir"], params["iteration"], params["stage"]) == (run_dir, 4, "judge")
    assert load_config([RunPaths.of(run_dir).config]) == _config_from_text(params["run_config"], tmp_path)
    assert set(params) == set(run_stage.parameters.properties)
    assert list(STAGES) == [s.name for s in ITERATION]  # every stage can be routed, by its name


def _config_from_text(text: str, tmp_path):
    path = tmp_path / "copy.yaml"
    path.write_text(text)
    return load_config([path])


def test_stage_flow_writes_the_run_config_on_a_machine_without_the_run(tmp_path, monkeypatch):
    text = RunPaths.of(_run_dir(tmp_path)).config.read_text()
    elsewhere = RunPaths.of(tmp_path / "gpu-host" / "r")
    monkeypatch.setitem(STAGES, "rollout", lambda run_dir, k: {"config_seen": RunPaths.of(run_dir).config.is_file()})
    assert run_stage.fn(str(elsewhere.root), 1, "rollout", run_config=text) == {"config_seen": True}
    assert elsewhere.config.read_text() == text
    with pytest.raises(UnknownName, match="unknown stage .rollot.; valid"):
        run_stage.fn(str(elsewhere.root), 1, "rollot")


def _fake_run_deployment(state, calls):
    def fake(name, **kwargs):
        calls.append((name, kwargs))
        return SimpleNamespace(id="run-1", state=state)
    return fake


def test_a_routed_stage_that_fails_fails_the_iteration(tmp_path, monkeypatch):
    calls = []
    failed = SimpleNamespace(name="Crashed", is_completed=lambda: False)
    monkeypatch.setattr(prefect.deployments, "run_deployment", _fake_run_deployment(failed, calls))
    run_dir = _run_dir(tmp_path)
    with pytest.raises(StageFailed, match="stage 'rollout' of iteration 1 ended Crashed.*rla-stage/gpu"):
        routing.run_routed("rla-stage/gpu", run_dir, 1, "rollout")
    name, kwargs = calls[0]
    assert name == "rla-stage/gpu" and kwargs["timeout"] is None  # waited for, however long
    assert kwargs["parameters"] == stage_parameters(run_dir, 1, "rollout")


def test_a_completed_stage_without_outputs_here_is_an_error(tmp_path, monkeypatch):
    completed = SimpleNamespace(name="Completed", is_completed=lambda: True)
    monkeypatch.setattr(prefect.deployments, "run_deployment", _fake_run_deployment(completed, []))
    run_dir = _run_dir(tmp_path)
    with pytest.raises(StageFailed, match="same run folder"):
        routing.run_routed("rla-stage/gpu", run_dir, 1, "judge")
    mark_done(RunPaths.of(run_dir).stage(1, "judge"), {"metrics": {"judge/x": 1.0}})
    summary = routing.run_routed("rla-stage/gpu", run_dir, 1, "judge")
    assert summary["metrics"] == {"judge/x": 1.0} and summary["flow_run_id"] == "run-1"


def test_a_run_continues_with_other_routing_but_not_other_settings(tmp_path):
    base = [f"run.output_dir={tmp_path}", "run.name=r"]
    prepare_run_dir(load_config(None, base))
    run_dir = prepare_run_dir(load_config(None, base + ["orchestration.gpu_deployment=rla-stage/gpu"]))
    assert load_config([RunPaths.of(run_dir).config]).orchestration.gpu_deployment == "rla-stage/gpu"
    with pytest.raises(ConfigError, match="different config"):
        prepare_run_dir(load_config(None, base + ["rollout.n=3"]))
