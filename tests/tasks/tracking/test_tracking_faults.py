"""The MLflow tracking server goes away mid-run: a real `mlflow server` on 127.0.0.1 (stopped by its PID)
is stopped between two logging calls. The call fails in one line (TrackingUnavailable) instead of a
traceback or a hang; once the server is back on the same store, the same run is re-attached and the
metrics logged again — nothing that was logged before is lost, nothing is duplicated."""
from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
import urllib.request

import pytest

from rla_core.config import TrackingConfig
from tasks.tracking.tracker import Tracker, TrackingUnavailable, read_metrics


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _start(store, port: int) -> subprocess.Popen:
    server = subprocess.Popen(
        [sys.executable, "-m", "mlflow", "server", "--backend-store-uri", f"sqlite:///{store / 'mlflow.db'}",
         "--default-artifact-root", str(store / "artifacts"), "--host", "127.0.0.1", "--port", str(port),
         "--workers", "1"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    deadline = time.monotonic() + 120
    while True:
        try:
            urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=1)
            return server
        except OSError:
            if time.monotonic() > deadline or server.poll() is not None:
                _stop(server)
                raise RuntimeError("mlflow server did not start")
            time.sleep(0.5)


def _stop(server: subprocess.Popen) -> None:
    """Stop the server and its workers: they share the session the server leads (its own PID)."""
    import signal

    try:
        os.killpg(server.pid, signal.SIGTERM)
    except ProcessLookupError:
        return
    try:
        server.wait(timeout=20)
    except subprocess.TimeoutExpired:
        os.killpg(server.pid, signal.SIGKILL)
        server.wait()


def test_server_down_fails_in_one_line_and_nothing_is_lost_when_it_returns(tmp_path, monkeypatch):
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "1")
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_BACKOFF_FACTOR", "0")
    port = _free_port()
    url = f"http://127.0.0.1:{port}"
    store, run_dir = tmp_path / "server", tmp_path / "run"
    store.mkdir()
    config = TrackingConfig(mlflow_uri=url, register_models=False)
    server = _start(store, port)
    try:
        tracker = Tracker(run_dir, config, run_name="faults")
        tracker.start()
        tracker.log_metrics({"train/success_rate": 0.25}, step=1)
    finally:
        _stop(server)

    started = time.monotonic()
    with pytest.raises(TrackingUnavailable) as error:
        tracker.log_metrics({"train/success_rate": 0.5}, step=2)
    message = str(error.value)
    assert "\n" not in message and url in message and "re-run the same command" in message
    assert time.monotonic() - started < 60  # a bounded wait, not MLflow's default minutes of retries

    server = _start(store, port)  # back, on the same store
    try:
        again = Tracker(run_dir, config, run_name="faults")  # re-attaches through mlflow_run_id.txt
        assert again.run_id == tracker.run_id
        again.log_metrics({"train/success_rate": 0.5}, step=2)  # what the re-run of the stage logs
        history = read_metrics(again.run_id, url)
        assert history["train/success_rate"] == {1: 0.25, 2: 0.5}
    finally:
        _stop(server)
