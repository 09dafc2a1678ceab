"""What a stage leaves in its `_DONE` marker, typed: one summary class per stage, and the one rule for
metric names.

The metric prefix is the stage's name: a stage body returns its metrics without a prefix and
tasks/stage.py adds `<stage>/` (the rollout's success rate is `rollout/success_rate`, the data stage's
compute counts `data/compute/episodes`). The evaluations are the one exception: the warm-start's
baseline, the in-loop `evaluate` and `rla eval`'s `evaluate_checkpoint` score the same splits, so their
metrics are named by split (`heldout/`, `heldout_greedy/`, `bench/`, `dev/`) and one curve joins them.

Run folders written before this rule carry the old names (`train/success_rate`, `env/accepted`,
`compute/episodes`, `policy/loss`, `gates/*_failed`); `read_summary` renames them, so every reader sees
one set of names whatever the folder's age.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any, TypeVar

from pydantic import BaseModel, ConfigDict, Field

from tasks.storage.files import done_summary

# the splits an evaluation stage names its metrics by (no stage prefix)
EVAL_SPLITS = ("heldout", "heldout_greedy", "bench", "dev")

# names before the stage-prefix rule: stage -> ((old prefix, new prefix), ...), first match wins
LEGACY_PREFIXES: dict[str, tuple[tuple[str, str], ...]] = {
    "rollout": (("train/", "rollout/"),),
    "judge": (("judge/train_", "judge/"),),
    "adapt": (("env/", "adapt/"),),
    "data": (("compute/", "data/compute/"),),
    "validate": (("gates/", "validate/"),),
    "train_policy": (("policy/", "train_policy/"),),
    "train_judge": (("judge/", "train_judge/"),),
}


class StageSummary(BaseModel):
    """Every stage's: its metrics (prefixed, see the module doc), its seconds, the peak resident memory of
    its process while it ran (GiB; None where unmeasured: tasks/resources.py), and whether this call found
    it done by an earlier attempt."""
    model_config = ConfigDict(extra="forbid")
    metrics: dict[str, float] = Field(default_factory=dict)
    seconds: float | None = None
    peak_rss_gib: float | None = None
    resumed: bool = False

    def stored(self) -> dict[str, Any]:
        """What `_DONE` holds (never `resumed`: that is a property of the call, not of the output)."""
        return self.model_dump(mode="json", exclude={"resumed"}, exclude_none=True)


class SetupSummary(StageSummary):
    """seed, init_models, bootstrap: counts and warm-start losses under the setting's own names."""
    model_config = ConfigDict(extra="allow")


class SelectSummary(StageSummary):
    tasks: int
    candidates: int


class AdaptSummary(StageSummary):
    rejected: list[str] = Field(default_factory=list)  # last iteration's candidates that failed validation


class ValidateSummary(StageSummary):
    gates: str = "enabled"


class TrainSummary(StageSummary):
    model_dir: str  # relative to the run root: the model this update left (or started from, when not trained)
    trained: bool
    why: str | None = None  # "disabled" | "no samples" when not trained


class EvaluateSummary(StageSummary):
    evaluated: bool = True
    final: bool = True  # the greedy policy and the judge on the held-out episodes were scored too


class CommitSummary(StageSummary):
    """commit (an iteration) and version_start (the warm-start): what DVC and the registry recorded."""
    data_version: str = ""
    registered: dict[str, Any] = Field(default_factory=dict)
    record: str | None = None  # where the run's record was published (version_start)
    pruned: list[str] = Field(default_factory=list)  # checkpoint folders deleted by run.keep_checkpoints


SummaryT = TypeVar("SummaryT", bound=StageSummary)


def prefixed(stage: str, metrics: dict[str, float], prefix: bool = True) -> dict[str, float]:
    """A body's metrics under the stage's prefix (no prefix for the evaluations, whose names must start
    with a split)."""
    if not prefix:
        stray = sorted(k for k in metrics if k.split("/", 1)[0] not in EVAL_SPLITS)
        if stray:
            raise ValueError(f"stage {stage}: evaluation metrics must start with one of {EVAL_SPLITS}: {stray}")
        return dict(metrics)
    return {f"{stage}/{key}": float(value) for key, value in metrics.items()}


def migrate(stage: str, summary: dict[str, Any]) -> dict[str, Any]:
    """A stored summary with the metric names of before the stage-prefix rule renamed (see LEGACY_PREFIXES;
    no new name starts with an old prefix, so a summary of either age comes out the same)."""
    rules = LEGACY_PREFIXES.get(stage, ())
    metrics = summary.get("metrics")
    if not rules or not isinstance(metrics, dict):
        return summary
    renamed = {}
    for key, value in metrics.items():
        renamed[next((new + key[len(old):] for old, new in rules if key.startswith(old)), key)] = value
    return {**summary, "metrics": renamed}


def parse_summary(stage: str, raw: dict[str, Any], kind: type[SummaryT]) -> SummaryT:
    """A summary as returned by a stage call or read from `_DONE` (any age), typed. Keys that are not the
    class's own are left out (a routed stage's flow run id, a reader asking only for the common fields);
    a stage's body is held to its class when the summary is written (tasks/stage.py)."""
    raw = migrate(stage, raw)
    if kind.model_config.get("extra") != "allow":
        raw = {key: value for key, value in raw.items() if key in kind.model_fields}
    return kind.model_validate(raw)


def read_summary(folder: str | Path, kind: type[SummaryT] = StageSummary) -> SummaryT:  # type: ignore[assignment]
    """The typed summary of a completed stage folder (its `_DONE`); the folder's name is the stage's."""
    folder = Path(folder)
    return parse_summary(folder.name, done_summary(folder), kind)
