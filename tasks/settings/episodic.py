"""The episodic setting: multi-turn text games whose every step the judge scores (the household game and
TextWorld; any family of rla_core/envs/). The bodies of the set-up, iteration and evaluation stages.

  seed       train slots + held-out (and dev) tasks, disjoint by game content; the judge benchmarks copied
  init       tokenizer on game text (and rewrite prompts); tiny policy/judge/environment models
  bootstrap  policy SFT on noisy oracle walks (+ a DAgger round), judge SFT on oracle step labels, the llm rewriter's
             environment model on procedural rewrites of critic feedback
  rollout    N episodes per task                                            -> trajectories.jsonl
  judge      m verdicts per step, p+/p- against the oracle labels            -> judged.jsonl
  adapt      acceptance / proposals from the critic feedback of the episodes
  data       policy samples (mixed-outcome tasks) + judge samples (in-band tasks)
  evaluate   held-out (and dev) success; the judge on the benchmark steps (and the dev ones)
"""
from __future__ import annotations

import json
import random
import time
from pathlib import Path
from typing import Callable

from rla_core.adaptation.critic import critic_feedback
from rla_core.adaptation.cycle import AdaptReport, trainable
from rla_core.adaptation.cycle import adapt as adapt_store
from rla_core.adaptation.store import TaskStore
from rla_core.bootstrap import (balance, generate_tasks, judge_pairs, oracle_walk, played_pairs, policy_pairs,
                                replay_walk, rewrite_pairs, walk_feedback)
from rla_core.compute import judge_responses
from rla_core.config import Config, resolve_data_path
from rla_core.envs.base import EnvironmentFamily, check_task_lines, get_environment
from rla_core.errors import MissingFile
from rla_core.judge.benchmark import BenchmarkStep, score_benchmark
from rla_core.models.factory import save_pretrained
from rla_core.models.precision import autocast
from rla_core.models.tokenizer import train_tokenizer
from rla_core.records import read_numbered
from rla_core.rewards import judge_samples, policy_samples
from rla_core.rollout.base import SamplingParams
from rla_core.rollout.runner import rollout_metrics
from rla_core.schemas import CriticFeedback, JudgedStep, Task, Trajectory
from rla_core.training import trainable as trainable_weights
from rla_core.training.sft import supervised_finetune
from tasks.common import load_model, progress_bar, stage_seed
from tasks.stages.engines import engine_for, judge_all, rollout_tasks
from tasks.paths import RunPaths
from tasks.settings.base import (Setting, build_models, check_role, reserved_content, save_adapted, tokenize_pairs,
                                 warm_start_role, warm_starts_environment)
from tasks.settings.judge_scores import scored_once
from tasks.storage.files import read_json, read_records, write_json, write_records
from tasks.stages.training import write_batches

WALK_NOISE = 0.25  # random actions in policy demonstrations, so the policy sees recovery states
# Tokenizer corpus: policy and judge prompts of noisy oracle walks (bootstrap.corpus_walks), generated task
# specs (corpus_specs), and compact rewrite prompts with their answers (corpus_rewrites; whatever the
# rewriter, so the tokenizer never depends on it).
CORPUS_WALK_NOISE = 0.5
# Environment-model warm-start: episodes per task (temperature 1), judge samples per step, and
# procedural rewrites per task and direction.
ENV_EPISODES, ENV_JUDGE_M, ENV_DRAWS = 4, 2, 2


def load_task_file(path: str, family: EnvironmentFamily, horizon: int) -> list[Task]:
    """Tasks of a shipped task file, each re-validated for this environment and horizon."""
    resolved = resolve_data_path(path)
    if not resolved.is_file():
        raise MissingFile(f"task file not found: {path} (looked at {resolved})")
    numbered = read_numbered(resolved, Task)
    check_task_lines(numbered, family, horizon, str(resolved))
    return [task for _, task in numbered]


def load_benchmark_file(path: str) -> list[BenchmarkStep]:
    resolved = resolve_data_path(path)
    if not resolved.is_file():
        raise MissingFile(f"judge benchmark not found: {path} (looked at {resolved})")
    return read_records(resolved, BenchmarkStep)


def heldout_tasks(cfg: Config, family: EnvironmentFamily) -> list[Task]:
    """The run's held-out tasks: the shipped file when configured (the same for every seed), else
    generated from the run seed."""
    env, horizon = cfg.environment, cfg.rollout.max_steps
    if env.heldout_file:
        return load_task_file(env.heldout_file, family, horizon)
    return generate_tasks(family, env.knobs, env.heldout_tasks, random.Random(f"{cfg.run.seed}/heldout"),
                          "heldout", set(), horizon)


def demo_tasks(cfg: Config, paths: RunPaths, count: int, rng: random.Random, exclude_slots: bool = False) -> list[Task]:
    """Fresh tasks that share no game with the held-out and reserved tasks (nor, with `exclude_slots`,
    with the seed slots RL trains on)."""
    family = get_environment(cfg.environment.name)
    reserved = set(read_json(paths.reserved))
    if exclude_slots:
        reserved |= {family.content_hash(t.spec) for t in TaskStore.load(paths.seed_store).active_tasks()}
    return generate_tasks(family, cfg.environment.knobs, count, rng, "demo", reserved, cfg.rollout.max_steps)


def demo_walks(cfg: Config, paths: RunPaths, count: int, noise: float, stream: str,
               exclude_slots: bool = False) -> list:
    """Oracle walks on the `demo_tasks` of the random stream `stream`."""
    family = get_environment(cfg.environment.name)
    rng = random.Random(f"{cfg.run.seed}/{stream}")
    return [oracle_walk(family, t, noise, rng) for t in demo_tasks(cfg, paths, count, rng, exclude_slots)]


def policy_step_labels(cfg: Config, paths: RunPaths) -> list[tuple[str, str]]:
    """Judge warm-start pairs on the warm-started policy's own steps (bootstrap.judge_policy_tasks): fresh
    `demo_tasks` played once each by models/bootstrap/policy at rollout.temperature, every step's judge
    prompt with its oracle label. MissingFile when the policy is not warm-started yet."""
    policy = paths.bootstrap / "policy"
    if not policy.is_dir():
        raise MissingFile(f"{policy} is missing: bootstrap.judge_policy_tasks labels the warm-started policy's "
                          "steps, so the policy's warm start comes first (the bootstrap stage trains it first)")
    boot = cfg.bootstrap
    rng = random.Random(f"{cfg.run.seed}/judge-policy-steps")
    tasks = demo_tasks(cfg, paths, boot.judge_policy_tasks, rng, boot.exclude_train_games)
    played, _ = rollout_tasks(paths, cfg, tasks, policy, 1, cfg.rollout.temperature,
                              stage_seed(cfg, 0, "judge-policy-steps"), "bootstrap judge: the policy's steps")
    return played_pairs(played, cfg.rollout.history_turns)


def dagger_round(cfg: Config, paths: RunPaths, demos: list[tuple[str, str]], policy: Path,
                 on_step: Callable | None = None):
    """One DAgger round (bootstrap.policy_dagger_*) from the policy checkpoint `policy`: it plays fresh `demo_tasks`
    once each at policy_dagger_temperature; every state it visited, replayed (`replay_walk`), gets the oracle's
    command as target; then policy_dagger_steps more steps from `policy` on `demos` + those pairs (a fresh
    optimizer; bootstrap's batch, lr and seed). Returns (model, tokenizer, bootstrap/dagger_* metrics)."""
    started, boot, family = time.perf_counter(), cfg.bootstrap, get_environment(cfg.environment.name)
    tasks = demo_tasks(cfg, paths, boot.policy_dagger_tasks, random.Random(f"{cfg.run.seed}/policy-dagger"),
                       boot.exclude_train_games)
    played, played_metrics = rollout_tasks(paths, cfg, tasks, policy, 1, boot.policy_dagger_temperature,
                                           stage_seed(cfg, 0, "policy-dagger"), "bootstrap policy: DAgger episodes")
    by_id = {task.task_id: task for task in tasks}
    states = [s for t in played for s in replay_walk(family, by_id[t.task_id], t)]
    extra = policy_pairs([states], cfg.rollout.history_turns)
    model, tokenizer, metrics = warm_start_role(paths, cfg, "policy", demos + extra, boot.policy_dagger_steps,
                                                boot.lr, on_step=on_step, start=policy)
    metrics.update(success_rate=played_metrics["success_rate"], mean_steps=played_metrics["mean_steps"],
                   pairs=float(len(extra)), seconds=time.perf_counter() - started,
                   oracle_agreement=sum(s.taken_index == s.oracle_index for s in states) / max(len(states), 1))
    return model, tokenizer, {f"bootstrap/dagger_{k}": v for k, v in metrics.items()}


def rewrite_corpus(cfg: Config, paths: RunPaths, count: int) -> list[str]:
    """Compact rewrite prompts with their generator-form answers, both directions, for `count` fresh
    tasks (feedback from a noisy oracle walk's labels): tokenizer text, whatever the rewriter, so that
    the tokenizer and every model do not depend on environment.rewriter."""
    family, horizon = get_environment(cfg.environment.name), cfg.rollout.max_steps
    rng = random.Random(f"{cfg.run.seed}/rewrite-corpus")
    tasks = generate_tasks(family, cfg.environment.knobs, count, rng, "corpus", set(read_json(paths.reserved)),
                           horizon)
    items = [(t, walk_feedback(oracle_walk(family, t, CORPUS_WALK_NOISE, rng))) for t in tasks]
    return [prompt + answer for prompt, answer in rewrite_pairs(family, items, 1, rng, horizon)]


def task_feedback(trajectories: list[Trajectory], judged: list[JudgedStep]) -> dict[str, CriticFeedback]:
    """task id -> the critic feedback of its trajectories."""
    groups: dict[str, list[Trajectory]] = {}
    for trajectory in trajectories:
        groups.setdefault(trajectory.task_id, []).append(trajectory)
    steps: dict[str, list[JudgedStep]] = {}
    for step in judged:
        steps.setdefault(step.task_id, []).append(step)
    return {tid: critic_feedback(group, steps.get(tid, [])) for tid, group in groups.items()}


def environment_pairs(cfg: Config, paths: RunPaths) -> list[tuple[str, str]]:
    """The environment model's warm-start pairs: fresh tasks (no reserved game) played ENV_EPISODES
    times by the warm-started policy, judged ENV_JUDGE_M times per step by the warm-started judge; their
    critic feedback and ENV_DRAWS procedural rewrites per direction make (compact prompt, answer) pairs."""
    family, horizon = get_environment(cfg.environment.name), cfg.rollout.max_steps
    rng = random.Random(f"{cfg.run.seed}/env-demos")
    tasks = generate_tasks(family, cfg.environment.knobs, cfg.bootstrap.environment_tasks, rng, "envdemo",
                           set(read_json(paths.reserved)), horizon)
    trajectories, _ = rollout_tasks(paths, cfg, tasks, paths.bootstrap / "policy", ENV_EPISODES, 1.0,
                                    stage_seed(cfg, 0, "env-demos/rollout"), "bootstrap environment: rollout")
    judged, _ = judge_all(paths, cfg, trajectories, paths.bootstrap / "judge", stage_seed(cfg, 0, "env-demos/judge"),
                          "bootstrap environment: judge", m=ENV_JUDGE_M)
    feedback = task_feedback(trajectories, judged)
    return rewrite_pairs(family, [(t, feedback[t.task_id]) for t in tasks], ENV_DRAWS, rng, horizon)


def warm_start_environment(cfg: Config, paths: RunPaths) -> dict[str, float]:
    """Fine-tune the init environment model on `environment_pairs`; save it to models/bootstrap/environment."""
    start = time.perf_counter()
    pairs = environment_pairs(cfg, paths)
    model, tokenizer = load_model(paths.init_models / "environment", cfg.models.torch_device())
    with autocast(cfg.models.compute_dtype("environment"), cfg.models.torch_device()):
        metrics = supervised_finetune(model, tokenize_pairs(tokenizer, pairs), steps=cfg.bootstrap.environment_steps,
                                      batch_size=cfg.bootstrap.batch_size, lr=cfg.bootstrap.environment_lr,
                                      seed=cfg.run.seed, desc="bootstrap environment")
    save_pretrained(model, tokenizer, paths.bootstrap / "environment")
    summary = {f"bootstrap/environment_{k}": v for k, v in metrics.items()}
    summary.update({"bootstrap/environment_pairs": float(len(pairs)),
                    "bootstrap/environment_seconds": time.perf_counter() - start})
    return summary


def evaluate_dev(paths: RunPaths, cfg: Config, policy_dir: Path, judge_dir: Path, out: Path,
                 seed: int) -> dict[str, float]:
    """The dev-split scores that model selection reads, at every evaluation: the policy's success on the
    dev tasks (`dev/*`: eval.dev_episodes_per_task episodes per task at eval.temperature; no greedy pass)
    and the judge on the dev benchmark (`dev/bench_*`, eval.dev_benchmark_m verdicts per step). {} when no
    dev split is configured."""
    metrics = dev_policy_scores(paths, cfg, policy_dir, out, seed)
    if cfg.eval.dev_judge_benchmark:
        scores = score_judge_benchmark(paths, cfg, judge_dir, paths.judge_benchmark_dev,
                                       out / "dev_benchmark_verdicts.json", seed, cfg.eval.dev_benchmark_m,
                                       "dev judge benchmark")
        metrics.update({f"dev/bench_{n}": v for n, v in scores.items()})
    return metrics


def dev_policy_scores(paths: RunPaths, cfg: Config, policy_dir: Path, out: Path, seed: int) -> dict[str, float]:
    """The policy's success on the dev tasks (`dev/*`); its episodes go to out/dev_trajectories.jsonl. {}
    when no dev split is configured."""
    if not cfg.eval.dev_file:
        return {}
    tasks = read_records(paths.dev, Task)
    trajectories, _ = rollout_tasks(paths, cfg, tasks, policy_dir, cfg.eval.dev_episodes_per_task,
                                    cfg.eval.temperature, seed, "dev eval")
    write_records(out / "dev_trajectories.jsonl", trajectories)
    metrics = {f"dev/{n}": v for n, v in rollout_metrics(trajectories).items()}
    metrics["dev/episodes"] = float(len(trajectories))
    return metrics


def score_judge_benchmark(paths: RunPaths, cfg: Config, judge_dir: Path, benchmark: Path, verdicts_file: Path,
                          seed: int, m: int, desc: str = "judge benchmark") -> dict[str, float]:
    """m verdicts of the judge in `judge_dir` on every step of a judge benchmark file (the run's copy of
    the held-out or the dev one); the verdicts go to `verdicts_file`."""
    def score() -> dict[str, float]:
        steps = read_records(benchmark, BenchmarkStep)
        engine, tokenizer = engine_for(cfg, paths.root, "judge", judge_dir, cfg.judge.batch_size)
        params = SamplingParams(cfg.judge.max_new_tokens, cfg.judge.temperature, seed)
        with progress_bar(len(steps) * m, desc, unit="verdict") as bar:
            verdicts, metrics = score_benchmark(engine, tokenizer, steps, m, params, cfg.rollout.history_turns,
                                                progress=bar.update)
        write_json(verdicts_file, {s.step_id: v for s, v in zip(steps, verdicts)})
        return metrics

    # a fixed judge's scores are computed once per run (exact: tasks/settings/judge_scores.py)
    return scored_once(paths, cfg, EpisodicSetting.judge_weight_key, judge_dir, benchmark, verdicts_file, seed, m,
                       score)


class EpisodicSetting(Setting):
    name = "episodic"
    episodic = True
    summary_rows = (
        ("held-out success (sampled)", "heldout/success_rate"),
        ("held-out success (greedy)", "heldout_greedy/success_rate"),
        ("held-out mean steps", "heldout/mean_steps"),
        ("held-out invalid answers", "heldout/invalid_rate"),
        ("judge benchmark p+", "bench/p_pos"),
        ("judge benchmark p-", "bench/p_neg"),
        ("judge benchmark bal. acc", "bench/balanced_acc"),
        ("judge on episodes mu", "heldout/judge_mu"),
        ("dev success (sampled)", "dev/success_rate"),  # what `best` is chosen by
        ("judge dev bench bal. acc", "dev/bench_balanced_acc"),
    )

    # ---------------------------------------------------------------- set-up
    def seed(self, paths: RunPaths, cfg: Config) -> dict:
        """The seed task store (train slots) and the held-out tasks, disjoint by game content.

        Games of the held-out tasks, of the dev split (eval.dev_file) and of `environment.reserved_files`
        are recorded in seed/reserved.json: no seed slot and no warm-start demonstration may play one of
        them. The dev split and its judge benchmark are copied beside the held-out tasks."""
        family, horizon = get_environment(cfg.environment.name), cfg.rollout.max_steps
        heldout = heldout_tasks(cfg, family)
        dev = load_task_file(cfg.eval.dev_file, family, horizon) if cfg.eval.dev_file else []
        reserved = reserved_content(family, heldout + dev, cfg.environment.reserved_files,
                                    lambda path: load_task_file(path, family, horizon))
        train = generate_tasks(family, cfg.environment.knobs, cfg.environment.train_slots,
                               random.Random(f"{cfg.run.seed}/train"), "slot", reserved, horizon)
        TaskStore.from_seed(train).save(paths.seed_store)
        write_records(paths.heldout, heldout)
        write_json(paths.reserved, sorted(reserved))
        if cfg.eval.judge_benchmark:
            write_records(paths.judge_benchmark, load_benchmark_file(cfg.eval.judge_benchmark))
        if cfg.eval.dev_file:
            write_records(paths.dev, dev)
        if cfg.eval.dev_judge_benchmark:
            write_records(paths.judge_benchmark_dev, load_benchmark_file(cfg.eval.dev_judge_benchmark))
        return {"train": len(train), "heldout": len(heldout), "dev": len(dev), "reserved": len(reserved)}

    def init_models(self, paths: RunPaths, cfg: Config) -> dict:
        """The tokenizer on game text (and rewrite prompts), the tiny policy, judge and environment models."""
        boot = cfg.bootstrap
        walks = demo_walks(cfg, paths, boot.corpus_walks, CORPUS_WALK_NOISE, "corpus")
        keep = cfg.rollout.history_turns
        texts = [p + t for p, t in policy_pairs(walks, keep) + judge_pairs(walks, keep)]
        family = get_environment(cfg.environment.name)
        texts += [json.dumps(family.generate(cfg.environment.knobs, random.Random(i))) for i in range(boot.corpus_specs)]
        texts += rewrite_corpus(cfg, paths, boot.corpus_rewrites)
        return build_models(paths, cfg, train_tokenizer(texts, cfg.models.vocab_size))

    def bootstrap(self, paths: RunPaths, cfg: Config) -> dict:
        """Supervised warm-start: policy on oracle demonstrations, judge on oracle step labels, and (llm
        rewriter) the environment model on procedural rewrites of the critic feedback of those two."""
        boot = cfg.bootstrap
        summary: dict[str, float] = {}
        # one role after the other: the judge's labels may include the warm-started policy's own steps
        for role, steps in (("policy", boot.policy_steps), ("judge", boot.judge_steps)):
            pairs = self.warm_start_pairs(paths, cfg, role)
            model, tokenizer, metrics = warm_start_role(paths, cfg, role, pairs, steps, boot.lr)
            save_pretrained(trainable_weights.merge(model), tokenizer, paths.bootstrap / role)
            summary.update({f"bootstrap/{role}_{k}": v for k, v in metrics.items()})
            if role == "policy" and boot.policy_dagger_tasks:
                del model
                model, tokenizer, metrics = dagger_round(cfg, paths, pairs, paths.bootstrap / role)
                save_pretrained(trainable_weights.merge(model), tokenizer, paths.bootstrap / role)
                summary.update(metrics)
        if warm_starts_environment(cfg):
            summary.update(warm_start_environment(cfg, paths))
        return summary

    def warm_start_pairs(self, paths: RunPaths, cfg: Config, role: str) -> list[tuple[str, str]]:
        """The policy's oracle demonstrations (walks with WALK_NOISE random actions), or the judge's oracle
        step labels (walks with bootstrap.bad_action_rate, and with bootstrap.judge_policy_tasks the
        warm-started policy's own steps: `policy_step_labels`), balanced, as (prompt, target) pairs."""
        boot, keep, apart = cfg.bootstrap, cfg.rollout.history_turns, cfg.bootstrap.exclude_train_games
        if check_role(role) == "policy":
            return policy_pairs(demo_walks(cfg, paths, boot.demos, WALK_NOISE, "demos", apart), keep)
        walks = demo_walks(cfg, paths, boot.demos, boot.bad_action_rate, "labels", apart)
        pairs = judge_pairs(walks, keep)
        if boot.judge_policy_tasks:
            pairs += policy_step_labels(cfg, paths)
        return balance(pairs, random.Random(cfg.run.seed))

    def dev_policy_scores(self, paths: RunPaths, cfg: Config, policy_dir: Path, out: Path,
                          seed: int) -> dict[str, float]:
        return dev_policy_scores(paths, cfg, policy_dir, out, seed)

    # ---------------------------------------------------------------- the iteration
    def rollout(self, paths: RunPaths, cfg: Config, k: int) -> dict:
        tasks = read_records(paths.it(k).tasks, Task)
        trajectories, metrics = rollout_tasks(paths, cfg, tasks, paths.model_dir(k, "policy"), cfg.rollout.n,
                                              cfg.rollout.temperature, stage_seed(cfg, k, "rollout"), f"rollout {k}")
        write_records(paths.it(k).trajectories, trajectories)
        return {"metrics": metrics}

    def judge(self, paths: RunPaths, cfg: Config, k: int) -> dict:
        trajectories = read_records(paths.it(k).trajectories, Trajectory)
        judged, metrics = judge_all(paths, cfg, trajectories, paths.model_dir(k, "judge"), stage_seed(cfg, k, "judge"),
                                    f"judge {k}")
        write_records(paths.it(k).judged, judged)
        return {"metrics": metrics}

    def adapt(self, paths: RunPaths, cfg: Config, k: int, rewrite: Callable | None) -> dict:
        store = TaskStore.load(paths.store_dir(k))
        trajectories = read_records(paths.it(k).trajectories, Trajectory)
        judged = read_records(paths.it(k).judged, JudgedStep)
        env = cfg.environment
        new_store, report, metrics = adapt_store(store, trajectories, judged, k, env.alpha_low, env.alpha_high, rewrite,
                                           env.rewriter, random.Random(stage_seed(cfg, k, "adapt")))
        return save_adapted(paths, k, store, new_store, report, metrics)

    def data(self, paths: RunPaths, cfg: Config, k: int, report: AdaptReport) -> dict:
        rolled_out, all_judged = read_records(paths.it(k).trajectories, Trajectory), read_records(paths.it(k).judged, JudgedStep)
        trajectories, judged = trainable(report, rolled_out, all_judged)
        policy, policy_metrics = policy_samples(trajectories, judged, cfg.reward.step_weight)
        judge_data, judge_metrics = judge_samples(trajectories, judged, cfg.reward.step_weight,
                                                  cfg.environment.alpha_low, cfg.environment.alpha_high,
                                                  cfg.judge.outcome_balance)
        return write_batches(paths, cfg, k, policy, judge_data, {**policy_metrics, **judge_metrics}, rolled_out,
                             judge_responses(all_judged))

    # ---------------------------------------------------------------- evaluation
    def evaluate_models(self, paths: RunPaths, cfg: Config, policy_dir: Path, judge_dir: Path, out: Path,
                        seed: int, final: bool = True) -> dict[str, float]:
        """Held-out success rate of a policy (eval.episodes_per_task episodes per task at eval.temperature),
        the judge on the fixed benchmark steps (`bench/*`) and, when `final` (the warm-start and the last
        evaluation): the greedy policy (`heldout_greedy/*`, with eval.greedy_at_end) and p+/p- of the judge
        on the policy's held-out episodes (`heldout/judge_*`: a moving target, beside the benchmark); at
        every evaluation the dev split too (`dev/*`, evaluate_dev)."""
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
