"""prefect.yaml against the flows it deploys, and `rla deploy` / `rla worker` without a server:
parameters reach the config loader, pools are created with the right templates, errors are one line."""
from __future__ import annotations

import importlib

import pytest
import yaml
from prefect.settings import PREFECT_API_URL, temporary_settings

from flows import deploy as ops
from flows.cli import main
from rla_core.config import load_config

SPEC = yaml.safe_load((ops.REPO / "prefect.yaml").read_text())
DEPLOYMENTS = {d["name"]: d for d in SPEC["deployments"]}


def _flow(entrypoint: str):
    path, name = entrypoint.split(":")
    return getattr(importlib.import_module(path.removesuffix(".py").replace("/", ".")), name)


@pytest.mark.parametrize("name", sorted(DEPLOYMENTS))
def test_deployment_parameters_fit_its_flow(name):
    spec = DEPLOYMENTS[name]
    flow = _flow(spec["entrypoint"])
    assert set(spec.get("parameters", {})) <= set(flow.parameters.properties), f"{name}: unknown parameters"
    assert spec["work_pool"]["name"] in (ops.CPU_POOL, ops.GPU_POOL)


@pytest.mark.parametrize("name", ["train", "iteration", "evaluate"])
def test_config_path_and_set_overrides_reach_the_config(name):
    params = dict(DEPLOYMENTS[name]["parameters"])
    files = [str(ops.REPO / f) for f in params["config_files"]]  # a worker runs from the repository root
    cfg = load_config(files, params["overrides"] + ["rollout.n=3", "run.name=micro"])
    assert (cfg.rollout.n, cfg.run.name, cfg.train.reference) == (3, "micro", "initial")  # quickstart + sets


def test_stage_deployment_is_the_name_the_config_points_at():
    spec = DEPLOYMENTS["gpu"]
    assert f"{_flow(spec['entrypoint']).name}/{spec['name']}" == "rla-stage/gpu"
    assert spec["work_pool"]["name"] == ops.GPU_POOL and "parameters" not in spec  # set per stage run


def test_recurring_training_schedule_is_an_inactive_cron_on_the_iteration_deployment():
    schedules = DEPLOYMENTS["iteration"]["schedules"]
    assert len(schedules) == 1 and schedules[0]["cron"] and schedules[0]["active"] is False
    assert DEPLOYMENTS["iteration"]["parameters"]["iteration"] is None  # the next one, every time
    assert DEPLOYMENTS["train"]["concurrency_limit"] == DEPLOYMENTS["iteration"]["concurrency_limit"] == 1


def test_pool_commands_create_only_what_is_missing():
    both = ops.pool_commands({ops.CPU_POOL, ops.GPU_POOL}, "docker", None)
    assert [c[3:] for c in both] == [
        ["work-pool", "create", "rla-cpu", "--type", "process"],
        ["work-pool", "create", "rla-gpu", "--type", "docker", "--base-job-template",
         str(ops.INFRA / "docker-gpu-job-template.json")],
        ["work-pool", "set-concurrency-limit", "rla-gpu", "1"],
    ]
    assert ops.pool_commands(set(), "kubernetes", None) == []  # existing pools keep their settings
    assert ops.pool_commands(set(), "kubernetes", 4)[0][3:] == ["work-pool", "set-concurrency-limit", "rla-gpu", "4"]
    assert ops.pool_commands({ops.GPU_POOL}, "process", None)[0][3:] == ["work-pool", "create", "rla-gpu",
                                                                        "--type", "process"]
    with pytest.raises(ValueError, match="valid"):
        ops.pool_commands(set(), "slurm", None)


def test_deploy_and_worker_commands():
    assert ops.deploy_command()[3:] == ["--no-prompt", "deploy", "--all", "--prefect-file",
                                        str(ops.REPO / "prefect.yaml")]
    assert ops.deploy_command(["rla-stage/gpu"])[5:7] == ["--name", "rla-stage/gpu"]
    assert ops.worker_command("rla-gpu", 1)[3:] == ["worker", "start", "--pool", "rla-gpu", "--limit", "1"]


def test_deploy_without_an_api_url_is_one_clear_line(capsys, monkeypatch):
    monkeypatch.delenv("PREFECT_API_URL", raising=False)
    with temporary_settings(restore_defaults={PREFECT_API_URL}):
        assert main(["deploy"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and err.startswith("rla: error: no Prefect API URL configured")


def test_worker_against_a_dead_server_is_one_clear_line(capsys):
    with temporary_settings(updates={PREFECT_API_URL: "http://127.0.0.1:9/api"}):
        assert main(["worker", "--pool", "rla-cpu"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "does not answer" in err
