"""One RL iteration as one Prefect flow run: the table of contents of DESIGN §2.2."""
from __future__ import annotations

from prefect import flow

from tasks.commit import commit
from tasks.iteration import adapt_environment, build_data, judge, rollout, select_tasks
from tasks.tracking_tasks import IterationLog
from tasks.training import evaluate, train_judge, train_policy
from tasks.validate import validate


@flow(name="rl-iteration", flow_run_name="iteration-{iteration}", log_prints=True)
def rl_iteration(run_dir: str, iteration: int) -> dict:
    """Select → roll out → judge → adapt → build data → validate → train policy → train judge →
    evaluate → commit. Completed stages are skipped on a re-run; a failed gate stops before training."""
    with IterationLog.open(run_dir, iteration) as log:
        log.stage("select", select_tasks(run_dir, iteration))
        log.stage("rollout", rollout(run_dir, iteration))
        log.stage("judge", judge(run_dir, iteration))
        log.stage("adapt", adapt_environment(run_dir, iteration))
        log.stage("data", build_data(run_dir, iteration))
        log.stage("validate", validate(run_dir, iteration))  # a failed gate raises after logging its report
        log.stage("train_policy", train_policy(run_dir, iteration))
        log.stage("train_judge", train_judge(run_dir, iteration))
        log.stage("evaluate", evaluate(run_dir, iteration))
        log.stage("commit", commit(run_dir, iteration))
        return log.metrics
