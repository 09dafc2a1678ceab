"""One stage of one iteration as its own flow run: what a GPU worker runs when a stage is routed to it.

Stages exchange files under the run folder, so a stage can run on another machine as long as it sees
the same run folder (a shared volume mounted at the same path, or storage.backend=s3).
"""
from __future__ import annotations

from prefect import flow

from tasks.pipeline import ITERATION
from tasks.paths import RunPaths
from tasks.storage.files import write_text
from rla_core.errors import UnknownName

STAGES = {stage.name: stage for stage in ITERATION}  # any stage can be routed, by its name


@flow(name="rla-stage", flow_run_name="{stage}-{iteration}", log_prints=True)
def run_stage(run_dir: str, iteration: int, stage: str, run_config: str | None = None) -> dict:
    """Run (or skip, when its _DONE marker exists) one stage of iteration `iteration` of `run_dir`.

    `run_config` (the run's config.yaml text) is written when this machine has no run folder yet, so the
    stage finds the run's storage and fetches its inputs (storage.backend=s3) before it runs.
    """
    if stage not in STAGES:
        raise UnknownName(f"unknown stage '{stage}'; valid: {list(STAGES)}")
    config = RunPaths.of(run_dir).config
    if run_config is not None and not config.is_file():
        write_text(config, run_config)
    return STAGES[stage](run_dir, iteration)
