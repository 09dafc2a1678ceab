"""MLflow tracking for training flows: one parent run per training, one nested run per iteration.

Layout in the store: experiment `config.tracking.experiment`; a parent run named after the run folder
(its id kept in `runs/<name>/mlflow_run_id.txt`, so a continued training re-attaches to it); one child
run per iteration (tag `mlflow.parentRunId` = parent, tag `rla.iteration` = i), found again by those
tags when an iteration is resumed. Metrics go to the parent with `step = iteration` (the charts across
iterations) and, when an iteration is named, to its child as well.

Only `MlflowClient` is used, never the fluent `mlflow.start_run` state, so Prefect tasks in threads
or other processes can each open a `Tracker` on the same run folder without sharing globals.
Default store: `sqlite:///<run_dir>/mlflow.db`, artifacts under `<run_dir>/mlartifacts`.
"""
from __future__ import annotations

import logging
import os
import re
import time
from pathlib import Path
from typing import Any, Mapping, Sequence

# Quiet and offline before mlflow is imported: no telemetry thread, no progress bars, warnings only.
for _key, _value in {
    "MLFLOW_DISABLE_TELEMETRY": "true",
    "_MLFLOW_TELEMETRY_PRE_WARM_DATABRICKS_SDK": "false",
    "MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR": "false",
    "MLFLOW_LOGGING_LEVEL": "WARNING",
}.items():
    os.environ.setdefault(_key, _value)

import mlflow  # noqa: E402
from filelock import FileLock  # noqa: E402
from mlflow import MlflowClient  # noqa: E402
from mlflow.entities import Metric, Param, RunTag  # noqa: E402

from rla_core.config import Config, TrackingConfig, config_to_yaml  # noqa: E402
from rla_core.errors import BadValue
from tasks import storage  # noqa: E402
from tasks.storage import json_safe  # noqa: E402

logging.getLogger("mlflow").setLevel(logging.WARNING)
try:  # mlflow imported earlier by someone else: drop the telemetry client it may have started
    from mlflow.telemetry.client import set_telemetry_client

    set_telemetry_client()
except Exception:  # noqa: BLE001 - telemetry internals may move; never fail tracking for them
    pass

RUN_ID_FILE = "mlflow_run_id.txt"
LOCK_FILE = ".mlflow.lock"
ITERATION_TAG = "rla.iteration"
PARENT_TAG = "mlflow.parentRunId"
# Older MLflow 3 UIs read this experiment tag to choose the page an experiment opens on;
# without it the experiment is treated as GenAI (traces landing page), not classic ML (runs table).
EXPERIMENT_KIND_TAG = "mlflow.experimentKind"
EXPERIMENT_KIND = "custom_model_development"  # the UI's ExperimentKind.CUSTOM_MODEL_DEVELOPMENT
# MLflow 3.17's UI ignores that tag for the landing page: it follows the `workflowType` URL query
# (else the browser's last choice, default GenAI), so links to the UI carry this query.
ML_WORKFLOW_QUERY = "workflowType=machine_learning"
CHECKPOINT_EXCLUDE = ("optimizer.pt",)  # resume state, versioned by DVC, not needed to serve a model
_MAX_PARAM_VALUE = 6000  # mlflow.utils.validation.MAX_PARAM_VAL_LENGTH
_BATCH = 100  # params/tags per log_batch call
_BAD_KEY_CHARS = re.compile(r"[^A-Za-z0-9_\-./ ]")

log = logging.getLogger(__name__)


def default_tracking_uri(run_dir: str | Path) -> str:
    return f"sqlite:///{Path(run_dir).resolve() / 'mlflow.db'}"


def _artifact_location(tracking_uri: str) -> str | None:
    """`mlartifacts/` beside a sqlite file (MLflow would use ./mlartifacts of the cwd); None lets a
    tracking server choose its own artifact root."""
    if tracking_uri.startswith("sqlite:///"):
        return (Path(tracking_uri.removeprefix("sqlite:///")).resolve().parent / "mlartifacts").as_uri()
    return None


def experiment_ui_url(base_url: str, experiment_id: str) -> str:
    """Link that opens experiment `experiment_id` of the MLflow UI at `base_url` on its runs table."""
    return f"{base_url.rstrip('/')}/#/experiments/{experiment_id}?{ML_WORKFLOW_QUERY}"


def flatten(tree: Mapping[str, Any], prefix: str = "") -> dict[str, str]:
    """{"a": {"b": 1}} -> {"a.b": "1"}; lists and other leaves become their string form."""
    flat: dict[str, str] = {}
    for key, value in tree.items():
        name = f"{prefix}{key}"
        if isinstance(value, Mapping) and value:
            flat.update(flatten(value, f"{name}."))
        else:
            flat[name] = str(value)[:_MAX_PARAM_VALUE]
    return flat


def _metric_key(key: str) -> str:
    return _BAD_KEY_CHARS.sub("_", key)


def _iteration_name(iteration: int) -> str:
    return f"iter_{iteration:04d}"


class Tracker:
    """Handle on one training's MLflow runs; cheap to reopen from (run_dir, config) in any process."""

    def __init__(self, run_dir: str | Path, config: TrackingConfig | None = None, run_name: str | None = None):
        """Create the parent run, or re-attach to the one named in `run_dir/mlflow_run_id.txt`
        (its status is left as is: call `start()` when a training actually continues)."""
        self.run_dir = Path(run_dir).resolve()
        self.config = config or TrackingConfig()
        self.run_name = run_name or self.run_dir.name
        self.tracking_uri = self.config.mlflow_uri or default_tracking_uri(self.run_dir)
        self.client = MlflowClient(tracking_uri=self.tracking_uri, registry_uri=self.tracking_uri)
        self.experiment_id = self._experiment()
        with self._lock():
            self.run_id = self._parent_run()
        self._iteration_runs: dict[int, str] = {}

    # --- runs -------------------------------------------------------------------------------

    def _experiment(self) -> str:
        """Id of `config.experiment` (created, or restored if deleted), tagged as a classic-ML
        experiment; an existing experiment without the tag gets it, so older stores are fixed too."""
        name = self.config.experiment
        found = self.client.get_experiment_by_name(name)
        if found is None:
            location = self.config.artifact_location or _artifact_location(self.tracking_uri)
            return self.client.create_experiment(name, artifact_location=location,
                                                 tags={EXPERIMENT_KIND_TAG: EXPERIMENT_KIND})
        if found.lifecycle_stage == "deleted":
            self.client.restore_experiment(found.experiment_id)
        if EXPERIMENT_KIND_TAG not in found.tags:
            self.client.set_experiment_tag(found.experiment_id, EXPERIMENT_KIND_TAG, EXPERIMENT_KIND)
        return found.experiment_id

    def _parent_run(self) -> str:
        id_file = self.run_dir / RUN_ID_FILE
        if id_file.is_file():
            run_id = id_file.read_text().strip()
            if self._run_exists(run_id):
                return run_id
            log.warning("MLflow run %s from %s not found in %s; starting a new one", run_id, id_file, self.tracking_uri)
        run = self.client.create_run(self.experiment_id, run_name=self.run_name, tags={"rla.run": self.run_name})
        storage.write_text(id_file, run.info.run_id + "\n")
        return run.info.run_id

    def _run_exists(self, run_id: str) -> bool:
        try:
            return self.client.get_run(run_id).info.lifecycle_stage == "active"
        except mlflow.exceptions.MlflowException:
            return False

    def iteration_run(self, iteration: int) -> str:
        """Id of the nested run of `iteration`: found by its tags when resumed, else created
        (RUNNING). Never changes the status of a found run."""
        if iteration in self._iteration_runs:
            return self._iteration_runs[iteration]
        with self._lock():  # tasks in other threads/processes must not create a second child
            found = self.client.search_runs(
                [self.experiment_id],
                filter_string=f"tags.{PARENT_TAG} = '{self.run_id}' and tags.`{ITERATION_TAG}` = '{iteration}'",
                order_by=["attributes.start_time ASC"],
                max_results=1,
            )
            if found:
                run_id = found[0].info.run_id
            else:
                tags = {PARENT_TAG: self.run_id, ITERATION_TAG: str(iteration), "rla.run": self.run_name}
                name = _iteration_name(iteration)
                run_id = self.client.create_run(self.experiment_id, run_name=name, tags=tags).info.run_id
        self._iteration_runs[iteration] = run_id
        return run_id

    def _lock(self) -> FileLock:
        self.run_dir.mkdir(parents=True, exist_ok=True)
        return FileLock(str(self.run_dir / LOCK_FILE), timeout=60)

    # Statuses change only here: a Tracker is a handle that any task may open, even after `finish`.

    def start(self) -> None:
        """Mark the parent run RUNNING (new runs already are; a continued training was closed)."""
        self.client.update_run(self.run_id, status="RUNNING")

    def finish(self, status: str = "FINISHED") -> None:
        """Close the parent run: FINISHED, FAILED or KILLED."""
        self.client.set_terminated(self.run_id, status=status)

    def start_iteration(self, iteration: int) -> str:
        """The iteration's nested run (created or found), marked RUNNING; returns its id."""
        run_id = self.iteration_run(iteration)
        self.client.update_run(run_id, status="RUNNING")
        return run_id

    def end_iteration(self, iteration: int, status: str = "FINISHED") -> None:
        self.client.set_terminated(self.iteration_run(iteration), status=status)

    def _target(self, iteration: int | None) -> str:
        return self.run_id if iteration is None else self.iteration_run(iteration)

    # --- params, metrics, artifacts ---------------------------------------------------------------

    def log_params(self, params: Mapping[str, Any], iteration: int | None = None) -> dict[str, str]:
        """Log params not yet logged. MLflow params are immutable: a changed value on a continued
        training is recorded as tag `override.<key>` instead of failing. Returns the overrides."""
        run_id = self._target(iteration)
        existing = self.client.get_run(run_id).data.params
        new, overrides = [], {}
        for key, value in flatten(params).items():
            if key not in existing:
                new.append(Param(key[:250], value))
            elif existing[key] != value:
                overrides[key] = value
        for start in range(0, len(new), _BATCH):
            self.client.log_batch(run_id, params=new[start : start + _BATCH])
        tags = [RunTag(f"override.{key}"[:250], value) for key, value in overrides.items()]
        for start in range(0, len(tags), _BATCH):
            self.client.log_batch(run_id, tags=tags[start : start + _BATCH])
        return overrides

    def log_config(self, config: Config) -> None:
        """Flat params (`rollout.n` = "8", ...) on the parent plus the full YAML as `config.yaml`."""
        self.log_params(config.model_dump(mode="json"))
        self.client.log_text(self.run_id, config_to_yaml(config), "config.yaml")

    def log_metrics(self, metrics: Mapping[str, float], step: int, iteration: int | None = None) -> None:
        """Numeric metrics at `step` on the parent, and on the iteration's run when `iteration` is given."""
        now = int(time.time() * 1000)
        batch = [
            Metric(_metric_key(key), float(value), now, step)
            for key, value in metrics.items()
            if _is_number(value)
        ]
        if not batch:
            return
        targets = [self.run_id] if iteration is None else [self.run_id, self.iteration_run(iteration)]
        for run_id in targets:
            self.client.log_batch(run_id, metrics=batch)

    def log_artifact(self, path: str | Path, artifact_path: str | None = None, iteration: int | None = None) -> None:
        """A file or a whole directory, under `artifact_path` of the parent (or iteration) run."""
        path = Path(path)
        run_id = self._target(iteration)
        if path.is_dir():
            self.client.log_artifacts(run_id, str(path), artifact_path)
        else:
            self.client.log_artifact(run_id, str(path), artifact_path)

    def log_dict(self, data: Mapping[str, Any] | list, artifact_file: str, iteration: int | None = None) -> None:
        """JSON (or YAML if the name ends in .yaml) artifact, e.g. `gates/rollouts.json`."""
        self.client.log_dict(self._target(iteration), json_safe(data), artifact_file)

    def log_text(self, text: str, artifact_file: str, iteration: int | None = None) -> None:
        self.client.log_text(self._target(iteration), text, artifact_file)

    # --- model registry ---------------------------------------------------------------------------

    def register_checkpoint(
        self,
        model_dir: str | Path,
        name: str,
        iteration: int | None = None,
        data_version: str = "",
        tags: Mapping[str, Any] | None = None,
        exclude: Sequence[str] = CHECKPOINT_EXCLUDE,
    ) -> dict[str, str] | None:
        """Copy an HF checkpoint directory into the iteration run's artifacts and register it as a
        new version of model `name` (tags: run, iteration, data_version, + `tags`). Idempotent: a
        version with the same run/iteration/data_version is returned instead of a duplicate.
        Returns {name, version, source, run_id}, or None when `tracking.register_models` is off."""
        if not self.config.register_models:
            return None
        version_tags = {"run": self.run_name, "data_version": data_version}
        if iteration is not None:
            version_tags["iteration"] = str(iteration)
        version_tags.update({key: str(value) for key, value in (tags or {}).items()})
        run_id = self._target(iteration)
        with self._lock():
            existing = self._find_version(name, version_tags)
            if existing is not None:
                return existing
            source = self._upload_checkpoint(Path(model_dir), run_id, f"checkpoints/{name}", exclude)
            self._ensure_registered_model(name)
            version = self.client.create_model_version(name, source, run_id=run_id, tags=version_tags)
        return {"name": name, "version": str(version.version), "source": source, "run_id": run_id}

    def _upload_checkpoint(self, model_dir: Path, run_id: str, artifact_path: str, exclude: Sequence[str]) -> str:
        """Copy the checkpoint's files (minus `exclude`) to the run's artifacts; returns their URI."""
        if not model_dir.is_dir():
            raise FileNotFoundError(f"checkpoint directory not found: {model_dir}")
        for file in sorted(p for p in model_dir.rglob("*") if p.is_file() and p.name not in exclude):
            parent = file.parent.relative_to(model_dir).as_posix()
            self.client.log_artifact(run_id, str(file), artifact_path if parent == "." else f"{artifact_path}/{parent}")
        return f"{self.client.get_run(run_id).info.artifact_uri}/{artifact_path}"

    def _ensure_registered_model(self, name: str) -> None:
        try:
            self.client.get_registered_model(name)
        except mlflow.exceptions.MlflowException:
            self.client.create_registered_model(name, description="RLAnything checkpoint (HF directory)")

    def _find_version(self, name: str, version_tags: Mapping[str, str]) -> dict[str, str] | None:
        clauses = [f"name = '{name}'"] + [f"tags.{key} = '{value}'" for key, value in version_tags.items() if value]
        for version in self.client.search_model_versions(" and ".join(clauses)):
            if all(version.tags.get(key, "") == value for key, value in version_tags.items()):
                return {"name": name, "version": str(version.version), "source": version.source,
                        "run_id": version.run_id}
        return None

    def download_checkpoint(self, name: str, version: str | int, dst: str | Path) -> Path:
        """Copy a registered checkpoint back to a local HF directory (returns its path)."""
        uri = self.client.get_model_version_download_uri(name, str(version))
        Path(dst).mkdir(parents=True, exist_ok=True)
        return Path(mlflow.artifacts.download_artifacts(artifact_uri=uri, dst_path=str(dst)))


def _is_number(value: Any) -> bool:
    """int/float or a numpy number; bools and strings are not metrics."""
    return (isinstance(value, (int, float)) and not isinstance(value, bool)) or _is_numpy_number(value)


def _is_numpy_number(value: Any) -> bool:
    return type(value).__module__ == "numpy" and hasattr(value, "dtype") and value.dtype.kind in "iuf"


def read_metrics(run: str | Path, tracking_uri: str | None = None) -> dict[str, dict[int, float]]:
    """Full history of every metric of a run: {key: {step: value}}. `run` is a run folder (its
    parent run, default sqlite store unless `tracking_uri`) or a run id (then `tracking_uri` is needed)."""
    client, run_id = _client_and_run(run, tracking_uri)
    history: dict[str, dict[int, float]] = {}
    for key in client.get_run(run_id).data.metrics:
        history[key] = {m.step: m.value for m in client.get_metric_history(run_id, key)}
    return history


def read_params(run: str | Path, tracking_uri: str | None = None) -> dict[str, str]:
    client, run_id = _client_and_run(run, tracking_uri)
    return dict(client.get_run(run_id).data.params)


def _client_and_run(run: str | Path, tracking_uri: str | None) -> tuple[MlflowClient, str]:
    path = Path(run)
    if (path / RUN_ID_FILE).is_file():
        uri = tracking_uri or default_tracking_uri(path)
        return MlflowClient(uri, uri), (path / RUN_ID_FILE).read_text().strip()
    if tracking_uri is None:
        raise BadValue(f"{run!s}: not a run folder with {RUN_ID_FILE}; pass tracking_uri with a run id")
    return MlflowClient(tracking_uri, tracking_uri), str(run)
