"""The paper's ablation: four rows at equal compute, each adding one component of the loop, and the
statistics that compare them over seeds.

    a  outcome only            λ = 0, fixed judge, fixed task set
    b  + step rewards          λ from the config, fixed judge, fixed task set
    c  + judge training        λ, judge trained, fixed task set
    d  + env adaptation        λ, judge trained, task set adapted (the full loop)
    e  full loop, λ = 0        judge trained, task set adapted, the judge's signal out of the policy reward

λ is where the setting keeps it (`JudgeWeight`): the step-reward weight `reward.step_weight` of the
games, the weight of the judge's unit tests `coding.judge_test_weight` in coding. Rows change only these
three switches, so K, N, m, turns and the warm-start are the same in every row of a seed. Means are over seeds with their standard error; adjacent rows are compared by paired
differences (same seed, same held-out tasks), which removes the seed-to-seed spread of the warm-start.
"""
from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING
from rla_core.errors import UnknownName

if TYPE_CHECKING:
    from rla_core.config import Config


@dataclass(frozen=True)
class Row:
    key: str
    label: str
    step_rewards: bool  # λ > 0 (else λ = 0)
    judge_train: bool
    adapt: bool

    def overrides(self, weight: "JudgeWeight") -> list[str]:
        """The `--set` overrides that make a base config into this row."""
        return [f"{weight.key}={weight.value if self.step_rewards else 0.0}",
                f"judge.train={str(self.judge_train).lower()}", f"environment.adapt={str(self.adapt).lower()}"]


@dataclass(frozen=True)
class JudgeWeight:
    """λ as a setting keeps it: the config key (the setting's `judge_weight_key`) and the base config's value."""

    key: str
    value: float

    @classmethod
    def of(cls, cfg: "Config", key: str) -> "JudgeWeight":
        value: object = cfg
        for part in key.split("."):
            value = getattr(value, part)
        return cls(key, float(value))  # type: ignore[arg-type]


def row_overrides(weight: JudgeWeight, experiment: str, root: str, row: Row, seed: int) -> list[str]:
    """The `--set` overrides of the (row, seed) training run of an ablation under `root` (added after the
    user's own): its folder, name and seed, the ablation's shared MLflow store, and the row's switches."""
    return [f"run.output_dir={root}", f"run.name={row.key}-seed{seed}", f"run.seed={seed}",
            f"tracking.mlflow_uri=sqlite:///{root}/mlflow.db", f"tracking.experiment={experiment}",
            *row.overrides(weight)]


ROWS: dict[str, Row] = {
    "a": Row("a", "outcome only", False, False, False),
    "b": Row("b", "+ step rewards (fixed judge)", True, False, False),
    "c": Row("c", "+ judge training", True, True, False),
    "d": Row("d", "+ environment adaptation (full)", True, True, True),
    "e": Row("e", "full loop, λ = 0", False, True, True),
}


# keys that rows and seeds of one ablation set differently (λ is added per setting): the ablation report's
# same-experiment check and the --warm-start check both allow them
ROW_KEYS = ("run.name", "run.seed", "tracking.mlflow_uri", "tracking.experiment", "judge.train", "environment.adapt")
# keys (or whole sections) that change neither what a run trains nor what its final evaluation measures: where
# its folder is and where its stages run, where it is logged and versioned, how many checkpoints stay on disk,
# whether cached judge scores are reused, and how often it is evaluated on the way (an evaluation changes no
# weight and no later stage's input: tests/flows/test_iteration_e2e.py). Runs that differ only in these (and in
# ROW_KEYS and λ) are one experiment; run.iterations is not among them: a run's length is part of its result.
UNMEASURED_KEYS = ("run.output_dir", "run.keep_checkpoints", "run.eval_every", "eval.reuse_judge_scores",
                   "orchestration", "tracking", "versioning")


# keys that act only on the judge's updates in the iterations (its learning rate, which problems train it): they
# make two experiments only where both runs train the judge; a fixed-judge row (a, b) is the same run whatever
# they are
JUDGE_TRAINING_KEYS = ("train.judge_lr", "coding.judge_alpha_high")
# keys read by the iteration stages only, never by the seed, the warm start or the baseline evaluation
# (tests/rla_core/test_ablation.py checks where they are read): a warm start made with other values of these is
# the same warm start, so --warm-start may reuse it
ITERATION_ONLY_KEYS = ("train.lr", *JUDGE_TRAINING_KEYS)


def experiment_differences(differences: Sequence[str], weight_key: str, judge_trained: bool = True) -> list[str]:
    """The keys of `differences` (dotted config keys two runs set differently) that make them two
    experiments: all but ROW_KEYS, λ (`weight_key`) and UNMEASURED_KEYS, and JUDGE_TRAINING_KEYS unless
    both runs train the judge (`judge_trained`)."""
    from rla_core.config import key_under

    free = (*ROW_KEYS, weight_key, *UNMEASURED_KEYS, *(() if judge_trained else JUDGE_TRAINING_KEYS))
    return [key for key in differences if not key_under(key, free)]


def check_base(cfg: "Config", rows: Sequence[Row], weight: JudgeWeight) -> None:
    """Raise ConfigError when the base config cannot make these rows at equal compute: a step-reward row
    needs λ > 0, and every row needs the same fixed number of optimizer steps per update."""
    from rla_core.config import ConfigError

    with_lambda = [r.key for r in rows if r.step_rewards]
    if weight.value <= 0 and with_lambda:
        raise ConfigError(f"{weight.key} (λ of this setting) must be > 0 for the rows with the judge's signal in "
                          f"the policy reward ({', '.join(with_lambda)}); set it with --set {weight.key}=...")
    if cfg.train.optimizer_steps is None:
        raise ConfigError("train.optimizer_steps must be set for an ablation (equal optimizer steps in every row); "
                          "None lets each row take as many steps as its sample count needs")


def parse_rows(text: str) -> list[Row]:
    """'abcd' or 'a,c' -> rows in the canonical order; unknown keys raise naming the valid ones."""
    keys = [k for k in text.replace(",", "").strip()]
    unknown = sorted(set(keys) - set(ROWS))
    if unknown or not keys:
        raise UnknownName(f"unknown ablation rows {unknown or text!r}; valid: {''.join(ROWS)}")
    return [ROWS[k] for k in ROWS if k in keys]


def mean_se(values: Sequence[float]) -> tuple[float, float]:
    """Mean and standard error (sample std / √n; 0 for a single value)."""
    n = len(values)
    if n == 0:
        return math.nan, math.nan
    mean = sum(values) / n
    if n == 1:
        return mean, 0.0
    var = sum((v - mean) ** 2 for v in values) / (n - 1)
    return mean, math.sqrt(var / n)


def paired_differences(results: Mapping[str, Mapping[int, float]], rows: Sequence[str]
                       ) -> list[tuple[str, str, list[float]]]:
    """(row, previous row, per-seed differences over the seeds both have) for adjacent rows, and the
    last row against the first. results: row -> seed -> value."""
    pairs = list(zip(rows[1:], rows[:-1]))
    if len(rows) > 2:
        pairs.append((rows[-1], rows[0]))
    out = []
    for row, previous in pairs:
        seeds = sorted(set(results.get(row, {})) & set(results.get(previous, {})))
        out.append((row, previous, [results[row][s] - results[previous][s] for s in seeds]))
    return out
