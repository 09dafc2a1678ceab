"""Deployments end to end on CPU: a real Prefect server on 127.0.0.1 (own PREFECT_HOME, sqlite),
`rla deploy` from prefect.yaml, `rla worker` processes, a micro iteration through the rla-cpu worker, then
GPU routing with a process pool standing in for rla-gpu. Everything started here is stopped by PID
(SIGINT, then SIGTERM, then SIGKILL) and checked gone."""
from __future__ import annotations

import importlib.util
import json
import os
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import pytest
from prefect.client.orchestration import get_client
from prefect.client.schemas.actions import WorkPoolCreate
from prefect.client.schemas.filters import FlowFilter, FlowFilterName, FlowRunFilter, FlowRunFilterParentFlowRunId
from prefect.deployments import run_deployment
from prefect.settings import PREFECT_API_URL, temporary_settings

from flows.deploy import INFRA, REPO
from tasks.paths import RunPaths
from tasks.storage.files import done_summary
from tasks.tracking.tracker import read_metrics


def _micro_overrides() -> list[str]:
    # The same micro sizes as the in-process end-to-end test (tests are not a package: load by path).
    spec = importlib.util.spec_from_file_location("_flows_conftest", Path(__file__).with_name("conftest.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return list(module.MICRO)


# A shorter warm-start than the in-process test: here we check where things run, not what they learn.
# No dev split (configs/quickstart.yaml has one): its 200 tasks and 900 benchmark steps are not what this checks.
MICRO = _micro_overrides() + ["bootstrap.demos=20", "bootstrap.policy_steps=60", "bootstrap.judge_steps=30",
                              "eval.dev_file=null", "eval.dev_judge_benchmark=null"]
# Two of the GPU stages (one inference, one training): each routed stage costs a flow-run process start.
ROUTED = ["rollout", "train_policy"]
RUN_TIMEOUT_S = 420
IDLE_SERVICES = ("SCHEDULER", "LATE_RUNS", "FOREMAN", "CANCELLATION_CLEANUP", "PAUSE_EXPIRATIONS", "DB_VACUUM",
                 "CLEANUP_RECONCILER", "TRIGGERS", "EVENT_LOGGER")  # generous: a shared 2-core CI box; a run normally ends well inside it


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _group_alive(pgid: int) -> bool:
    """Whether any non-zombie process is still in process group `pgid` (Linux /proc)."""
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue  # the process ended while we looked
        if int(fields[2]) == pgid and fields[0] != "Z":
            return True
    return False


@dataclass
class Started:
    """Processes started here, each the leader of its own session (so SIGINT is not ignored and its
    children — uvicorn, flow-run subprocesses — can be signalled with it, by its PID)."""

    logs: Path
    procs: dict[str, subprocess.Popen] = field(default_factory=dict)

    def start(self, name: str, command: list[str], env: dict[str, str]) -> subprocess.Popen:
        log = open(self.logs / f"{name}.log", "wb")
        proc = subprocess.Popen(command, env=env, cwd=REPO, stdout=log, stderr=subprocess.STDOUT,
                                start_new_session=True)
        self.procs[name] = proc
        return proc

    def tail(self, lines: int = 30) -> str:
        out = []
        for name in self.procs:
            text = (self.logs / f"{name}.log").read_text(errors="replace").splitlines()[-lines:]
            out.append(f"--- {name} ---\n" + "\n".join(text))
        return "\n".join(out)

    def stop_all(self) -> list[int]:
        """SIGINT, then SIGTERM, then SIGKILL to each process group; returns the PIDs still alive."""
        for sig, wait_s in ((signal.SIGINT, 20), (signal.SIGTERM, 10), (signal.SIGKILL, 10)):
            alive = [p for p in self.procs.values() if p.poll() is None or _group_alive(p.pid)]
            for proc in alive:
                try:
                    os.killpg(proc.pid, sig)
                except ProcessLookupError:
                    pass
            deadline = time.monotonic() + wait_s
            while alive and time.monotonic() < deadline:
                alive = [p for p in alive if p.poll() is None or _group_alive(p.pid)]
                time.sleep(0.2)
            if not alive:
                break
        return [p.pid for p in self.procs.values() if p.poll() is None or _group_alive(p.pid)]


@dataclass
class Server:
    url: str
    env: dict[str, str]
    started: Started
    runs: Path


def _environment(home: Path, url: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PREFECT_")}
    env.update(PREFECT_HOME=str(home), PREFECT_API_URL=url, PREFECT_SERVER_ANALYTICS_ENABLED="false",
               PREFECT_UI_ENABLED="false", PREFECT_WORKER_QUERY_SECONDS="1", PREFECT_LOGGING_LEVEL="INFO",
               DO_NOT_TRACK="1",
               MLFLOW_ENABLE_TELEMETRY="false", HF_HUB_OFFLINE="1", TOKENIZERS_PARALLELISM="false",
               OMP_NUM_THREADS="1", RLA_REPO_DIR=str(REPO))
    # Server loop services this test never needs (runs are created by hand; the cron stays inactive).
    for service in IDLE_SERVICES:
        env[f"PREFECT_SERVER_SERVICES_{service}_ENABLED"] = "false"
    return env


def _wait_healthy(url: str, started: Started, timeout_s: float = 150) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            if httpx.get(f"{url}/health", timeout=2).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        if started.procs["server"].poll() is not None:
            break
        time.sleep(0.5)
    raise RuntimeError(f"Prefect server did not become healthy\n{started.tail()}")


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("prefect")
    url = f"http://127.0.0.1:{_free_port()}/api"
    env = _environment(tmp / "home", url)
    started = Started(tmp)
    try:
        started.start("server", [sys.executable, "-m", "prefect", "server", "start", "--host", "127.0.0.1",
                                 "--port", url.split(":")[2].split("/")[0]], env)
        _wait_healthy(url, started)
        deploy = subprocess.run([sys.executable, "-m", "flows.cli", "deploy", "--gpu-pool-type", "process"],
                                env=env, cwd=REPO, capture_output=True, text=True, timeout=300)
        assert deploy.returncode == 0, deploy.stdout[-3000:] + deploy.stderr[-3000:]
        started.start("cpu-worker", [sys.executable, "-m", "flows.cli", "worker", "--pool", "rla-cpu"], env)
        started.start("gpu-worker", [sys.executable, "-m", "flows.cli", "worker", "--pool", "rla-gpu",
                                     "--limit", "1"], env)
        with temporary_settings(updates={PREFECT_API_URL: url}):
            yield Server(url, env, started, tmp / "runs")
    finally:
        leftover = started.stop_all()
        assert not leftover, f"processes still alive after SIGKILL: {leftover}"


def _run(server: Server, name: str, parameters: dict):
    flow_run = run_deployment(name, parameters=parameters, timeout=RUN_TIMEOUT_S, poll_interval=1)
    assert flow_run.state is not None and flow_run.state.is_completed(), \
        f"{name} ended {flow_run.state}\n{server.started.tail()}"
    return flow_run


@pytest.fixture(scope="module")
def first_iteration(server):
    overrides = MICRO + [f"run.output_dir={server.runs}", "run.name=micro"]
    flow_run = _run(server, "rla-iterate/iteration",
                    {"config_files": ["configs/quickstart.yaml"], "overrides": overrides})
    return flow_run, RunPaths.of(server.runs / "micro"), overrides


def test_pools_deployments_and_schedule_as_declared(server):
    with get_client(sync_client=True) as client:
        assert client.read_work_pool("rla-cpu").type == "process"
        assert client.read_work_pool("rla-gpu").concurrency_limit == 1  # one GPU flow run at a time
        iteration = client.read_deployment_by_name("rla-iterate/iteration")
        assert iteration.work_pool_name == "rla-cpu"
        assert [s.active for s in iteration.schedules] == [False]  # the cron example stays off
        assert client.read_deployment_by_name("rla-stage/gpu").work_pool_name == "rla-gpu"
        for name in ("rla-train/train", "rla-evaluate/evaluate"):
            assert client.read_deployment_by_name(name).parameters["config_files"] == ["configs/quickstart.yaml"]
        # the GPU job templates are accepted by the server as work-pool base job templates
        for kind in ("docker", "kubernetes"):
            template = json.loads((INFRA / f"{kind}-gpu-job-template.json").read_text())
            pool = client.create_work_pool(WorkPoolCreate(name=f"check-{kind}", type=kind,
                                                          base_job_template=template))
            assert pool.base_job_template["variables"]["properties"]["gpu_count"]


def test_micro_iteration_runs_through_the_worker(first_iteration):
    flow_run, paths, _ = first_iteration
    assert paths.is_complete(1)
    assert flow_run.infrastructure_pid  # it ran in a worker's subprocess, not here
    metrics = read_metrics(paths.root)
    for key in ("rollout/success_rate", "judge/p_pos", "time/rollout_s", "heldout/success_rate"):
        assert key in metrics, f"{key} missing from MLflow; have {sorted(metrics)[:20]}"
    assert 1 in metrics["rollout/success_rate"]


def test_gpu_stages_run_as_separate_flow_runs_of_the_stage_deployment(server, first_iteration):
    _, paths, overrides = first_iteration
    parent = _run(server, "rla-iterate/iteration",
                  {"config_files": ["configs/quickstart.yaml"],
                   "overrides": overrides + ["orchestration.gpu_deployment=rla-stage/gpu",
                                             f"orchestration.gpu_stages=[{', '.join(ROUTED)}]"]})
    assert paths.is_complete(2)
    with get_client(sync_client=True) as client:
        iteration_run = client.read_flow_runs(
            flow_run_filter=FlowRunFilter(parent_flow_run_id=FlowRunFilterParentFlowRunId(any_=[parent.id])),
            flow_filter=FlowFilter(name=FlowFilterName(any_=["rl-iteration"])))
        assert len(iteration_run) == 1
        stage_runs = client.read_flow_runs(flow_filter=FlowFilter(name=FlowFilterName(any_=["rla-stage"])))
        assert sorted(r.name for r in stage_runs) == sorted(f"{s}-2" for s in ROUTED)
        gpu = client.read_deployment_by_name("rla-stage/gpu")
        for stage_run in stage_runs:
            assert stage_run.state.is_completed() and stage_run.deployment_id == gpu.id
            assert stage_run.work_pool_name == "rla-gpu"
    for stage in ROUTED:
        assert done_summary(paths.stage(2, stage))  # written by the GPU-pool flow run, read by the iteration
    assert "time/rollout_s" in read_metrics(paths.root)
    assert 2 in read_metrics(paths.root)["rollout/success_rate"]
