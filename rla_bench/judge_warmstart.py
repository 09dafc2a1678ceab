"""How long the judge's warm-start should be (coding: and in which form), chosen on the DEV judge benchmark:
the judge is warm-started from a run's initial weights exactly as `bootstrap` does it (same pairs, seed,
trainable subset, dtype, lr and batch), with a checkpoint at each of `--steps`, and each checkpoint is
scored on the run's dev judge benchmark. Held-out tasks and the held-out benchmark are never read.

- coding: once per test form (plain, or worked: `coding.judge_work`); each checkpoint writes U tests per
  dev benchmark problem, scored on the problem's fixed program pool (UT accuracy, detect rate, parse rate).
- household / TextWorld: on the oracle step labels `bootstrap` trains on; each checkpoint gives
  eval.dev_benchmark_m verdicts per step of the dev judge benchmark (balanced accuracy, p+, p-).

    rla bench judge-warmstart --run RUN [--steps 40,80,160] [--form worked --form plain]
        [--set KEY=VALUE ...] [--out FILE]

RUN: a run folder with its seed stage and initial models (e.g. `rla run --config configs/coding.yaml
--config configs/smol_coding.yaml --set run.iterations=0`) and a dev split (coding: eval.dev_file; the
games: eval.dev_judge_benchmark). Its config is read from the folder; --set changes it for this bench only
(e.g. bootstrap.lr=3e-4).
"""
from __future__ import annotations

import argparse
import copy
import random
import shutil
import time
from pathlib import Path

FORMS = ("plain", "worked")  # coding's test forms; the games' judge has one form ("verdict")
GAME_FORM = "verdict"


def _steps(text: str) -> list[int]:
    from rla_core.errors import BadValue

    try:
        steps = sorted({int(part) for part in text.split(",") if part.strip()})
    except ValueError:
        raise BadValue(f"--steps {text!r}: comma-separated step counts, e.g. 40,80,160") from None
    if not steps or steps[0] <= 0:
        raise BadValue(f"--steps {text!r}: positive step counts")
    return steps


def _judge_data(paths, cfg) -> tuple[list, Path]:
    """The judge's warm-start pairs exactly as `bootstrap` builds them, and the dev judge benchmark."""
    from rla_core.bootstrap import balance, judge_pairs
    from rla_core.errors import MissingFile
    from tasks.settings import setting_for
    from tasks.settings.coding import demo_problems, judge_demonstrations
    from tasks.settings.episodic import demo_walks

    games = setting_for(cfg).episodic
    benchmark = paths.judge_benchmark_dev if games else paths.coding_benchmark_dev
    if not benchmark.is_file():
        need = "eval.dev_judge_benchmark" if games else "eval.dev_file"
        raise MissingFile(f"{benchmark} is missing: the run needs a dev judge benchmark ({need}) and its seed stage")
    if not (paths.init_models / "judge").is_dir():
        raise MissingFile(f"{paths.init_models / 'judge'} is missing: run the run's init stage first")
    boot = cfg.bootstrap
    if not games:  # coding: demonstration tests (plain or worked)
        return judge_demonstrations(cfg, demo_problems(cfg, paths, boot.demos, "demos")), benchmark
    # the games: the oracle step labels of `bootstrap` (tasks/settings/episodic.py), balanced as there
    walks = demo_walks(cfg, paths, boot.demos, boot.bad_action_rate, "labels", boot.exclude_train_games)
    return balance(judge_pairs(walks, cfg.rollout.history_turns), random.Random(cfg.run.seed)), benchmark


def _score_dev(paths, cfg, folder: Path, benchmark: Path, desc: str) -> dict[str, float]:
    """One checkpoint on the dev judge benchmark: the games' verdicts, or coding's unit tests."""
    from tasks.settings import setting_for
    from tasks.settings.coding import score_benchmark
    from tasks.settings.episodic import score_judge_benchmark

    if setting_for(cfg).episodic:
        return score_judge_benchmark(paths, cfg, folder, benchmark, folder / "dev_benchmark_verdicts.json",
                                     cfg.run.seed, cfg.eval.dev_benchmark_m, desc)
    return score_benchmark(paths, cfg, folder, benchmark, folder / "dev_benchmark_tests.jsonl", cfg.run.seed, desc)


def warm_start(run_dir: Path, form: str, steps: list[int], overrides: list[str], work: Path) -> list[dict]:
    """Warm-start the judge in `form` to max(steps), saving a checkpoint at each of `steps`, then score every
    checkpoint on the run's dev judge benchmark. One row per checkpoint."""
    from rla_core.config import load_config
    from rla_core.models.factory import save_pretrained
    from rla_core.training import trainable as trainable_weights
    from tasks.paths import RunPaths
    from tasks.settings.base import warm_start_role

    paths = RunPaths.of(run_dir)
    # its checkpoints are scratch: always scored, never cached in the run (the run folder stays as it was)
    sets = [f"coding.judge_work={form == 'worked'}"] if form in FORMS else []
    cfg = load_config([run_dir / "config.yaml"], overrides + [*sets, "eval.reuse_judge_scores=false"])
    pairs, benchmark = _judge_data(paths, cfg)
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

    warm_start_role(paths, cfg, "judge", pairs, max(steps), cfg.bootstrap.lr, on_step=checkpoint)  # model dropped
    rows = []
    for step in steps:
        folder = work / form / f"step{step}"
        began = time.perf_counter()
        scores = _score_dev(paths, cfg, folder, benchmark, f"dev judge benchmark ({form}, step {step})")
        tail = [losses[s] for s in range(max(1, step - 9), step + 1)]
        rows.append({"form": form, "steps": step, "loss_last10": sum(tail) / len(tail),
                     "train_seconds": train_seconds[step], "score_seconds": time.perf_counter() - began,
                     **{f"dev_bench_{k}": v for k, v in scores.items()}})
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="rla bench judge-warmstart", description=__doc__.split("\n\n")[0])
    parser.add_argument("--run", required=True, help="a run folder with seed, initial models and a dev split")
    parser.add_argument("--steps", default="40,80,160", help="checkpoints (comma-separated; default 40,80,160)")
    parser.add_argument("--form", action="append", choices=FORMS, default=None,
                        help="coding: test form, repeatable (default: both); not for the games")
    parser.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                        help="change the run's config for this bench")
    parser.add_argument("--keep", action="store_true", help="keep the checkpoints (538 MB each for SmolLM2)")
    parser.add_argument("--out", default=None, help="JSON result (default bench/results/judge_warmstart.json)")
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
    if args.form and not coding:
        raise BadValue("--form: the test forms are the coding judge's; this run's judge gives verdicts")
    work = run_dir / "bench_judge_warmstart"
    rows = []
    try:
        for form in (args.form or list(FORMS)) if coding else [GAME_FORM]:
            rows += warm_start(run_dir, form, steps, args.overrides, work)
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)
    scores = (("UT accuracy", "ut_accuracy"), ("detect rate", "detect_rate"), ("parse rate", "parse_rate")) \
        if coding else (("balanced acc.", "balanced_acc"), ("p+", "p_pos"), ("p-", "p_neg"))
    print_table(f"judge warm start on the dev judge benchmark ({run_dir.name})",
                ["form", "steps", "loss (last 10)", *(name for name, _ in scores), "train s"],
                [[r["form"], r["steps"], r["loss_last10"],
                  *(r.get(f"dev_bench_{key}", float("nan")) for _, key in scores), r["train_seconds"]] for r in rows])
    write_result(args.out, Path("bench/results/judge_warmstart.json"),
                 {"run": str(run_dir), "steps": steps, "overrides": args.overrides, "rows": rows,
                  "machine": machine()})
    return 0
