"""The Setting interface, the registry that maps `environment.name` to a setting, and the model helpers
every setting's set-up shares.

A setting supplies the bodies of the run's stages; the stages own folders, skipping, retries, tracking
and versioning (tasks/stage.py), so a setting only reads and writes the files of the stage it serves
(tasks/paths.py) and returns the stage's summary. Every method has the stage's inputs and nothing else.
"""
from __future__ import annotations

import importlib
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

from rla_core.ablation import JudgeWeight
from rla_core.config import Config
from rla_core.errors import BadValue
from rla_core.models.chat import encode_pairs
from rla_core.models.factory import build_or_load, save_pretrained
from rla_core.models.precision import autocast
from rla_core.training import trainable as trainable_weights
from rla_core.training.sft import supervised_finetune
from tasks.common import load_model
from tasks.paths import RunPaths
from tasks.storage.files import write_json, write_text

if TYPE_CHECKING:
    from rla_core.schemas import Trajectory
    from rla_core.adaptation.cycle import AdaptReport
    from rla_core.adaptation.store import TaskStore

# environment.name -> "module:Class". A name that is not here is an episodic game of rla_core/envs/.
REGISTRY: dict[str, str] = {
    "coding": "tasks.settings.coding:CodingSetting",
}
DEFAULT = "tasks.settings.episodic:EpisodicSetting"
_loaded: dict[str, "Setting"] = {}


class Setting:
    """What a kind of task supplies to the loop. `summary_rows` are the (label, metric) rows of the
    quickstart's before/after table; `episodic` says whether rollouts are multi-turn games with step
    verdicts (the engine benchmarks need one); `judge_weight_key` and `judge_metric` are what `rla ablation`
    switches and reports."""

    name = "setting"
    episodic = False
    family = None  # an environment family of the setting's own (rla_core/envs/base.py), registered with it
    summary_rows: tuple[tuple[str, str], ...] = ()
    # λ, the weight of the judge's signal in the policy's reward: the config key that holds it (what an
    # ablation's step-reward switch sets to 0) ...
    judge_weight_key = "reward.step_weight"
    # ... and the judge's headline benchmark metric (label, key in an evaluation's metrics)
    judge_metric: tuple[str, str] = ("judge benchmark balanced accuracy", "bench/balanced_acc")
    # ... and the judge's score on each iteration's own rollouts (label, key in the judge stage's summary):
    # μ = p₊ + p₋ against the oracle step labels in the games
    judge_train_metric: tuple[str, str] = ("judge μ on the iteration's labelled steps", "judge/mu")
    # `rla bench scaling`: the config key and sizes of its judge-count (m) and horizon (turns) axes, and what
    # one unit of the horizon is (a key of a scaling point's counts)
    scaling_axes: dict[str, tuple[str, tuple[int, ...]]] = {"m": ("judge.m", (1, 2, 3, 6)),
                                                            "turns": ("rollout.max_steps", (3, 6, 12, 24))}
    horizon_unit = "policy_steps"

    def judge_verdicts(self, cfg: Config, trajectories: list[Trajectory]) -> int:
        """The judge's verdicts in an iteration that rolled out `trajectories`: m per policy step."""
        return sum(len(t.steps) for t in trajectories) * cfg.judge.m

    def judge_weight(self, cfg: Config) -> JudgeWeight:
        """λ of this setting in `cfg`: its key (`judge_weight_key`) and value."""
        return JudgeWeight.of(cfg, self.judge_weight_key)

    # ---- set-up (run scope)
    def seed(self, paths: RunPaths, cfg: Config) -> dict:
        """Train slots (seed store), held-out and dev tasks, seed/reserved.json, the judge benchmarks."""
        raise NotImplementedError

    def init_models(self, paths: RunPaths, cfg: Config) -> dict:
        """Tokenizer and the policy, judge and environment models under models/init (`build_models`)."""
        raise NotImplementedError

    def bootstrap(self, paths: RunPaths, cfg: Config) -> dict:
        """Supervised warm-start of the models into models/bootstrap."""
        raise NotImplementedError

    def warm_start_pairs(self, paths: RunPaths, cfg: Config, role: str) -> list[tuple[str, str]]:
        """`bootstrap`'s supervised (prompt, target) pairs of `role` ("policy" or "judge"), the very ones it
        trains on: the warm-start benches (rla_bench/warmstart.py) retrain on them. Implementations call
        `check_role` first."""
        raise NotImplementedError

    def dev_policy_scores(self, paths: RunPaths, cfg: Config, policy_dir: Path, out: Path,
                          seed: int) -> dict[str, float]:
        """The policy's part of the dev scores (`dev/*` without `dev/bench_*`); {} without a dev split."""
        raise NotImplementedError

    # ---- one iteration
    def rollout(self, paths: RunPaths, cfg: Config, k: int) -> dict:
        raise NotImplementedError

    def judge(self, paths: RunPaths, cfg: Config, k: int) -> dict:
        raise NotImplementedError

    def adapt(self, paths: RunPaths, cfg: Config, k: int, rewrite: Callable | None) -> dict:
        """Accept or reject last iteration's candidates, propose rewrites with `rewrite` (None: no
        adaptation); the summary carries `rejected` (task ids)."""
        raise NotImplementedError

    def data(self, paths: RunPaths, cfg: Config, k: int, report: "AdaptReport") -> dict:
        """Policy and judge training batches (tasks/stages/training.py:write_batches), without `report.rejected`."""
        raise NotImplementedError

    def evaluate_models(self, paths: RunPaths, cfg: Config, policy_dir: Path, judge_dir: Path, out: Path,
                        seed: int, final: bool = True) -> dict[str, float]:
        """`heldout/*`, `bench/*`, `dev/*` metrics of a policy and a judge; written to out/metrics.json."""
        raise NotImplementedError

    # ---- optional
    def gates(self, paths: RunPaths, cfg: Config, k: int, slots: list, heldout: list[str]) -> list:
        """Great Expectations results beyond the common ones (tasks/stages/validate.py)."""
        return []

    def build_data_files(self, cfg: Config, folder: Path) -> dict | None:
        """`rla data build` for settings whose shipped data are problem files only: {name: path}; None
        when the setting builds its files through a run (the episodic games)."""
        return None


def register(setting: "Setting", name: str | None = None) -> "Setting":
    """Make `environment.name = name` (default: the setting's own name) run in `setting`; a setting that
    brings its own environment family (`setting.family`) registers it under the same name."""
    name = name or setting.name
    REGISTRY[name] = f"{type(setting).__module__}:{type(setting).__name__}"
    _loaded[name] = setting
    if setting.family is not None:
        from rla_core.envs.base import ENVIRONMENTS

        ENVIRONMENTS.add(name, setting.family)
    return setting


def setting_for(cfg: Config | str) -> Setting:
    """The setting of a config (or of an environment name)."""
    name = cfg if isinstance(cfg, str) else cfg.environment.name
    if name not in _loaded:
        module, cls = REGISTRY.get(name, DEFAULT).split(":")
        _loaded[name] = getattr(importlib.import_module(module), cls)()
    return _loaded[name]


# ---------------------------------------------------------------- shared by the settings' set-up
@dataclass(frozen=True)
class Pair:
    prompt_ids: list[int]
    response_ids: list[int]


def tokenize_pairs(tokenizer, pairs: list[tuple[str, str]]) -> list[Pair]:
    return [Pair(p, t) for p, t in encode_pairs(tokenizer, pairs)]


def build_models(paths: RunPaths, cfg: Config, tokenizer) -> dict:
    """The policy, judge and environment models (tiny ones built, or the configured paths) with `tokenizer`,
    saved under models/init; the summary counts the vocabulary and each model's parameters, and names the
    dtype its arithmetic runs in (models.dtype resolved on this machine)."""
    summary = {"vocab": len(tokenizer)}
    for offset, role in enumerate(("policy", "judge", "environment")):
        model, tok = build_or_load(getattr(cfg.models, role), tokenizer, cfg.run.seed + offset)
        save_pretrained(model, tok, paths.init_models / role)
        summary[f"{role}_params"] = sum(p.numel() for p in model.parameters())
        summary[f"{role}_dtype"] = str(cfg.models.compute_dtype(role)).removeprefix("torch.")  # models.dtype
    return summary


WARM_START_ROLES = ("policy", "judge")


def check_role(role: str) -> str:
    """`role` if it is one `warm_start_pairs` knows, else BadValue (before any work is done)."""
    if role not in WARM_START_ROLES:
        raise BadValue(f"warm-start role must be one of {', '.join(WARM_START_ROLES)}, got {role!r}")
    return role


def warm_start_role(paths: RunPaths, cfg: Config, role: str, pairs: list[tuple[str, str]], steps: int, lr: float,
                    on_step: Callable[[int, float, Any, Any], None] | None = None, start: Path | None = None):
    """Supervised warm-start of one role from models/init (or the checkpoint `start`): its train.trainable
    subset, in its dtype, on `pairs` for `steps` steps at `lr` (bootstrap's batch and seed).
    `on_step(step, loss, model, tokenizer)` after each step (e.g. checkpoints). Returns (model, tokenizer,
    metrics); the caller saves the model (merged: trainable.merge)."""
    model, tokenizer = load_model(start or paths.init_models / role, cfg.models.torch_device())
    model.train()
    trainable_weights.apply(model, cfg.train.trainable, seed=cfg.run.seed, stop_gradient=cfg.train.stop_gradient)
    with autocast(cfg.models.compute_dtype(role), cfg.models.torch_device()):
        metrics = supervised_finetune(model, tokenize_pairs(tokenizer, pairs), steps=steps,
                                      batch_size=cfg.bootstrap.batch_size, lr=lr, seed=cfg.run.seed,
                                      desc=f"bootstrap {role}",
                                      on_step=on_step and (lambda step, loss: on_step(step, loss, model, tokenizer)))
    return model, tokenizer, metrics


def warm_starts_environment(cfg: Config) -> bool:
    """Only the llm rewriter's tiny environment model is warm-started (a configured path is a real LLM)."""
    boot = cfg.bootstrap
    return (cfg.environment.rewriter == "llm" and cfg.models.environment.path is None
            and boot.environment_tasks > 0 and boot.environment_steps > 0)


def reserved_content(family, tasks: list, reserved_files: list[str], load: Callable[[str], list]) -> set[str]:
    """The content hashes no training task may have: those of `tasks` (held-out, dev) and of every task in
    `environment.reserved_files` (each read by `load`)."""
    reserved = {family.content_hash(t.spec) for t in tasks}
    for path in reserved_files:
        reserved |= {family.content_hash(t.spec) for t in load(path)}
    return reserved


# ---------------------------------------------------------------- shared by the settings' adapt stage
def save_adapted(paths: RunPaths, k: int, store: "TaskStore", new_store: "TaskStore", report: "AdaptReport",
                 metrics: dict[str, float]) -> dict:
    """The adapt stage's outputs in every setting: the new task store, the report, the store's diff, and
    the summary (the cycle's metrics, the store's counts, the rejected candidates; the stage adds `adapt/`)."""
    new_store.save(paths.it(k).store)
    write_text(paths.it(k).adapt_report, report.model_dump_json(indent=2) + "\n")
    write_json(paths.it(k).store_diff, store.diff(new_store))
    counts = {name: float(value) for name, value in new_store.counts().items()}
    return {"metrics": {**metrics, **counts}, "rejected": report.rejected}
