"""One RL iteration as one Prefect flow run (docs/design.md, "The loop"): the stages of
tasks/pipeline.py:ITERATION in order."""
from __future__ import annotations

from prefect import flow

from flows.routing import StageRunner
from tasks.pipeline import ITERATION
from tasks.tracking.run_log import IterationLog

__all__ = ["ITERATION", "rl_iteration"]


@flow(name="rl-iteration", flow_run_name="iteration-{iteration}", log_prints=True)
def rl_iteration(run_dir: str, iteration: int) -> dict:
    """Run the stages of ITERATION in order. Completed stages are skipped on a re-run. With
    cfg.orchestration.gpu_deployment set, the stages in orchestration.gpu_stages run as flow runs on
    the GPU work pool."""
    run = StageRunner.of(run_dir, iteration, ITERATION)  # here, or on the GPU deployment for routed stages
    with IterationLog.open(run_dir, iteration) as log:
        for stage in ITERATION:
            log.stage(stage, run(stage))
        return log.metrics
