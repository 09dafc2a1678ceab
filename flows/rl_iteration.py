"""One RL iteration as one Prefect flow run: the table of contents of DESIGN §2.2."""
from __future__ import annotations

from prefect import flow

from flows.routing import StageRunner
from tasks.commit import commit
from tasks.iteration import adapt_environment, build_data, judge, rollout, select_tasks
from tasks.tracking_tasks import IterationLog
from tasks.training import evaluate, train_judge, train_policy
from tasks.validate import validate


@flow(name="rl-iteration", flow_run_name="iteration-{iteration}", log_prints=True)
def rl_iteration(run_dir: str, iteration: int) -> dict:
    """Select → roll out → judge → adapt → build data → validate → train policy → train judge →
    evaluate → commit. Completed stages are skipped on a re-run; a failed gate stops before training.
    With cfg.orchestration.gpu_deployment set, the GPU stages run as flow runs on the GPU work pool."""
    run = StageRunner.of(run_dir, iteration)  # here, or on the GPU deployment for the routed stages
    with IterationLog.open(run_dir, iteration) as log:
        log.stage("select", run("select", select_tasks))
        log.stage("rollout", run("rollout", rollout))
        log.stage("judge", run("judge", judge))
        log.stage("adapt", run("adapt", adapt_environment))
        log.stage("data", run("data", build_data))
        log.stage("validate", run("validate", validate))  # a failed gate raises after logging its report
        log.stage("train_policy", run("train_policy", train_policy))
        log.stage("train_judge", run("train_judge", train_judge))
        log.stage("evaluate", run("evaluate", evaluate))
        log.stage("commit", run("commit", commit))
        return log.metrics
