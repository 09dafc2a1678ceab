"""MLflow tracking for training flows: one parent run per training, one nested run per iteration.

Layout in the store: experiment `config.tracking.experiment`; a parent run named after the run folder
(its id kept in `runs/<name>/mlflow_run_id.txt`, so a continued training re-attaches to it); one child
run per iteration (tag `mlflow.parentRunId` = parent, tag `rla.iteration` = i), found again by those
tags when an iteration is resumed. Metrics go to the parent with `step = iteration` (the charts across
iterations) and, when an iteration is named, to its child as well.

The model registry half (versions, lineage, aliases): tasks/tracking/model_registry.py, mixed into `Tracker`.

Only `MlflowClient` is used, never the fluent `mlflow.start_run` state, so Prefect tasks in threads
or other processes can each open a `Tracker` on the same run folder without sharing globals.
Default store: `sqlite:///<run_dir>/mlflow.db`, artifacts under `<run_dir>/mlartifacts`.

Relocation: MLflow stores artifact locations as absolute `file:` URIs. When the default store of a run
folder is opened from another place than where it was created (the folder moved or copied), `Tracker`
first rebases those URIs onto the current folder (`tasks/tracking/mlflow_store.py:relocate_store`), so a copy reads and writes its own
artifacts, never the original's. A user-given `tracking.mlflow_uri` or `artifact_location` is left alone.

Config: `config.yaml` is logged once per training run (its first config); a later change of
`run.iterations` is recorded as tag `rla.iterations` (current value) and tag `rla.iterations_history`
(JSON list of {"iterations", "time"}, one entry per change), besides the `override.run.iterations` tag
of `log_params`.
"""
# Over 400 lines: the MLflow run half of Tracker (runs, params, metrics, artifacts, relocation); the registry
# half is tasks/tracking/model_registry.py.
from __future__ import annotations

import json
import logging
import os
import re
import time
from datetime import datetime, timezone
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
from rla_core.errors import BadValue, UserError
from tasks.storage import files as storage  # noqa: E402
from tasks.tracking.mlflow_store import ARTIFACT_DIR, DB_FILE, drop_cached_artifact_repo, relocate_store  # noqa: E402,F401
from tasks.tracking.model_registry import ModelRegistry  # noqa: E402
from tasks.paths import iteration_folder  # noqa: E402
from tasks.storage.files import json_safe  # noqa: E402

logging.getLogger("mlflow").setLevel(logging.WARNING)
try:  # mlflow imported earlier by someone else: drop the telemetry client it may have started
    from mlflow.telemetry.client import set_telemetry_client

    set_telemetry_client()
except Exception:  # noqa: BLE001 - telemetry internals may move; never fail tracking for them
    pass

RUN_ID_FILE = "mlflow_run_id.txt"
LOCK_FILE = ".mlflow.lock"
CONFIG_ARTIFACT = "config.yaml"
ITERATIONS_TAG = "rla.iterations"  # the run's current run.iterations
ITERATIONS_HISTORY_TAG = "rla.iterations_history"  # JSON [{"iterations": n, "time": ISO}], one entry per change
ITERATION_TAG = "rla.iteration"
PARENT_TAG = "mlflow.parentRunId"
# Older MLflow 3 UIs read this experiment tag to choose the page an experiment opens on;
# without it the experiment is treated as GenAI (traces landing page), not classic ML (runs table).
EXPERIMENT_KIND_TAG = "mlflow.experimentKind"
EXPERIMENT_KIND = "custom_model_development"  # the UI's ExperimentKind.CUSTOM_MODEL_DEVELOPMENT
# MLflow 3.17's UI ignores that tag for the landing page: it follows the `workflowType` URL query
# (else the browser's last choice, default GenAI), so links to the UI carry this query.
ML_WORKFLOW_QUERY = "workflowType=machine_learning"
_MAX_PARAM_VALUE = 6000  # mlflow.utils.validation.MAX_PARAM_VAL_LENGTH
_BATCH = 100  # params/tags per log_batch call
_BAD_KEY_CHARS = re.compile(r"[^A-Za-z0-9_\-./ ]")

log = logging.getLogger(__name__)


def default_tracking_uri(run_dir: str | Path) -> str:
    return f"sqlite:///{Path(run_dir).resolve() / DB_FILE}"


def _artifact_location(tracking_uri: str) -> str | None:
    """`mlartifacts/` beside a sqlite file (MLflow would use ./mlartifacts of the cwd); None lets a
    tracking server choose its own artifact root."""
    if tracking_uri.startswith("sqlite:///"):
        return (Path(tracking_uri.removeprefix("sqlite:///")).resolve().parent / ARTIFACT_DIR).as_uri()
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
    return iteration_folder(iteration)


class TrackingUnavailable(UserError):
    """The MLflow tracking server cannot be reached (after MLflow's own retries)."""


_UNREACHABLE = ("Max retries exceeded", "Connection refused", "ConnectionError", "NewConnectionError",
                "Failed to establish a new connection", "RemoteDisconnected", "timed out", "Read timed out",
                "too many 5")


def _unreachable(error: BaseException) -> bool:
    import requests

    return isinstance(error, (requests.ConnectionError, requests.Timeout)) or (
        isinstance(error, mlflow.exceptions.MlflowException) and any(s in str(error) for s in _UNREACHABLE))


class GuardedClient:
    """MlflowClient whose calls raise TrackingUnavailable (one line) when the tracking server is down.

    MLflow retries an HTTP call itself (MLFLOW_HTTP_REQUEST_MAX_RETRIES, with back-off: `rla` defaults
    to 4 retries, about 15 s), so a brief outage is ridden out. A longer one stops the run at the call:
    metrics are logged after each stage's `_DONE`, so the stage's outputs are complete on disk, and the
    re-run (when the server is back) skips the stage and logs its metrics then. Nothing is lost."""

    def __init__(self, client: MlflowClient, uri: str) -> None:
        self._client, self._uri = client, uri

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._client, name)
        if not callable(attr):
            return attr

        def call(*args: Any, **kwargs: Any) -> Any:
            try:
                return attr(*args, **kwargs)
            except Exception as error:
                if _unreachable(error):
                    raise TrackingUnavailable(
                        f"MLflow tracking server {self._uri} is unreachable ({name}: {type(error).__name__}); "
                        "the run stopped; every completed stage is kept: re-run the same command when the "
                        "server is back, and their metrics are logged then") from None
                raise

        return call


class Tracker(ModelRegistry):
    """Handle on one training's MLflow runs; cheap to reopen from (run_dir, config) in any process."""

    def __init__(self, run_dir: str | Path, config: TrackingConfig | None = None, run_name: str | None = None):
        """Create the parent run, or re-attach to the one named in `run_dir/mlflow_run_id.txt`
        (its status is left as is: call `start()` when a training actually continues)."""
        self.run_dir = Path(run_dir).resolve()
        self.config = config or TrackingConfig()
        self.run_name = run_name or self.run_dir.name
        self.tracking_uri = self.config.mlflow_uri or default_tracking_uri(self.run_dir)
        if self.config.mlflow_uri is None and self.config.artifact_location is None:
            relocate_store(self.run_dir)  # the run folder's own store, maybe moved or copied here: point it here
        self.client = GuardedClient(MlflowClient(tracking_uri=self.tracking_uri, registry_uri=self.tracking_uri),
                                    self.tracking_uri)
        self.experiment_id = self._experiment()
        with self._lock():
            self.run_id = self._parent_run()
        self._iteration_runs: dict[int, str] = {}
        self._artifact_uris: dict[str, str] = {}  # run id -> its artifact URI in this store

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

    def _artifact_target(self, iteration: int | None) -> str:
        """`_target`, for an artifact call: MLflow caches a run's artifact repository per process by run
        id alone, and a copied store holds the same run ids as its original, so a cached repository
        that is not this store's (a process that used the original, then the copy) is dropped first."""
        run_id = self._target(iteration)
        if run_id not in self._artifact_uris:
            self._artifact_uris[run_id] = self.client.get_run(run_id).info.artifact_uri
        drop_cached_artifact_repo(run_id, self._artifact_uris[run_id])
        return run_id

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
        """Flat params (`rollout.n` = "8", ...) on the parent plus the full YAML as `config.yaml`, logged
        once: a continued training keeps the first one (changed values become `override.<key>` tags, see
        `log_params`) and records a change of run.iterations with `record_iterations`."""
        self.log_params(config.model_dump(mode="json"))
        run_id = self._artifact_target(None)
        if CONFIG_ARTIFACT not in {a.path for a in self.client.list_artifacts(run_id)}:
            self.client.log_text(run_id, config_to_yaml(config), CONFIG_ARTIFACT)
        self.record_iterations(config.run.iterations)

    def record_iterations(self, iterations: int) -> bool:
        """Tag `rla.iterations` = the current run.iterations and append to `rla.iterations_history`
        ({"iterations", "time"} per change; a store from before these tags starts its history with the
        first logged `run.iterations` param at the run's start). Nothing is written when the value is
        unchanged. Returns whether it changed."""
        run = self.client.get_run(self.run_id)
        tags, value = run.data.tags, str(iterations)
        if tags.get(ITERATIONS_TAG) == value:
            return False
        try:
            history = json.loads(tags.get(ITERATIONS_HISTORY_TAG, "[]"))
        except json.JSONDecodeError:
            history = []
        first = run.data.params.get("run.iterations")
        if not history and first is not None and first != value:
            history.append({"iterations": int(first), "time": _iso(run.info.start_time)})
        history.append({"iterations": iterations, "time": _iso(int(time.time() * 1000))})
        text = json.dumps(history, separators=(",", ":"))
        while len(text) > _MAX_PARAM_VALUE and len(history) > 2:  # keep the first and the newest changes
            del history[1]
            text = json.dumps(history, separators=(",", ":"))
        self.set_tags({ITERATIONS_TAG: value, ITERATIONS_HISTORY_TAG: text})
        return True

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

    def has_metrics(self, keys: Sequence[str], step: int, iteration: int | None = None) -> bool:
        """Whether every metric in `keys` has a value at `step` on the parent (or iteration) run (e.g.
        an evaluation logged before, so that it is not logged twice)."""
        run_id = self._target(iteration)
        logged = self.client.get_run(run_id).data.metrics
        return all(_metric_key(key) in logged and any(m.step == step for m in
                                                      self.client.get_metric_history(run_id, _metric_key(key)))
                   for key in keys)

    def log_artifact(self, path: str | Path, artifact_path: str | None = None, iteration: int | None = None) -> None:
        """A file or a whole directory, under `artifact_path` of the parent (or iteration) run."""
        path = Path(path)
        run_id = self._artifact_target(iteration)
        if path.is_dir():
            self.client.log_artifacts(run_id, str(path), artifact_path)
        else:
            self.client.log_artifact(run_id, str(path), artifact_path)

    def log_dict(self, data: Mapping[str, Any] | list, artifact_file: str, iteration: int | None = None) -> None:
        """JSON (or YAML if the name ends in .yaml) artifact, e.g. `gates/rollouts.json`."""
        self.client.log_dict(self._artifact_target(iteration), json_safe(data), artifact_file)

    def log_text(self, text: str, artifact_file: str, iteration: int | None = None) -> None:
        self.client.log_text(self._artifact_target(iteration), text, artifact_file)

    def set_tags(self, tags: Mapping[str, Any], iteration: int | None = None) -> None:
        """Tags (values as strings) on the parent run, or on the iteration's run."""
        batch = [RunTag(key[:250], str(value)[:_MAX_PARAM_VALUE]) for key, value in tags.items()]
        for start in range(0, len(batch), _BATCH):
            self.client.log_batch(self._target(iteration), tags=batch[start : start + _BATCH])

    # --- model registry ---------------------------------------------------------------------------


def _iso(millis: int | None) -> str:
    """UTC time of an MLflow timestamp (ms), to the second: 2025-01-31T12:00:00Z."""
    return datetime.fromtimestamp((millis or 0) / 1000, timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


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
