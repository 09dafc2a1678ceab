"""Crash anywhere, re-run the same command, get the same run: `rla run` is SIGKILLed at a stage boundary
or half-way through a stage (tasks/checks/faults.py), then re-run; its final weights, every stage's metrics
and the MLflow metrics must equal those of an uninterrupted run bit for bit, and nothing the killed
command started (Prefect's API server, the watcher) may outlive it.

CI runs one kill point (`CI_POINTS`: half-way through iteration 2's policy update, where the optimizer state
and the first iteration's checkpoints must both come back); the full sweep — every stage of the run and of both
iterations, at `before`, `inside` and `after` — is opt-in: `pytest -m slow tests/flows/test_crash_resume.py`.
"""
from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from rla_core.config import PROJECT_ROOT
from tests.flows.conftest import MICRO

# micro sizes with a shorter warm-start and a cheap held-out pass (the point is resumption, not learning)
SIZES = MICRO + ["bootstrap.demos=12", "bootstrap.policy_steps=30", "bootstrap.judge_steps=20",
                 "eval.greedy_at_end=false", "eval.episodes_per_task=1", "run.iterations=2", "run.eval_every=1"]
RUN_STAGES = ["seed", "init_models", "bootstrap", "baseline", "version_start"]
ITERATION_STAGES = ["select", "rollout", "judge", "adapt", "data", "validate", "train_policy", "train_judge",
                    "evaluate", "commit"]
SWEEP = ([(s, p, 0) for s in RUN_STAGES for p in ("before", "inside", "after")]
         + [(s, p, k) for k in (1, 2) for s in ITERATION_STAGES for p in ("before", "inside", "after")])
CI_POINTS = [("train_policy", "inside", 2)]  # ("rollout", "before", 1) too until 2026-12-07; 56 s, now in SWEEP only
TIMING = ("time/", "seconds", "_per_s", "throughput", "peak_rss")  # measurements, not results


def _command(out: Path, name: str, extra: list[str] | None = None) -> list[str]:
    sets = [arg for item in SIZES + [f"run.output_dir={out}", f"run.name={name}"] + (extra or [])
            for arg in ("--set", item)]
    return [sys.executable, "-m", "flows.cli", "run", "--config", str(PROJECT_ROOT / "configs" / "quickstart.yaml"),
            "--set", "environment.heldout_file=null", "--set", "eval.judge_benchmark=null",
            "--set", "environment.reserved_files=[]", "--set", "eval.dev_file=null",
            "--set", "eval.dev_judge_benchmark=null", *sets]


def _run(out: Path, name: str, fault: str | None = None, delay: float = 0.5, extra: list[str] | None = None,
         while_running=None) -> tuple[int, str, list]:
    """Run the command (with RLA_FAULT when given); return its exit code, output tail and the
    processes it started (polled while it ran)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("RLA_FAULT")}
    if fault:
        env.update({"RLA_FAULT": fault, "RLA_FAULT_DELAY_S": str(delay)})
    proc = subprocess.Popen(_command(out, name, extra), cwd=PROJECT_ROOT, env=env, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    seen: dict[int, psutil.Process] = {}
    log = []

    def poll() -> None:
        try:
            for child in psutil.Process(proc.pid).children(recursive=True):
                seen.setdefault(child.pid, child)
        except psutil.Error:
            pass

    import threading

    reader = threading.Thread(target=lambda: log.extend(proc.stdout), daemon=True)
    reader.start()
    while proc.poll() is None:
        poll()
        if while_running is not None:
            while_running()
        time.sleep(0.3)
    reader.join(timeout=30)
    return proc.returncode, "".join(log)[-3000:], list(seen.values())


def _fingerprint(run_dir: Path, tracking_uri: str | None = None) -> dict:
    """What must be identical: every checkpoint's weights, every stage's metrics, the MLflow metrics."""
    from tasks.tracking.tracker import read_metrics

    weights: dict[str, object] = {}
    registered = []
    for f in sorted(run_dir.rglob("*.safetensors")):
        rel = f.relative_to(run_dir)
        digest = hashlib.sha256(f.read_bytes()).hexdigest()
        if rel.parts[0] == "mlartifacts":  # mlartifacts/<random run id>/artifacts/checkpoints/...
            registered.append(("/".join(rel.parts[2:]), digest))
        else:
            weights[str(rel)] = digest
    weights["registered checkpoints"] = sorted(registered)
    stages = {}
    for done in sorted(run_dir.rglob("_DONE")):
        metrics = json.loads(done.read_text()).get("metrics", {})
        stages[str(done.parent.relative_to(run_dir))] = {
            k: v for k, v in metrics.items() if not any(t in k for t in TIMING)}
    mlflow = {key: history for key, history in read_metrics(run_dir, tracking_uri).items()
              if not any(t in key for t in TIMING)}
    return {"weights": weights, "stages": stages, "mlflow": mlflow}


@pytest.fixture(scope="module")
def reference(tmp_path_factory) -> dict:
    out = tmp_path_factory.mktemp("reference")
    code, log, _ = _run(out, "ref")
    assert code == 0, log
    run_dir = out / "ref"
    seconds = {str(d.parent.relative_to(run_dir)): json.loads(d.read_text()).get("seconds", 0.0)
               for d in run_dir.rglob("_DONE")}
    return {"print": _fingerprint(run_dir), "seconds": seconds}


def _stage_folder(stage: str, iteration: int) -> str:
    if iteration:
        return f"iterations/iter_{iteration:04d}/{stage}"
    return {"seed": "seed", "init_models": "models/init", "bootstrap": "models/bootstrap",
            "baseline": "baseline", "version_start": "versions/start"}[stage]


def _kill_and_resume(reference: dict, tmp_path: Path, stage: str, point: str, iteration: int) -> None:
    fault = f"kill:{stage}:{point}:{iteration}" if iteration else f"kill:{stage}:{point}"
    # inside: half-way through the stage as timed in the uninterrupted run
    delay = max(0.05, reference["seconds"].get(_stage_folder(stage, iteration), 1.0) / 2)
    code, log, started = _run(tmp_path, "crash", fault, delay)
    assert code == -9, f"{fault}: expected death by SIGKILL, got {code}\n{log}"
    folder = tmp_path / "crash" / _stage_folder(stage, iteration)
    assert (folder / "_DONE").is_file() == (point == "after"), fault
    _, still = psutil.wait_procs(started, timeout=30)
    assert not still, f"{fault}: outlived the killed run: {[p.cmdline() for p in still]}"

    code, log, _ = _run(tmp_path, "crash")
    assert code == 0, f"resume after {fault} failed\n{log}"
    got = _fingerprint(tmp_path / "crash")
    for part in ("weights", "stages", "mlflow"):
        assert got[part] == reference["print"][part], f"{part} differ after {fault}"


@pytest.mark.parametrize("stage,point,iteration", CI_POINTS, ids=[f"{s}-{p}-{k}" for s, p, k in CI_POINTS])
def test_killed_run_resumes_to_identical_results(reference, tmp_path, stage, point, iteration):
    _kill_and_resume(reference, tmp_path, stage, point, iteration)


@pytest.mark.slow
@pytest.mark.parametrize("stage,point,iteration", SWEEP, ids=[f"{s}-{p}-{k}" for s, p, k in SWEEP])
def test_sweep_every_kill_point(reference, tmp_path, stage, point, iteration):
    _kill_and_resume(reference, tmp_path, stage, point, iteration)


def test_second_run_on_the_same_folder_is_refused_naming_the_holder(tmp_path, capsys):
    """The run folder's lock: held by another process, `rla run` stops at once with one line."""
    from flows.cli import main

    run_dir = tmp_path / "busy"
    holder = subprocess.Popen(
        [sys.executable, "-c", "import sys, time; from tasks.storage.runlock import hold\n"
         f"with hold({str(run_dir)!r}):\n    print('held', flush=True); time.sleep(120)"],
        cwd=PROJECT_ROOT, stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        code = main(["run", "--config", str(PROJECT_ROOT / "configs" / "quickstart.yaml"),
                     "--set", f"run.output_dir={tmp_path}", "--set", "run.name=busy"])
        err = capsys.readouterr().err.strip().splitlines()
        assert code == 2
        assert len(err) == 1 and f"pid {holder.pid}" in err[0] and "in use" in err[0], err
    finally:
        holder.kill()
        holder.wait()


@pytest.mark.slow
def test_tracking_server_down_mid_run_stops_cleanly_and_the_rerun_loses_nothing(reference, tmp_path):
    """A real `mlflow server` is stopped once iteration 1's judge stage is done: the run stops with one
    error line; the server comes back on the same store; the re-run completes, and weights, stage
    metrics and the MLflow metric history equal the uninterrupted run's (which used a sqlite store)."""
    from tests.tasks.test_tracking_faults import _free_port, _start, _stop

    port = _free_port()
    url = f"http://127.0.0.1:{port}"
    store = tmp_path / "server"
    store.mkdir()
    server = {"process": _start(store, port)}
    marker = tmp_path / "down" / "iterations" / "iter_0001" / "judge" / "_DONE"

    def stop_when_judged() -> None:
        if server["process"] is not None and marker.is_file():
            _stop(server["process"])
            server["process"] = None

    try:
        code, log, _ = _run(tmp_path, "down", extra=[f"tracking.mlflow_uri={url}"], while_running=stop_when_judged)
        assert code == 2, log
        last = [line for line in log.splitlines() if line.strip()][-1]
        assert last.startswith("rla: error: MLflow tracking server") and url in last, log
        assert not (tmp_path / "down" / "iterations" / "iter_0001" / "COMPLETE").exists()
        server["process"] = _start(store, port)
        code, log, _ = _run(tmp_path, "down", extra=[f"tracking.mlflow_uri={url}"])
        assert code == 0, log
        got = _fingerprint(tmp_path / "down", url)
    finally:
        if server["process"] is not None:
            _stop(server["process"])
    registered = "registered checkpoints"  # under the server's artifact root here, not the run folder
    got["weights"].pop(registered)
    want = {k: v for k, v in reference["print"]["weights"].items() if k != registered}
    assert got["weights"] == want, "weights differ after the tracking server was down"
    for part in ("stages", "mlflow"):
        assert got[part] == reference["print"][part], f"{part} differ after the tracking server was down"
