"""Run a training function on several ranks (torchrun on one node, or the deepspeed launcher on many).

A "target" is `package.module:function` or `path/to/file.py:function`; the function takes the JSON
payload (a dict) and returns a JSON-able dict. Every rank runs it; each rank's result is written to
`<out_dir>/rank-<RANK>.json`, and `launch` returns them in rank order.

One node (what `launch` runs):
    python -m torch.distributed.run --nproc_per_node N --master_addr 127.0.0.1 --master_port P \\
        -m rla_core.training.ds_launch TARGET payload.json
Several nodes (`deepspeed_command`; a hostfile lists `hostname slots=N` per node, passwordless ssh,
the same code and paths on every node):
    deepspeed --hostfile hosts --num_nodes K --num_gpus N --master_port P \\
        --module rla_core.training.ds_launch TARGET payload.json

Inside the target, build `get_trainer("deepspeed")(...)` as usual: the process group comes from the
launcher's RANK/WORLD_SIZE/MASTER_* variables, and every rank must get the same samples and seed
(see rla_core.training.deepspeed_backend for how a mini-batch is split over ranks).
"""
from __future__ import annotations

import importlib
import importlib.util
import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from rla_core.config import DeepSpeedConfig
from rla_core.fileio import atomic_write_text

# Launcher-owned variables: a parent that ran an in-process rank must not leak its own into children.
_RANK_ENV = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")


def torchrun_command(target: str, payload_path: Path, num_procs: int, master_port: int) -> list[str]:
    """The single-node torchrun command line that runs `target` on `num_procs` ranks."""
    return [
        sys.executable, "-m", "torch.distributed.run", f"--nproc_per_node={num_procs}", "--nnodes=1",
        "--master_addr=127.0.0.1", f"--master_port={master_port}",
        "-m", "rla_core.training.ds_launch", target, str(payload_path),
    ]


def deepspeed_command(target: str, payload_path: Path, ds: DeepSpeedConfig) -> list[str]:
    """The `deepspeed` launcher command line for ds.num_nodes nodes of ds.num_procs ranks each."""
    command = ["deepspeed"]
    if ds.hostfile:
        command += ["--hostfile", ds.hostfile]
    command += [
        "--num_nodes", str(ds.num_nodes), "--num_gpus", str(ds.num_procs), "--master_port", str(ds.master_port),
        "--module", "rla_core.training.ds_launch", target, str(payload_path),
    ]
    return command


def launch(
    target: str, payload: dict[str, Any], ds: DeepSpeedConfig, work_dir: str | os.PathLike,
    timeout_s: float | None = None,
) -> list[dict[str, Any]]:
    """Run `target(payload)` on every rank (ds.launcher = torchrun | deepspeed); per-rank results.

    Raises RuntimeError with the launcher's output tail when any rank fails.
    """
    work = Path(work_dir)
    out_dir = work / "ranks"
    out_dir.mkdir(parents=True, exist_ok=True)
    payload_path = work / "payload.json"
    payload_path.write_text(json.dumps({**payload, "out_dir": str(out_dir)}))
    if ds.launcher == "torchrun":
        command = torchrun_command(target, payload_path, ds.num_procs, ds.master_port)
    elif ds.launcher == "deepspeed":
        command = deepspeed_command(target, payload_path, ds)
    else:
        raise ValueError(
            f"train.deepspeed.launcher must be torchrun or deepspeed to launch ranks, got {ds.launcher!r}"
        )
    env = {name: value for name, value in os.environ.items() if name not in _RANK_ENV}
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=timeout_s)
    if done.returncode != 0:
        tail = (done.stdout + done.stderr)[-4000:]
        raise RuntimeError(f"{ds.launcher} launch of {target} failed (exit {done.returncode}):\n{tail}")
    ranks = ds.num_procs * ds.num_nodes
    return [json.loads((out_dir / f"rank-{rank}.json").read_text()) for rank in range(ranks)]


def resolve_target(target: str) -> Callable[[dict[str, Any]], dict[str, Any]]:
    """`pkg.module:function` or `path/file.py:function` → the function."""
    location, _, name = target.rpartition(":")
    if not location or not name:
        raise ValueError(f"launch target must look like 'module:function' or 'file.py:function', got {target!r}")
    if location.endswith(".py"):
        spec = importlib.util.spec_from_file_location(Path(location).stem, location)
        if spec is None or spec.loader is None:
            raise ValueError(f"cannot import {location}")
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
    else:
        module = importlib.import_module(location)
    return getattr(module, name)


def main(argv: list[str]) -> None:
    """Entry point of every rank: run the target on the payload, write this rank's result."""
    target, payload_path = argv
    payload = json.loads(Path(payload_path).read_text())
    result = resolve_target(target)(payload)
    rank = int(os.environ.get("RANK", "0"))
    out = Path(payload["out_dir"]) / f"rank-{rank}.json"
    atomic_write_text(out, json.dumps(result))


if __name__ == "__main__":
    main(sys.argv[1:])
