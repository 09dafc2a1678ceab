"""The coding setting (environment.name = coding; docs/coding.md): the same stages, folders, flows,
tracking, versioning and gates as the episodic games (tasks/settings/episodic.py), with programs, unit
tests and the sandbox in place of episodes and step verdicts.

  seed       train slots + held-out (and dev) problems (disjoint pipelines) + the fixed judge benchmark
             (and its dev counterpart, from the dev problems)
  init       tokenizer on coding text; tiny policy/judge/environment models
  bootstrap  policy SFT on reference programs, judge SFT on correct unit tests
  rollout    N programs per problem, run on the GT tests        -> trajectories.jsonl, programs.jsonl
  judge      U unit tests per problem (statement only), run on every program      -> unit_tests.jsonl
  adapt      acceptance / proposals from the test critic (which GT tests failed, how)
  data       policy samples (z-scored pass ratio, in-band problems) + judge samples (separation reward)
  evaluate   held-out and dev pass@1; the judge's UT accuracy and detect rate on the benchmark and the dev one
"""
from __future__ import annotations

import random
import time
from pathlib import Path
from typing import Callable

from rla_core.adaptation.cycle import AdaptReport
from rla_core.adaptation.cycle import adapt as adapt_store
from rla_core.adaptation.store import TaskStore
from rla_core.envs.coding import rewards as coding_rewards
from rla_core.envs.coding.bootstrap import (BenchmarkProblem, benchmark_programs, corpus, generate_mixed, judge_pairs,
                                       policy_pairs, rewrite_pairs_coding)
from rla_core.envs.coding.critic import coding_feedback
from rla_core.envs.coding.execute import run_ground_truth, run_unit_tests
from rla_core.envs.coding.problems import CODING
from rla_core.envs.coding.rollout import with_outcomes, write_programs, write_tests
from rla_core.envs.coding.sandbox import Limits, Sandbox
from rla_core.config import Config
from rla_core.models.factory import save_pretrained
from rla_core.models.tokenizer import train_tokenizer
from rla_core.rollout.base import SamplingParams
from rla_core.schemas import ProgramRun, Step, Task, Trajectory, UnitTest
from rla_core.training import trainable as trainable_weights
from tasks.common import progress_bar, stage_seed
from tasks.stages.engines import engine_for
from tasks.paths import RunPaths
from tasks.storage.files import read_json, read_records, write_json, write_records
from tasks.settings.base import (Setting, build_models, check_role, reserved_content, save_adapted, warm_start_role,
                                 warm_starts_environment)
from tasks.settings.judge_scores import scored_once
from tasks.stages.training import write_batches

CORPUS_PROBLEMS = 300


def sandbox_for(cfg: Config) -> tuple[Sandbox, Limits]:
    c = cfg.coding
    limits = Limits(memory_mb=c.memory_mb, processes=c.processes, output_bytes=c.output_bytes)
    return Sandbox(limits, workers=c.workers or None), limits


def _ops_mix(cfg: Config) -> list[int]:
    knob = cfg.environment.knobs.get("ops")
    return [knob] if isinstance(knob, int) else list(knob or cfg.coding.demo_ops)


def _knobs(cfg: Config) -> dict:
    return {k: v for k, v in cfg.environment.knobs.items() if k != "ops"}


# ---------------------------------------------------------------- set-up
def heldout_problems(cfg: Config) -> list[Task]:
    env = cfg.environment
    if env.heldout_file:
        from rla_core.envs.coding.loaders import load_problem_file

        return load_problem_file(env.heldout_file)
    return generate_mixed(CODING, _knobs(cfg), cfg.coding.demo_ops, env.heldout_tasks,
                          random.Random(f"{cfg.run.seed}/heldout"), "heldout", set())


def build_benchmark(cfg: Config, tasks: list[Task]) -> list[BenchmarkProblem]:
    """Each problem's reference and mutants, with pass_all measured on its GT tests in the sandbox."""
    sandbox, limits = sandbox_for(cfg)
    pools = [benchmark_programs(t) for t in tasks]
    trajectories = [_program_trajectory(t, j, program) for t, pool in zip(tasks, pools)
                    for j, program in enumerate(pool)]
    runs = run_ground_truth(sandbox, limits, {t.task_id: t for t in tasks}, trajectories)
    out, position = [], 0
    for task, pool in zip(tasks, pools):
        passed = [r.pass_all for r in runs[position:position + len(pool)]]
        position += len(pool)
        out.append(BenchmarkProblem(task=task, programs=pool, pass_all=passed))
    return out


def _program_trajectory(task: Task, index: int, program: str) -> Trajectory:
    step = Step(index=0, prompt_ids=[], response_ids=[], response_text=program, action=program, observation="")
    return Trajectory(task_id=task.task_id, slot_id=task.slot_id, sample_index=index, goal=task.spec["statement"],
                      initial_observation="", steps=[step], success=False)


def demo_problems(cfg: Config, paths: RunPaths, count: int, stream: str) -> list[Task]:
    """Fresh procedural problems whose pipelines are none of the held-out/reserved ones."""
    return generate_mixed(CODING, _knobs(cfg), cfg.coding.demo_ops, count, random.Random(f"{cfg.run.seed}/{stream}"),
                          "demo", set(read_json(paths.reserved)), distinct=False)


# ---------------------------------------------------------------- the iteration
def judge_demonstrations(cfg: Config, demos: list[Task]) -> list[tuple[str, str]]:
    """The judge's warm-start pairs: coding.demo_tests correct tests per demonstration problem (worked
    with coding.judge_work)."""
    return judge_pairs(demos, cfg.coding.demo_tests, random.Random(f"{cfg.run.seed}/judge-demos"),
                       worked=cfg.coding.judge_work)


def programs_for(paths: RunPaths, cfg: Config, tasks: list[Task], model_dir: Path, n: int, temperature: float,
                 seed_value: int, desc: str) -> tuple[list[Trajectory], list[ProgramRun]]:
    """n programs per task from the policy in `model_dir`, run on the GT tests."""
    engine, tokenizer = engine_for(cfg, paths.root, "policy", model_dir, cfg.rollout.batch_size)
    params = SamplingParams(cfg.rollout.max_new_tokens, temperature, seed_value)
    with progress_bar(len(tasks) * n, f"{desc}: programs", unit="program") as bar:
        trajectories = write_programs(engine, tokenizer, tasks, n, params, progress=bar.update)
    sandbox, limits = sandbox_for(cfg)
    with progress_bar(len(trajectories), f"{desc}: sandbox", unit="program") as bar:
        runs = run_ground_truth(sandbox, limits, {t.task_id: t for t in tasks}, trajectories, progress=bar.update)
    return with_outcomes(trajectories, runs), runs


def tests_for(paths: RunPaths, cfg: Config, tasks: list[Task], trajectories: list[Trajectory], model_dir: Path,
              seed_value: int, desc: str) -> list[UnitTest]:
    """U unit tests per task from the judge in `model_dir`, run on the given programs."""
    engine, tokenizer = engine_for(cfg, paths.root, "judge", model_dir, cfg.judge.batch_size)
    params = SamplingParams(cfg.judge.max_new_tokens, cfg.judge.temperature, seed_value)
    u = cfg.coding.tests_per_problem
    with progress_bar(len(tasks) * u, f"{desc}: unit tests", unit="test") as bar:
        tests = write_tests(engine, tokenizer, tasks, u, params, progress=bar.update)
    sandbox, limits = sandbox_for(cfg)
    with progress_bar(len(trajectories), f"{desc}: sandbox", unit="program") as bar:
        return run_unit_tests(sandbox, limits, {t.task_id: t for t in tasks}, trajectories, tests, progress=bar.update)


# ---------------------------------------------------------------- evaluation
def evaluate_dev(paths: RunPaths, cfg: Config, policy_dir: Path, judge_dir: Path, out: Path,
                 seed_value: int) -> dict[str, float]:
    """The dev-split scores that model selection reads (eval.dev_file), at every evaluation: pass@1 of
    eval.dev_episodes_per_task programs per dev problem (`dev/*`, success_rate = pass@1) and the judge's UT
    accuracy / detect rate on the dev benchmark's program pools (`dev/bench_*`). {} without a dev split."""
    if not cfg.eval.dev_file:
        return {}
    metrics = dev_policy_scores(paths, cfg, policy_dir, out, seed_value)
    if paths.coding_benchmark_dev.is_file():
        scores = score_benchmark(paths, cfg, judge_dir, paths.coding_benchmark_dev, out / "dev_benchmark_tests.jsonl",
                                 seed_value, "dev judge benchmark")
        metrics.update({f"dev/bench_{n}": v for n, v in scores.items()})
    return metrics


def dev_policy_scores(paths: RunPaths, cfg: Config, policy_dir: Path, out: Path, seed_value: int) -> dict[str, float]:
    """pass@1 of eval.dev_episodes_per_task programs per dev problem (`dev/*`, success_rate = pass@1); the
    programs' runs go to out/dev_programs.jsonl. {} without a dev split."""
    if not cfg.eval.dev_file:
        return {}
    tasks = read_records(paths.dev, Task)
    _, runs = programs_for(paths, cfg, tasks, policy_dir, cfg.eval.dev_episodes_per_task, cfg.eval.temperature,
                           seed_value, "dev eval")
    write_records(out / "dev_programs.jsonl", runs)
    metrics = {f"dev/{n}": v for n, v in coding_rewards.outcome_metrics(runs).items()}
    metrics["dev/success_rate"] = metrics["dev/pass_at_1"]
    metrics["dev/episodes"] = float(len(runs))
    return metrics


def score_benchmark(paths: RunPaths, cfg: Config, judge_dir: Path, benchmark: Path, tests_file: Path,
                    seed_value: int, desc: str = "judge benchmark") -> dict[str, float]:
    """The judge's tests on the problems of a benchmark file (the run's held-out or dev one), run on each
    problem's fixed program pool; the tests go to `tests_file`."""
    bench = read_records(benchmark, BenchmarkProblem)
    if not bench:
        return {}

    def score() -> dict[str, float]:
        tasks = [b.task for b in bench]
        pools = [_program_trajectory(b.task, j, p) for b in bench for j, p in enumerate(b.programs)]
        tests = tests_for(paths, cfg, tasks, pools, judge_dir, seed_value, desc)
        runs = [ProgramRun(task_id=b.task.task_id, sample_index=j, statuses=[], pass_ratio=float(ok), pass_all=ok)
                for b in bench for j, ok in enumerate(b.pass_all)]
        write_records(tests_file, tests)
        return coding_rewards.judge_metrics(runs, tests)

    # a fixed judge's scores are computed once per run (exact: tasks/settings/judge_scores.py)
    return scored_once(paths, cfg, CodingSetting.judge_weight_key, judge_dir, benchmark, tests_file, seed_value,
                       cfg.coding.tests_per_problem, score)


class CodingSetting(Setting):
    name = "coding"
    episodic = False
    judge_weight_key = "coding.judge_test_weight"  # λ·(fraction of the judge's tests a program passes)
    judge_metric = ("judge benchmark UT accuracy", "bench/ut_accuracy")
    judge_train_metric = ("judge UT accuracy on the iteration's programs", "judge/ut_accuracy")
    # single-turn: the judge's count is its tests per problem, the horizon the program's length
    scaling_axes = {"m": ("coding.tests_per_problem", (2, 4, 8, 16)),
                    "turns": ("rollout.max_new_tokens", (16, 32, 64, 128))}
    horizon_unit = "generated_tokens"

    def judge_verdicts(self, cfg: Config, trajectories: list[Trajectory]) -> int:
        """One verdict per unit test: U tests for every problem rolled out."""
        return len({t.task_id for t in trajectories}) * cfg.coding.tests_per_problem
    summary_rows = (
        ("held-out pass@1 (sampled)", "heldout/pass_at_1"),
        ("held-out pass@1 (greedy)", "heldout_greedy/pass_at_1"),
        ("held-out GT pass ratio", "heldout/pass_ratio"),
        ("held-out crash rate", "heldout/crash_rate"),
        ("judge bench UT accuracy", "bench/ut_accuracy"),
        ("judge bench detect rate", "bench/detect_rate"),
        ("judge on programs UT acc", "heldout/judge_ut_accuracy"),
        ("judge on programs detect", "heldout/judge_detect_rate"),
        ("dev pass@1 (sampled)", "dev/pass_at_1"),  # what `best` is chosen by
        ("judge dev bench UT acc", "dev/bench_ut_accuracy"),
    )

    # ---------------------------------------------------------------- set-up
    def seed(self, paths: RunPaths, cfg: Config) -> dict:
        """Train slots and held-out problems with disjoint pipelines (the dev split's, eval.dev_file, reserved
        too); the program pools of the judge benchmark and of its dev counterpart run once."""
        from rla_core.envs.coding.loaders import load_problem_file

        heldout = heldout_problems(cfg)
        dev = load_problem_file(cfg.eval.dev_file) if cfg.eval.dev_file else []
        reserved = reserved_content(CODING, heldout + dev, cfg.environment.reserved_files, load_problem_file)
        train = generate_mixed(CODING, _knobs(cfg), _ops_mix(cfg), cfg.environment.train_slots,
                               random.Random(f"{cfg.run.seed}/train"), "slot", reserved)
        TaskStore.from_seed(train).save(paths.seed_store)
        write_records(paths.heldout, heldout)
        write_json(paths.reserved, sorted(reserved))
        summary = {"train": len(train), "heldout": len(heldout), "reserved": len(reserved)}
        benchmarks = [("benchmark", heldout, paths.coding_benchmark)]
        if cfg.eval.dev_file:
            write_records(paths.dev, dev)
            benchmarks.append(("dev_benchmark", dev, paths.coding_benchmark_dev))
        for split, tasks, path in benchmarks:
            bench = build_benchmark(cfg, [t for t in tasks if t.spec.get("ops")][: cfg.coding.benchmark_problems])
            write_records(path, bench)
            summary.update({split: len(bench), f"{split}_programs": sum(len(b.programs) for b in bench)})
        return summary

    def init_models(self, paths: RunPaths, cfg: Config) -> dict:
        tasks = demo_problems(cfg, paths, CORPUS_PROBLEMS, "corpus")
        texts = corpus(CODING, tasks, random.Random(f"{cfg.run.seed}/corpus"))
        return build_models(paths, cfg, train_tokenizer(texts, cfg.models.vocab_size))

    def bootstrap(self, paths: RunPaths, cfg: Config) -> dict:
        """Policy SFT on reference programs, judge SFT on correct unit tests (fresh problems), and, for the llm
        rewriter's tiny environment model, SFT on procedural rewrites in pipeline form."""
        boot = cfg.bootstrap
        demos = demo_problems(cfg, paths, boot.demos, "demos")
        jobs = {"policy": (self.warm_start_pairs(paths, cfg, "policy", demos), boot.policy_steps, boot.lr),
                "judge": (self.warm_start_pairs(paths, cfg, "judge", demos), boot.judge_steps, boot.lr)}
        if warm_starts_environment(cfg):
            jobs["environment"] = (rewrite_pairs_coding(CODING, demos, random.Random(f"{cfg.run.seed}/env-demos"),
                                                        with_feedback=True),
                                   boot.environment_steps, boot.environment_lr)
        summary: dict[str, float] = {}
        for role, (pairs, steps, lr) in jobs.items():
            start = time.perf_counter()
            model, tokenizer, metrics = warm_start_role(paths, cfg, role, pairs, steps, lr)
            save_pretrained(trainable_weights.merge(model), tokenizer, paths.bootstrap / role)
            summary.update({f"bootstrap/{role}_{k}": v for k, v in metrics.items()})
            summary[f"bootstrap/{role}_pairs"] = float(len(pairs))
            summary[f"bootstrap/{role}_seconds"] = time.perf_counter() - start
        return summary

    def warm_start_pairs(self, paths: RunPaths, cfg: Config, role: str,
                         demos: list[Task] | None = None) -> list[tuple[str, str]]:
        """The policy's reference programs, or the judge's correct unit tests (worked with coding.judge_work),
        of bootstrap.demos fresh problems (`demos`: those problems, already drawn)."""
        check_role(role)
        demos = demos if demos is not None else demo_problems(cfg, paths, cfg.bootstrap.demos, "demos")
        return policy_pairs(demos) if role == "policy" else judge_demonstrations(cfg, demos)

    def dev_policy_scores(self, paths: RunPaths, cfg: Config, policy_dir: Path, out: Path,
                          seed: int) -> dict[str, float]:
        return dev_policy_scores(paths, cfg, policy_dir, out, seed)

    # ---------------------------------------------------------------- the iteration
    def rollout(self, paths: RunPaths, cfg: Config, k: int) -> dict:
        tasks = read_records(paths.it(k).tasks, Task)
        trajectories, runs = programs_for(paths, cfg, tasks, paths.model_dir(k, "policy"), cfg.rollout.n,
                                          cfg.rollout.temperature, stage_seed(cfg, k, "rollout"), f"rollout {k}")
        write_records(paths.it(k).trajectories, trajectories)
        write_records(paths.it(k).programs, runs)
        metrics = coding_rewards.outcome_metrics(runs)
        metrics["success_rate"] = metrics["pass_at_1"]
        return {"metrics": metrics}

    def judge(self, paths: RunPaths, cfg: Config, k: int) -> dict:
        tasks = read_records(paths.it(k).tasks, Task)
        trajectories = read_records(paths.it(k).trajectories, Trajectory)
        tests = tests_for(paths, cfg, tasks, trajectories, paths.model_dir(k, "judge"), stage_seed(cfg, k, "judge"),
                          f"judge {k}")
        write_records(paths.it(k).unit_tests, tests)
        write_records(paths.it(k).judged, [])  # no step verdicts in this setting
        metrics = coding_rewards.judge_metrics(read_records(paths.it(k).programs, ProgramRun), tests)
        return {"metrics": metrics}

    def adapt(self, paths: RunPaths, cfg: Config, k: int, rewrite: Callable | None) -> dict:
        store = TaskStore.load(paths.store_dir(k))
        trajectories = read_records(paths.it(k).trajectories, Trajectory)
        runs = read_records(paths.it(k).programs, ProgramRun)
        by_task: dict[str, list[ProgramRun]] = {}
        for run in runs:
            by_task.setdefault(run.task_id, []).append(run)

        def feedback_of(task: Task, group: list[Trajectory]):
            return coding_feedback(task, by_task.get(task.task_id, []))

        env = cfg.environment
        new_store, report, metrics = adapt_store(store, trajectories, [], k, env.alpha_low, env.alpha_high, rewrite,
                                                 env.rewriter, random.Random(stage_seed(cfg, k, "adapt")), feedback_of)
        return save_adapted(paths, k, store, new_store, report, metrics)

    def data(self, paths: RunPaths, cfg: Config, k: int, report: AdaptReport) -> dict:
        """Training samples from everything but rejected candidates' programs and tests."""
        rejected = set(report.rejected)
        it = paths.it(k)
        rolled_out = read_records(it.trajectories, Trajectory)
        all_tests = read_records(it.unit_tests, UnitTest)
        trajectories = [t for t in rolled_out if t.task_id not in rejected]
        runs = [r for r in read_records(it.programs, ProgramRun) if r.task_id not in rejected]
        tests = [t for t in all_tests if t.task_id not in rejected]
        env = cfg.environment
        policy, policy_metrics = coding_rewards.policy_samples(trajectories, runs, tests, env.alpha_low, env.alpha_high,
                                                               cfg.coding.judge_test_weight)
        judge_high = env.alpha_high if cfg.coding.judge_alpha_high is None else cfg.coding.judge_alpha_high
        judge_data, judge_metrics = coding_rewards.judge_samples(runs, tests, env.alpha_low, judge_high)
        return write_batches(paths, cfg, k, policy, judge_data, {**policy_metrics, **judge_metrics}, rolled_out,
                             [t.response_ids for t in all_tests])

    # ---------------------------------------------------------------- evaluation
    def evaluate_models(self, paths: RunPaths, cfg: Config, policy_dir: Path, judge_dir: Path, out: Path,
                        seed_value: int, final: bool = True) -> dict[str, float]:
        """Held-out pass@1 (eval.episodes_per_task programs per problem at eval.temperature; greedy too when
        `final`), and the judge: UT accuracy / detect rate of its tests on the fixed benchmark pools (`bench/*`)
        and, when `final`, on the policy's own held-out programs (`heldout/judge_*`)."""
        tasks = read_records(paths.heldout, Task)
        trajectories, runs = programs_for(paths, cfg, tasks, policy_dir, cfg.eval.episodes_per_task,
                                          cfg.eval.temperature, seed_value, "held-out eval")
        write_records(out / "heldout_programs.jsonl", runs)
        metrics = {f"heldout/{n}": v for n, v in coding_rewards.outcome_metrics(runs).items()}
        metrics["heldout/success_rate"] = metrics["heldout/pass_at_1"]
        metrics["heldout/episodes"] = float(len(runs))
        if final and cfg.eval.greedy_at_end and cfg.eval.temperature > 0:
            _, greedy = programs_for(paths, cfg, tasks, policy_dir, 1, 0.0, seed_value, "held-out eval (greedy)")
            metrics.update({f"heldout_greedy/{n}": v for n, v in coding_rewards.outcome_metrics(greedy).items()})
            metrics["heldout_greedy/success_rate"] = metrics["heldout_greedy/pass_at_1"]
        if final:
            tests = tests_for(paths, cfg, tasks, trajectories, judge_dir, seed_value, "held-out judge")
            metrics.update({f"heldout/judge_{n}": v for n, v in coding_rewards.judge_metrics(runs, tests).items()})
        if paths.coding_benchmark.is_file():
            scores = score_benchmark(paths, cfg, judge_dir, paths.coding_benchmark, out / "benchmark_tests.jsonl",
                                     seed_value)
            metrics.update({f"bench/{n}": v for n, v in scores.items()})
        metrics.update(evaluate_dev(paths, cfg, policy_dir, judge_dir, out, seed_value))
        write_json(out / "metrics.json", metrics)
        return metrics

    # ---------------------------------------------------------------- optional
    def gates(self, paths: RunPaths, cfg: Config, k: int, slots: list, heldout: list[str]) -> list:
        """Every active and pending problem: tests, limits, statements."""
        from tasks.checks.gates import check_coding_tasks

        problems = [s.active for s in slots] + [s.pending.task for s in slots if s.pending]
        return [check_coding_tasks(problems, heldout)]

    def build_data_files(self, cfg: Config, folder: Path) -> dict | None:
        from tasks.stages.datasets import build_coding_files

        return build_coding_files(cfg, folder)
