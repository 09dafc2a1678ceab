"""The model registry half of `Tracker` (tasks/tracking/tracker.py mixes it in): registered versions, their lineage
and the aliases over one run's versions.

Each trained checkpoint is a version of `rla-<role>` whose tags hold its lineage (tasks/stages/commit.py writes
them: run, iteration, data_version, git_commit, git_dirty, config_hash, dvc.store, dvc.batch, dvc.model,
parent_version and, once the iteration is evaluated, its metrics `dev.success_rate`,
`heldout.success_rate`, `bench.balanced_acc`, ... as in `heldout_tags`), and whose description is that
lineage in one line (`lineage_description`), the first thing its registry page shows. The warm-start is
iteration 0's version (its artifacts on the training run). Aliases over one run's versions: `newest` = the
highest iteration registered (MLflow reserves the name `latest`), `best` = the version with the highest dev
score of its role (BEST_TAGS: the policy's `dev.success_rate`, the judge's dev-benchmark accuracy; ties:
the earlier iteration, so the warm-start stays `best` until a later version beats it on dev). Held-out
scores are tags to read, never used to choose; without a dev score there is no `best`. `update_aliases`
recomputes both from the tags, so a re-run or resume never moves them wrongly.
"""
from __future__ import annotations

import re
from pathlib import Path
from typing import Any, Mapping, Sequence

import mlflow

CHECKPOINT_EXCLUDE = ("optimizer.pt",)  # resume state, versioned by DVC, not needed to serve a model
IDENTITY_TAGS = ("run", "iteration", "data_version")  # what makes a registered version the same one
# MLflow reserves the alias `latest` (models:/<name>/latest is its own: the highest version number)
LATEST_ALIAS, BEST_ALIAS = "newest", "best"
# What `best` ranks a role's versions by: dev scores only (the first of a role's tags that any version of the
# run carries: the judge's dev benchmark is scored by balanced accuracy, coding's by UT accuracy).
BEST_TAG = "dev.success_rate"
BEST_TAGS: dict[str, tuple[str, ...]] = {"policy": (BEST_TAG,),
                                         "judge": ("dev.bench_balanced_acc", "dev.bench_ut_accuracy")}
_BAD_KEY_CHARS = re.compile(r"[^A-Za-z0-9_\-./ ]")


def _metric_key(key: str) -> str:
    return _BAD_KEY_CHARS.sub("_", key)


def _is_number(value: Any) -> bool:
    """int/float or a numpy number; bools and strings are not metrics."""
    return (isinstance(value, (int, float)) and not isinstance(value, bool)) or (
        type(value).__module__ == "numpy" and hasattr(value, "dtype") and value.dtype.kind in "iuf")


def model_name(role: str) -> str:
    """Registered model of a role's checkpoints: rla-policy, rla-judge."""
    return f"rla-{role}"


def best_tags(role: str) -> tuple[str, ...]:
    """The dev tags that rank `role`'s versions for the `best` alias (BEST_TAGS)."""
    return BEST_TAGS[role]


def heldout_tags(metrics: Mapping[str, Any]) -> dict[str, str]:
    """Evaluation metrics as model-version tags: "heldout/success_rate" -> "heldout.success_rate",
    "dev/success_rate" -> "dev.success_rate", values in full precision (repr of the float, so a tag reads
    back to the exact number)."""
    return {_metric_key(key).replace("/", "."): repr(float(value)) for key, value in metrics.items()
            if _is_number(value)}


def lineage_description(role: str, iteration: int, data_version: str, tags: Mapping[str, Any]) -> str:
    """A registered version's description, the first thing its registry page shows: where it comes from
    (iteration, git commit, config hash, data version, parent version) and its dev score (what `best`
    ranks by), in one line."""
    commit = str(tags.get("git_commit", "unknown"))
    dirty = " (uncommitted changes)" if tags.get("git_dirty") == "true" else ""
    parts = [f"iteration {iteration}", f"commit {commit[:12]}{dirty}",
             f"config {str(tags.get('config_hash', 'unknown'))[:12]}", f"data {data_version[:12] or 'unversioned'}",
             f"parent {tags.get('parent_version', 'none')}"]
    for key in best_tags(role):
        if key in tags:
            parts.append(f"{key} {float(tags[key]):.3f}")
            break
    else:
        parts.append("no dev score")
    return "Lineage: " + " · ".join(parts)


def _is_float(text: str | None) -> bool:
    try:
        return text is not None and float(text) == float(text)  # a number, not NaN
    except ValueError:
        return False


def _best_version(versions: Sequence[Any], rank_by: Sequence[str]) -> Any | None:
    """The version with the highest value of the first tag of `rank_by` that some version carries (ties: the
    earlier iteration, then the higher version number); None when none carries one."""
    for tag in rank_by:
        scored = [v for v in versions if _is_float(v.tags.get(tag))]
        if scored:
            return max(scored, key=lambda v: (float(v.tags[tag]), -int(v.tags["iteration"]), int(v.version)))
    return None


class ModelRegistry:
    """Registry methods of `Tracker`: they use its `client`, `config`, `run_name`, `_lock()` and
    `_artifact_target()`."""

    def register_checkpoint(
        self,
        model_dir: str | Path,
        name: str,
        iteration: int | None = None,
        data_version: str = "",
        tags: Mapping[str, Any] | None = None,
        exclude: Sequence[str] = CHECKPOINT_EXCLUDE,
        description: str | None = None,
    ) -> dict[str, str] | None:
        """Copy an HF checkpoint directory into the iteration run's artifacts (iteration 0, the warm-start:
        the training run's) and register it as a new version of model `name` (tags: run, iteration,
        data_version, + `tags`, e.g. the lineage) and `description` (lineage_description).
        Idempotent: a version with the same run/iteration/data_version (IDENTITY_TAGS) is returned
        instead of a duplicate, whatever its other tags (a resume may run from another commit); tags it
        lacks are added, those it has are kept. Returns {name, version, source, run_id}, or None when
        `tracking.register_models` is off."""
        if not self.config.register_models:
            return None
        identity = {"run": self.run_name, "data_version": data_version}
        if iteration is not None:
            identity["iteration"] = str(iteration)
        extra = {key: str(value) for key, value in (tags or {}).items() if key not in IDENTITY_TAGS}
        run_id = self._artifact_target(iteration or None)
        with self._lock():
            existing = self._find_version(name, identity)
            if existing is not None:
                found = self.client.get_model_version(name, existing["version"])
                for key, value in extra.items():
                    if key not in found.tags:
                        self.client.set_model_version_tag(name, existing["version"], key, value)
                if description and not found.description:
                    self.client.update_model_version(name, existing["version"], description=description)
                return existing
            source = self._upload_checkpoint(Path(model_dir), run_id, f"checkpoints/{name}", exclude)
            self._ensure_registered_model(name)
            version = self.client.create_model_version(name, source, run_id=run_id, tags={**identity, **extra},
                                                       description=description)
        return {"name": name, "version": str(version.version), "source": source, "run_id": run_id}

    def find_version(self, name: str, iteration: int) -> dict[str, str] | None:
        """This run's version of model `name` registered at `iteration` (the newest if several), or None."""
        found = [v for v in self._run_versions(name) if v.tags.get("iteration") == str(iteration)]
        if not found:
            return None
        version = max(found, key=lambda v: int(v.version))
        return {"name": name, "version": str(version.version), "source": version.source, "run_id": version.run_id}

    def set_version_tags(self, name: str, version: str | int, tags: Mapping[str, Any]) -> None:
        """Set (or overwrite) tags of a registered version, e.g. its held-out metrics after `rla eval`."""
        for key, value in tags.items():
            self.client.set_model_version_tag(name, str(version), key, str(value))

    def _run_versions(self, name: str) -> list:
        try:
            return list(self.client.search_model_versions(f"name = '{name}' and tags.run = '{self.run_name}'"))
        except mlflow.exceptions.MlflowException:  # no such registered model yet
            return []

    def update_aliases(self, name: str, rank_by: Sequence[str] = (BEST_TAG,)) -> dict[str, str]:
        """Point `newest` at this run's version of the highest iteration and `best` at its version with the
        highest value of the first tag of `rank_by` that any of them carries (`best_tags(role)`: dev scores;
        ties: the earlier iteration). Without such a tag no version is `best`, and a `best` left on one of
        this run's versions (an older rule's choice) is removed. Recomputed from the tags each time:
        idempotent. Aliases belong to the registered model: in a registry shared by several runs they
        follow the run that updated them last. Returns {alias: version}."""
        versions = [v for v in self._run_versions(name) if v.tags.get("iteration", "").isdigit()]
        if not versions:
            return {}
        chosen = {LATEST_ALIAS: max(versions, key=lambda v: (int(v.tags["iteration"]), int(v.version)))}
        best = _best_version(versions, rank_by)
        if best is not None:
            chosen[BEST_ALIAS] = best
        current = {}
        try:
            current = dict(self.client.get_registered_model(name).aliases)
        except mlflow.exceptions.MlflowException:
            pass
        for alias, version in chosen.items():
            if str(current.get(alias)) != str(version.version):
                self.client.set_registered_model_alias(name, alias, str(version.version))
        if best is None and str(current.get(BEST_ALIAS)) in {str(v.version) for v in versions}:
            self.client.delete_registered_model_alias(name, BEST_ALIAS)
        return {alias: str(version.version) for alias, version in chosen.items()}

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
