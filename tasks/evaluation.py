"""Evaluation: held-out success of a policy and the judge on the fixed benchmark, as the iteration's
evaluate stage, the warm-start's baseline, and `rla eval`'s evaluation of any checkpoint.

Every evaluation also scores the dev split when one is configured (eval.dev_file, eval.dev_judge_benchmark):
`dev/*` beside `heldout/*`. Model selection (the registry's `best` alias) reads the dev scores only; the
held-out ones are reported, never used to choose."""
from __future__ import annotations

from pathlib import Path

from rla_core.config import Config
from rla_core.judge.benchmark import BenchmarkStep, score_benchmark
from rla_core.rollout.base import SamplingParams
from rla_core.rollout.runner import rollout_metrics
from rla_core.schemas import Task
from tasks.common import eval_seed, progress_bar
from tasks.engines import engine_for, judge_all, rollout_tasks
from tasks.paths import RunPaths
from tasks.stage import stage
from tasks.storage import done_summary, is_done, read_records, write_json, write_records


def evaluate_models(paths: RunPaths, cfg: Config, policy_dir: Path, judge_dir: Path, out: Path,
                    seed: int, final: bool = True) -> dict[str, float]:
    """Held-out success rate of a policy (eval.episodes_per_task episodes per task at eval.temperature),
    the judge on the fixed benchmark steps (`bench/*`) and, when `final` (the warm-start and the last
    evaluation): the greedy policy (`heldout_greedy/*`, with eval.greedy_at_end) and p₊/p₋ of the judge
    on the policy's held-out episodes (`heldout/judge_*`: a moving target, beside the benchmark); at every
    evaluation the dev split too (`dev/*`, evaluate_dev). The coding setting: held-out and dev pass@1 and
    the judge's unit tests (tasks/coding.py)."""
    from tasks import coding

    if coding.is_coding(cfg):
        return coding.evaluate_models(paths, cfg, policy_dir, judge_dir, out, seed, final)
    tasks = read_records(paths.heldout, Task)
    trajectories, _ = rollout_tasks(paths, cfg, tasks, policy_dir, cfg.eval.episodes_per_task,
                                    cfg.eval.temperature, seed, "held-out eval")
    write_records(out / "heldout_trajectories.jsonl", trajectories)
    metrics = {f"heldout/{n}": v for n, v in rollout_metrics(trajectories).items()}
    if final and cfg.eval.greedy_at_end and cfg.eval.temperature > 0:
        greedy, _ = rollout_tasks(paths, cfg, tasks, policy_dir, 1, 0.0, seed, "held-out eval (greedy)")
        metrics.update({f"heldout_greedy/{n}": v for n, v in rollout_metrics(greedy).items()})
    if final:
        _, judge_metrics = judge_all(paths, cfg, trajectories, judge_dir, seed, "held-out judge", cfg.eval.judge_m)
        metrics.update({f"heldout/judge_{n}": v for n, v in judge_metrics.items()})
    metrics["heldout/episodes"] = float(len(trajectories))
    if paths.judge_benchmark.is_file():
        scores = score_judge_benchmark(paths, cfg, judge_dir, paths.judge_benchmark, out / "benchmark_verdicts.json",
                                       seed, cfg.eval.benchmark_m)
        metrics.update({f"bench/{n}": v for n, v in scores.items()})
    metrics.update(evaluate_dev(paths, cfg, policy_dir, judge_dir, out, seed))
    write_json(out / "metrics.json", metrics)
    return metrics


def evaluate_dev(paths: RunPaths, cfg: Config, policy_dir: Path, judge_dir: Path, out: Path,
                 seed: int) -> dict[str, float]:
    """The dev-split scores that model selection reads, at every evaluation: the policy's success on the
    dev tasks (`dev/*`: eval.dev_episodes_per_task episodes per task at eval.temperature; no greedy pass)
    and the judge on the dev benchmark (`dev/bench_*`, eval.dev_benchmark_m verdicts per step). {} when no
    dev split is configured."""
    metrics: dict[str, float] = {}
    if cfg.eval.dev_file:
        tasks = read_records(paths.dev, Task)
        trajectories, _ = rollout_tasks(paths, cfg, tasks, policy_dir, cfg.eval.dev_episodes_per_task,
                                        cfg.eval.temperature, seed, "dev eval")
        write_records(out / "dev_trajectories.jsonl", trajectories)
        metrics.update({f"dev/{n}": v for n, v in rollout_metrics(trajectories).items()})
        metrics["dev/episodes"] = float(len(trajectories))
    if cfg.eval.dev_judge_benchmark:
        scores = score_judge_benchmark(paths, cfg, judge_dir, paths.judge_benchmark_dev,
                                       out / "dev_benchmark_verdicts.json", seed, cfg.eval.dev_benchmark_m,
                                       "dev judge benchmark")
        metrics.update({f"dev/bench_{n}": v for n, v in scores.items()})
    return metrics


def score_judge_benchmark(paths: RunPaths, cfg: Config, judge_dir: Path, benchmark: Path, verdicts_file: Path,
                          seed: int, m: int, desc: str = "judge benchmark") -> dict[str, float]:
    """m verdicts of the judge in `judge_dir` on every step of a judge benchmark file (the run's copy of
    the held-out or the dev one); the verdicts go to `verdicts_file`."""
    steps = read_records(benchmark, BenchmarkStep)
    engine, tokenizer = engine_for(cfg, paths.root, "judge", judge_dir, cfg.judge.batch_size)
    params = SamplingParams(cfg.judge.max_new_tokens, cfg.judge.temperature, seed)
    with progress_bar(len(steps) * m, desc, unit="verdict") as bar:
        verdicts, metrics = score_benchmark(engine, tokenizer, steps, m, params, cfg.rollout.history_turns,
                                            progress=bar.update)
    write_json(verdicts_file, {s.step_id: v for s, v in zip(steps, verdicts)})
    return metrics


@stage(scope="run", folder="baseline")
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


@stage(scope="run", folder="eval/iter_{k:04d}")
def evaluate_checkpoint(paths: RunPaths, cfg: Config, k: int, out: Path) -> dict:
    """Held-out (and dev) metrics of the models after iteration k (0 = the warm-start), in eval/iter_k/
    (`rla eval`).

    Reproduces the evaluation logged for k exactly (the baseline for 0, the in-loop evaluate stage
    otherwise): the same models, the same seed (`eval_seed`, as every evaluation of the run) and the same
    passes (`logged_final`). An iteration that was not evaluated in the loop gets the full evaluation."""
    final = logged_final(paths, k)
    metrics = evaluate_models(paths, cfg, paths.model_dir(k + 1, "policy"), paths.model_dir(k + 1, "judge"), out,
                              eval_seed(cfg), final=final)
    return {"metrics": metrics, "final": final}


@stage()
def evaluate(paths: RunPaths, cfg: Config, k: int, out: Path) -> dict:
    """Evaluate every `eval_every` iterations and at the last one; otherwise record a skip. The judge
    on the policy's own held-out episodes is scored at the last one only (the benchmark every time)."""
    every, last = cfg.run.eval_every, cfg.run.iterations
    if not (k == last or (every and k % every == 0)):
        return {"evaluated": False, "metrics": {}}
    metrics = evaluate_models(paths, cfg, paths.model_dir(k + 1, "policy"), paths.model_dir(k + 1, "judge"), out,
                              eval_seed(cfg), final=k == last)
    return {"evaluated": True, "final": k == last, "metrics": metrics}
