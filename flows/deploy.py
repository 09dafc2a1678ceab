"""`rla deploy` and `rla worker`: thin wrappers around the documented Prefect commands.

Each step prints the exact `prefect …` command it runs, so an ops engineer can run it by hand:

  prefect work-pool create rla-cpu --type process
  prefect work-pool create rla-gpu --type docker --base-job-template infra/docker-gpu-job-template.json
  prefect work-pool set-concurrency-limit rla-gpu 1     # one GPU flow run at a time per GPU slot
  prefect --no-prompt deploy --all --prefect-file prefect.yaml
  prefect worker start --pool rla-cpu
"""
from __future__ import annotations

import os
import shlex
import subprocess
import sys
from pathlib import Path
from rla_core.errors import BadValue, UserError

REPO = Path(__file__).resolve().parent.parent
INFRA = REPO / "infra"
CPU_POOL, GPU_POOL = "rla-cpu", "rla-gpu"
# The GPU pool's type → its base job template (None: Prefect's default, e.g. a process pool standing in
# for a GPU pool on a single machine or in tests).
GPU_TEMPLATES = {
    "docker": INFRA / "docker-gpu-job-template.json",
    "kubernetes": INFRA / "kubernetes-gpu-job-template.json",
    "process": None,
}


class PrefectNotConfigured(UserError, ValueError):
    """No Prefect API URL is set, or nothing answers at it."""


class CommandFailed(UserError, RuntimeError):
    """A wrapped `prefect …` command exited with an error (its own output says why)."""


def api_url() -> str:
    """The configured Prefect API URL, checked to answer /health; else one clear error line."""
    import httpx
    from prefect.settings import PREFECT_API_URL

    url = PREFECT_API_URL.value()
    if not url:
        raise PrefectNotConfigured("no Prefect API URL configured: start a server (`prefect server start`, or "
                                   "infra/compose.yaml) and `export PREFECT_API_URL=http://127.0.0.1:4200/api`")
    try:
        httpx.get(f"{url.rstrip('/')}/health", timeout=5).raise_for_status()
    except httpx.HTTPError as err:
        raise PrefectNotConfigured(f"the Prefect API at {url} does not answer ({type(err).__name__}); "
                                   "is the server running and PREFECT_API_URL right?") from None
    return url


def prefect_cli(*args: str) -> list[str]:
    """`prefect …` with this interpreter, so the venv's prefect runs whatever PATH says."""
    return [sys.executable, "-m", "prefect", *args]


def pool_commands(missing: set[str], gpu_type: str, gpu_slots: int | None) -> list[list[str]]:
    """The commands that create the missing pools and cap the GPU pool at `gpu_slots` concurrent flow
    runs (1 when the pool is created and no value is given; an existing pool keeps its limit)."""
    if gpu_type not in GPU_TEMPLATES:
        raise BadValue(f"unknown GPU pool type '{gpu_type}'; valid: {list(GPU_TEMPLATES)}")
    if gpu_slots is not None and gpu_slots < 1:
        raise BadValue(f"--gpu-slots must be >= 1, got {gpu_slots}")
    commands = []
    if CPU_POOL in missing:
        commands.append(prefect_cli("work-pool", "create", CPU_POOL, "--type", "process"))
    if GPU_POOL in missing:
        template = GPU_TEMPLATES[gpu_type]
        extra = ["--base-job-template", str(template)] if template else []
        commands.append(prefect_cli("work-pool", "create", GPU_POOL, "--type", gpu_type, *extra))
    if GPU_POOL in missing or gpu_slots is not None:
        commands.append(prefect_cli("work-pool", "set-concurrency-limit", GPU_POOL, str(gpu_slots or 1)))
    return commands


def deploy_command(names: list[str] | None = None) -> list[str]:
    """`prefect deploy` of every deployment in prefect.yaml (or only `names`, e.g. rla-stage/gpu)."""
    selection = [arg for name in names for arg in ("--name", name)] if names else ["--all"]
    return prefect_cli("--no-prompt", "deploy", *selection, "--prefect-file", str(REPO / "prefect.yaml"))


def existing_pools() -> set[str]:
    from prefect.client.orchestration import get_client

    with get_client(sync_client=True) as client:
        return {pool.name for pool in client.read_work_pools()}


def _run(command: list[str]) -> None:
    print("$", shlex.join(["prefect", *command[3:]]), flush=True)
    result = subprocess.run(command, cwd=REPO, env=worker_environment())
    if result.returncode != 0:
        raise CommandFailed(f"`prefect {shlex.join(command[3:])}` failed with exit code {result.returncode}")


def deploy(gpu_type: str = "docker", gpu_slots: int | None = None, names: list[str] | None = None) -> None:
    """Create rla-cpu / rla-gpu when missing (existing pools are left as they are), then deploy."""
    url = api_url()
    print(f"Prefect API: {url}")
    for command in pool_commands({CPU_POOL, GPU_POOL} - existing_pools(), gpu_type, gpu_slots):
        _run(command)
    _run(deploy_command(names))


def worker_environment() -> dict[str, str]:
    """The worker's environment; RLA_REPO_DIR tells prefect.yaml's pull step where the code lives."""
    return {**os.environ, "RLA_REPO_DIR": os.environ.get("RLA_REPO_DIR", str(REPO))}


def worker_command(pool: str, limit: int | None = None, name: str | None = None) -> list[str]:
    command = prefect_cli("worker", "start", "--pool", pool)
    if limit:
        command += ["--limit", str(limit)]
    if name:
        command += ["--name", name]
    return command


def worker(pool: str, limit: int | None = None, name: str | None = None) -> None:
    """Replace this process with `prefect worker start` (same PID, so Ctrl-C/SIGTERM reach the worker)."""
    api_url()
    command = worker_command(pool, limit, name)
    print("$", shlex.join(["prefect", *command[3:]]), flush=True)
    os.execve(command[0], command, worker_environment())
