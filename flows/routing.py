"""Where each stage of an iteration runs: in the iteration's own process, or — for the stages named in
cfg.orchestration.gpu_stages when cfg.orchestration.gpu_deployment is set — as a flow run of that
deployment (flows/stage.py, on a GPU work pool), waited for; a stage run that does not complete fails
the iteration."""
from __future__ import annotations

from dataclasses import dataclass
from collections.abc import Sequence

from rla_core.config import ConfigError
from tasks.storage.object_store import fetch_done, open_store
from tasks.paths import RunPaths, run_config
from tasks.stage import Stage
from tasks.storage.files import done_summary, is_done

POLL_SECONDS = 2.0  # how often the iteration asks the API whether a routed stage has finished
ROUTED_TAG = "rla-routed-stage"


class StageFailed(RuntimeError):
    """A stage routed to the GPU deployment ended in a state other than COMPLETED."""


@dataclass(frozen=True)
class StageRunner:
    run_dir: str
    iteration: int
    deployment: str | None
    routed: frozenset[str]

    @classmethod
    def of(cls, run_dir: str, iteration: int, stages: Sequence[Stage]) -> "StageRunner":
        """Read the routing from the run's config; names not in `stages` raise naming the valid ones."""
        orchestration = run_config(run_dir).orchestration
        names = [stage.name for stage in stages]
        unknown = sorted(set(orchestration.gpu_stages) - set(names))
        if unknown:
            raise ConfigError(f"orchestration.gpu_stages: unknown stage(s) {unknown}; valid: {names}")
        routed = frozenset(orchestration.gpu_stages) if orchestration.gpu_deployment else frozenset()
        return cls(run_dir, iteration, orchestration.gpu_deployment, routed)

    def __call__(self, stage: Stage) -> dict:
        """Run `stage` here, or as a flow run of the GPU deployment (unless the stage is already done:
        a resumed iteration starts no GPU run to skip it)."""
        # fetch_done: a stage finished on another machine (storage.backend=s3) is not routed again.
        out_dir = RunPaths.of(self.run_dir).stage(self.iteration, stage.name)
        if stage.name in self.routed and not fetch_done(self.run_dir, out_dir):
            return run_routed(self.deployment, self.run_dir, self.iteration, stage.name)
        return stage(self.run_dir, self.iteration)


def stage_parameters(run_dir: str, iteration: int, stage: str) -> dict:
    """The parameters of one `rla-stage` flow run (flows/stage.py:run_stage). The run's config travels
    with them: a GPU machine without the shared run folder learns from it where the run's storage is."""
    paths = RunPaths.of(run_dir)
    return {"run_dir": str(paths.root), "iteration": int(iteration), "stage": stage,
            "run_config": paths.config.read_text()}


def run_routed(deployment: str, run_dir: str, iteration: int, stage: str) -> dict:
    """Create a flow run of `deployment` for one stage, wait for it, and return the stage's summary.

    The summary is the stage's _DONE marker, read from the run folder that the GPU worker wrote into
    (a shared volume), after fetching what the worker uploaded (storage.backend=s3).
    """
    from prefect.deployments import run_deployment

    flow_run = run_deployment(deployment, parameters=stage_parameters(run_dir, iteration, stage),
                              flow_run_name=f"{stage}-{iteration}", timeout=None, poll_interval=POLL_SECONDS,
                              tags=[ROUTED_TAG, f"stage:{stage}"])
    state = flow_run.state
    if state is None or not state.is_completed():
        ended = state.name if state else "without a state"
        raise StageFailed(f"stage '{stage}' of iteration {iteration} ended {ended} on deployment "
                          f"'{deployment}' (flow run {flow_run.id})")
    out_dir = RunPaths.of(run_dir).stage(iteration, stage)
    open_store(run_config(run_dir), run_dir).hydrate(iteration)  # storage.backend=s3: fetch its outputs
    if not is_done(out_dir):
        raise StageFailed(f"stage '{stage}' of iteration {iteration} completed on '{deployment}' but {out_dir} "
                          "has no _DONE marker here: the GPU worker must see the same run folder "
                          "(a shared volume at the same path) or sync it (storage.backend=s3)")
    return {**done_summary(out_dir), "flow_run_id": str(flow_run.id)}
