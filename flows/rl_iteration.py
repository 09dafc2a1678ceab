"""One RL iteration as one Prefect flow run (docs/design.md, "The loop"): the recipe below is the only
list of the iteration's stages; everything else (routing, the summary table, a routed stage's flow)
reads it from here."""
from __future__ import annotations

from prefect import flow

from flows.routing import StageRunner
from tasks.commit import commit
from tasks.evaluation import evaluate
from tasks.iteration import adapt, data, judge, rollout, select
from tasks.stage import Stage
from tasks.tracking_tasks import IterationLog
from tasks.training import train_judge, train_policy
from tasks.validate import validate

# validate raises on a failed gate (after logging its report), so no model is updated on bad data.
ITERATION: tuple[Stage, ...] = (select, rollout, judge, adapt, data, validate, train_policy, train_judge,
                                evaluate, commit)


@flow(name="rl-iteration", flow_run_name="iteration-{iteration}", log_prints=True)
def rl_iteration(run_dir: str, iteration: int) -> dict:
    """Run the stages of ITERATION in order. Completed stages are skipped on a re-run. With
    cfg.orchestration.gpu_deployment set, the stages in orchestration.gpu_stages run as flow runs on
    the GPU work pool."""
    run = StageRunner.of(run_dir, iteration, ITERATION)  # here, or on the GPU deployment for routed stages
    with IterationLog.open(run_dir, iteration) as log:
        for stage in ITERATION:
            log.stage(stage.name, run(stage))
        return log.metrics
