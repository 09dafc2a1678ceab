"""Evaluation: held-out success of a policy and the judge on the fixed benchmark, as the iteration's
evaluate stage, the warm-start's baseline, and `rla eval`'s evaluation of any checkpoint.

Every evaluation also scores the dev split when one is configured (eval.dev_file, eval.dev_judge_benchmark):
`dev/*` beside `heldout/*`. Model selection (the registry's `best` alias) reads the dev scores only; the
held-out ones are reported, never used to choose."""
from __future__ import annotations

from pathlib import Path

from rla_core.config import Config
from tasks.common import eval_seed
from tasks.paths import RunPaths
from tasks.settings import setting_for
from tasks.stage import stage
from tasks.storage.files import done_summary, is_done
from tasks.storage.retention import bring_back
from tasks.summaries import EvaluateSummary


def evaluate_models(paths: RunPaths, cfg: Config, policy_dir: Path, judge_dir: Path, out: Path,
                    seed: int, final: bool = True) -> dict[str, float]:
    """The run's setting's evaluation (tasks/settings/): `heldout/*` (and, when `final`, the greedy policy
    and the judge on the policy's own held-out rollouts), `bench/*` and `dev/*`; out/metrics.json."""
    return setting_for(cfg).evaluate_models(paths, cfg, policy_dir, judge_dir, out, seed, final)


@stage(scope="run", folder="baseline", summary=EvaluateSummary, prefix_metrics=False)
def baseline(paths: RunPaths, cfg: Config, k: int, out: Path) -> dict:
    """Held-out (and dev) metrics of the warm-started policy and judge (baseline/metrics.json)."""
    metrics = evaluate_models(paths, cfg, paths.bootstrap / "policy", paths.bootstrap / "judge", out, eval_seed(cfg))
    return {"metrics": metrics}


def logged_final(paths: RunPaths, k: int) -> bool:
    """Whether the evaluation logged for iteration k ran the `final` passes (greedy, the judge on the
    held-out episodes): the warm-start's always does, an in-loop one only at its run's last iteration (its
    summary says; older summaries tell by their heldout/judge_* metrics). True when k was never evaluated."""
    if k == 0:
        return True
    loop = paths.stage(k, "evaluate")
    summary = done_summary(loop) if is_done(loop) else {}
    if not summary.get("evaluated"):
        return True
    return bool(summary.get("final", any(key.startswith("heldout/judge_") for key in summary.get("metrics", {}))))


@stage(scope="run", folder="eval/iter_{k:04d}", summary=EvaluateSummary, prefix_metrics=False)
def evaluate_checkpoint(paths: RunPaths, cfg: Config, k: int, out: Path) -> dict:
    """Held-out (and dev) metrics of the models after iteration k (0 = the warm-start), in eval/iter_k/
    (`rla eval`).

    Reproduces the evaluation logged for k exactly (the baseline for 0, the in-loop evaluate stage
    otherwise): the same models, the same seed (`eval_seed`, as every evaluation of the run) and the same
    passes (`logged_final`). An iteration that was not evaluated in the loop gets the full evaluation."""
    final = logged_final(paths, k)
    # a checkpoint deleted by run.keep_checkpoints comes back from DVC (an error says so when not versioned)
    policy, judge = (bring_back(paths, paths.model_dir(k + 1, role)) for role in ("policy", "judge"))
    metrics = evaluate_models(paths, cfg, policy, judge, out, eval_seed(cfg), final=final)
    return {"metrics": metrics, "final": final}


@stage(summary=EvaluateSummary, prefix_metrics=False)
def evaluate(paths: RunPaths, cfg: Config, k: int, out: Path) -> dict:
    """Evaluate every `eval_every` iterations and at the last one; otherwise record a skip. The judge
    on the policy's own held-out episodes is scored at the last one only (the benchmark every time)."""
    every, last = cfg.run.eval_every, cfg.run.iterations
    if not (k == last or (every and k % every == 0)):
        return {"evaluated": False, "metrics": {}}
    metrics = evaluate_models(paths, cfg, paths.model_dir(k + 1, "policy"), paths.model_dir(k + 1, "judge"), out,
                              eval_seed(cfg), final=k == last)
    return {"evaluated": True, "final": k == last, "metrics": metrics}
