"""How long a warm start should be, chosen on the DEV split: one role of a run is warm-started from the run's
initial weights exactly as `bootstrap` does it (the setting's own `warm_start_pairs`, same seed, trainable
subset, dtype, lr and batch), with a checkpoint at each of `--steps`, and each checkpoint is scored on dev.
Held-out tasks and the held-out benchmark are never read. Two `rla bench` parts:

- judge-warmstart: the judge on the dev judge benchmark. Coding: once per test form (plain, or worked:
  `coding.judge_work`), U tests per dev benchmark problem scored on the problem's fixed program pool (UT
  accuracy, detect rate, parse rate). The games: eval.dev_benchmark_m verdicts per step (balanced
  accuracy, p+, p-). Scored as every evaluation scores the dev benchmark (the evaluation's seed), so the
  games' checkpoint at bootstrap.judge_steps repeats the run's baseline dev benchmark score.
- policy-warmstart: the policy on the dev tasks, as every evaluation scores it (eval.dev_episodes_per_task
  episodes or programs per task at eval.temperature, the evaluation's seed): the games' success rate,
  coding's pass@1. Its checkpoint at bootstrap.policy_steps is the run's own warm-started policy, so that
  row repeats the run's baseline dev score.

    rla bench judge-warmstart  --run RUN [--steps 40,80,160] [--form worked --form plain] [--set K=V ...]
    rla bench policy-warmstart --run RUN [--steps 60,120,240] [--set K=V ...] [--keep] [--out FILE]

RUN: a run folder with its seed stage and initial models (e.g. `rla run ... --set run.iterations=0`, or the
seed and init stages alone) and a dev split. Its config is read from the folder; --set changes it for this
bench only (e.g. bootstrap.lr=3e-4). The checkpoints live in RUN/bench_<role>_warmstart and are removed
afterwards unless --keep; the run folder is otherwise left as it was.
"""
from __future__ import annotations

import argparse
import copy
import shutil
import time
from pathlib import Path
from typing import Callable

FORMS = ("plain", "worked")  # coding's test forms; the games' judge has one form ("verdict")
GAME_FORM = "verdict"
DEFAULT_STEPS = {"judge": "40,80,160", "policy": "60,120,240"}


def _steps(text: str) -> list[int]:
    from rla_core.errors import BadValue

    try:
        steps = sorted({int(part) for part in text.split(",") if part.strip()})
    except ValueError:
        raise BadValue(f"--steps {text!r}: comma-separated step counts, e.g. 40,80,160") from None
    if not steps or steps[0] <= 0:
        raise BadValue(f"--steps {text!r}: positive step counts")
    return steps


def _check_dev(paths, cfg, role: str) -> None:
    """The run has what scoring `role` on dev needs; else MissingFile, before any training."""
    from rla_core.errors import MissingFile
    from tasks.settings import setting_for

    if not (paths.init_models / role).is_dir():
        raise MissingFile(f"{paths.init_models / role} is missing: run the run's init stage first")
    if role == "policy":
        if not (cfg.eval.dev_file and paths.dev.is_file()):
            raise MissingFile(f"{paths.dev} is missing: the run needs a dev split (eval.dev_file) and its seed stage")
        return
    games = setting_for(cfg).episodic
    benchmark = paths.judge_benchmark_dev if games else paths.coding_benchmark_dev
    if not benchmark.is_file():
        need = "eval.dev_judge_benchmark" if games else "eval.dev_file"
        raise MissingFile(f"{benchmark} is missing: the run needs a dev judge benchmark ({need}) and its seed stage")


def _score_judge(paths, cfg, folder: Path, desc: str) -> dict[str, float]:
    """One judge checkpoint on the dev judge benchmark: the games' verdicts, or coding's unit tests."""
    from tasks.common import eval_seed
    from tasks.settings import setting_for
    from tasks.settings.coding import score_benchmark
    from tasks.settings.episodic import score_judge_benchmark

    seed = eval_seed(cfg)  # the evaluation's (before 2026-12-06: run.seed, another sample of the same judge)
    if setting_for(cfg).episodic:
        scores = score_judge_benchmark(paths, cfg, folder, paths.judge_benchmark_dev,
                                       folder / "dev_benchmark_verdicts.json", seed, cfg.eval.dev_benchmark_m, desc)
    else:
        scores = score_benchmark(paths, cfg, folder, paths.coding_benchmark_dev, folder / "dev_benchmark_tests.jsonl",
                                 seed, desc)
    return {f"dev_bench_{k}": v for k, v in scores.items()}


def _score_policy(paths, cfg, folder: Path, desc: str) -> dict[str, float]:
    """One policy checkpoint on the dev tasks, as an evaluation scores it (the evaluation's seed)."""
    from tasks.common import eval_seed
    from tasks.settings import setting_for

    scores = setting_for(cfg).dev_policy_scores(paths, cfg, folder, folder, eval_seed(cfg))
    return {k.replace("/", "_"): v for k, v in scores.items()}


def warm_start(run_dir: Path, role: str, form: str, steps: list[int], overrides: list[str], work: Path,
               score: Callable) -> list[dict]:
    """Warm-start `role` (in the judge's test `form`, for coding) to max(steps), saving a checkpoint at each
    of `steps`, then `score(paths, cfg, folder, desc)` every checkpoint on dev. One row per checkpoint."""
    from rla_core.config import load_config
    from rla_core.models.factory import save_pretrained
    from rla_core.training import trainable as trainable_weights
    from tasks.common import bind_environment
    from tasks.paths import RunPaths
    from tasks.settings import setting_for
    from tasks.settings.base import warm_start_role

    paths = RunPaths.of(run_dir)
    # its checkpoints are scratch: always scored, never cached in the run (the run folder stays as it was)
    sets = [f"coding.judge_work={form == 'worked'}"] if form in FORMS else []
    cfg = load_config([run_dir / "config.yaml"], overrides + [*sets, "eval.reuse_judge_scores=false"])
    _check_dev(paths, cfg, role)
    # as every stage does: TextWorld's demonstrations and dev games are the run's, with its caps on the texts
    # (without it the family's defaults applied: 400-character observations where the run trains on 200)
    bind_environment(cfg, run_dir)
    pairs = setting_for(cfg).warm_start_pairs(paths, cfg, role)
    losses: dict[int, float] = {}
    train_seconds: dict[int, float] = {}
    clock = {"start": time.perf_counter(), "saving": 0.0}

    def checkpoint(step: int, loss: float, model, tokenizer) -> None:
        losses[step] = loss
        if step in steps:
            began = time.perf_counter()
            train_seconds[step] = began - clock["start"] - clock["saving"]  # the saves are not training
            # a copy: merging LoRA adapters into the weights would end their training
            save_pretrained(trainable_weights.merge(copy.deepcopy(model)), tokenizer, work / form / f"step{step}")
            clock["saving"] += time.perf_counter() - began

    warm_start_role(paths, cfg, role, pairs, max(steps), cfg.bootstrap.lr, on_step=checkpoint)  # model dropped
    rows = []
    for step in steps:
        folder = work / form / f"step{step}"
        began = time.perf_counter()
        scores = score(paths, cfg, folder, f"dev ({role}, {form}, step {step})")
        tail = [losses[s] for s in range(max(1, step - 9), step + 1)]
        rows.append({"form": form, "steps": step, "loss_last10": sum(tail) / len(tail), "pairs": len(pairs),
                     "train_seconds": train_seconds[step], "score_seconds": time.perf_counter() - began, **scores})
    return rows


def main_for(role: str, argv: list[str] | None) -> int:
    parser = argparse.ArgumentParser(prog=f"rla bench {role}-warmstart", description=__doc__.split("\n\n")[0])
    parser.add_argument("--run", required=True, help="a run folder with seed, initial models and a dev split")
    parser.add_argument("--steps", default=DEFAULT_STEPS[role],
                        help=f"checkpoints (comma-separated; default {DEFAULT_STEPS[role]})")
    if role == "judge":
        parser.add_argument("--form", action="append", choices=FORMS, default=None,
                            help="coding: test form, repeatable (default: both); not for the games")
    parser.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                        help="change the run's config for this bench")
    parser.add_argument("--keep", action="store_true", help="keep the checkpoints (538 MB each for SmolLM2)")
    parser.add_argument("--out", default=None, help=f"JSON result (default bench/results/{role}_warmstart.json)")
    args = parser.parse_args(argv)

    from rla_bench.common import machine, print_table, write_result
    from rla_core.config import load_run_config
    from rla_core.errors import BadValue, MissingFile
    from tasks.settings import setting_for

    run_dir = Path(args.run).resolve()
    if not (run_dir / "config.yaml").is_file():
        raise MissingFile(f"{run_dir}/config.yaml is missing: --run takes a run folder (e.g. runs/smol-coding)")
    steps = _steps(args.steps)
    coding = not setting_for(load_run_config(run_dir / "config.yaml")).episodic
    forms = getattr(args, "form", None)
    if forms and not coding:
        raise BadValue("--form: the test forms are the coding judge's; this run's judge gives verdicts")
    if role == "policy":
        forms, score = ["policy"], _score_policy
        columns = (("success", "dev_success_rate"), ("episodes", "dev_episodes"))
    else:
        forms, score = (forms or list(FORMS)) if coding else [GAME_FORM], _score_judge
        columns = (("UT accuracy", "dev_bench_ut_accuracy"), ("detect rate", "dev_bench_detect_rate"),
                   ("parse rate", "dev_bench_parse_rate")) if coding else \
            (("balanced acc.", "dev_bench_balanced_acc"), ("p+", "dev_bench_p_pos"), ("p-", "dev_bench_p_neg"))
    work = run_dir / f"bench_{role}_warmstart"
    rows = []
    try:
        for form in forms:
            rows += warm_start(run_dir, role, form, steps, args.overrides, work, score)
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)
    print_table(f"{role} warm start on dev ({run_dir.name})",
                ["form", "steps", "loss (last 10)", *(name for name, _ in columns), "train s"],
                [[r["form"], r["steps"], r["loss_last10"], *(r.get(key, float("nan")) for _, key in columns),
                  r["train_seconds"]] for r in rows])
    write_result(args.out, Path(f"bench/results/{role}_warmstart.json"),
                 {"run": str(run_dir), "role": role, "steps": steps, "overrides": args.overrides, "rows": rows,
                  "machine": machine()})
    return 0
