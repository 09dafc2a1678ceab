"""Prefect tasks that prepare a run: seed task store + held-out set, tiny models, supervised warm-start."""
from __future__ import annotations

import json
import random
import time
from dataclasses import dataclass
from pathlib import Path

from rla_core.adaptation.critic import critic_feedback
from rla_core.adaptation.store import TaskStore
from rla_core.bootstrap import (balance, generate_tasks, judge_pairs, oracle_walk, policy_pairs, rewrite_pairs,
                                walk_feedback)
from rla_core.config import Config, resolve_data_path
from rla_core.envs.base import EnvironmentFamily, check_task_lines, get_environment
from rla_core.errors import MissingFile
from rla_core.judge.benchmark import BenchmarkStep
from rla_core.models.factory import build_or_load, save_pretrained
from rla_core.models.tokenizer import train_tokenizer
from rla_core.records import read_numbered
from rla_core.schemas import CriticFeedback, JudgedStep, Task, Trajectory
from rla_core.training.sft import supervised_finetune
from tasks.common import load_model, stage_seed
from tasks.engines import judge_all, rollout_tasks
from tasks.paths import RunPaths
from tasks.stage import stage
from tasks.storage import read_json, read_records, write_json, write_records

WALK_NOISE = 0.25  # random actions in policy demonstrations, so the policy sees recovery states
# Tokenizer corpus: policy and judge prompts of noisy oracle walks (bootstrap.corpus_walks), generated task
# specs (corpus_specs), and compact rewrite prompts with their answers (corpus_rewrites; whatever the
# rewriter, so the tokenizer never depends on it).
CORPUS_WALK_NOISE = 0.5
# Environment-model warm-start: episodes per task (temperature 1), judge samples per step, and
# procedural rewrites per task and direction.
ENV_EPISODES, ENV_JUDGE_M, ENV_DRAWS = 4, 2, 2


@dataclass(frozen=True)
class Pair:
    prompt_ids: list[int]
    response_ids: list[int]


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


@stage(scope="run", folder="seed")
def seed(paths: RunPaths, cfg: Config, k: int, out: Path) -> dict:
    """The seed task store (train slots) and the held-out tasks, disjoint by game content.

    Games of the held-out tasks, of the dev split (eval.dev_file) and of `environment.reserved_files` are
    recorded in seed/reserved.json: no seed slot and no warm-start demonstration may play one of them. The
    dev split and its judge benchmark are copied beside the held-out tasks (seed/dev.jsonl, ...).
    """
    from tasks import coding

    if coding.is_coding(cfg):
        return coding.seed(paths, cfg)
    family, horizon = get_environment(cfg.environment.name), cfg.rollout.max_steps
    heldout = heldout_tasks(cfg, family)
    dev = load_task_file(cfg.eval.dev_file, family, horizon) if cfg.eval.dev_file else []
    reserved = {family.content_hash(t.spec) for t in heldout + dev}
    for path in cfg.environment.reserved_files:
        reserved |= {family.content_hash(t.spec) for t in load_task_file(path, family, horizon)}
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


@stage(scope="run", folder="models/init")
def init_models(paths: RunPaths, cfg: Config, k: int, out: Path) -> dict:
    """Train the tokenizer on game text (and rewrite prompts), build the tiny policy, judge and
    environment models."""
    from tasks import coding

    if coding.is_coding(cfg):
        return coding.init_models(paths, cfg)
    boot = cfg.bootstrap
    walks = demo_walks(cfg, paths, boot.corpus_walks, CORPUS_WALK_NOISE, "corpus")
    keep = cfg.rollout.history_turns
    texts = [p + t for p, t in policy_pairs(walks, keep) + judge_pairs(walks, keep)]
    family = get_environment(cfg.environment.name)
    texts += [json.dumps(family.generate(cfg.environment.knobs, random.Random(i))) for i in range(boot.corpus_specs)]
    texts += rewrite_corpus(cfg, paths, boot.corpus_rewrites)
    return build_models(paths, cfg, train_tokenizer(texts, cfg.models.vocab_size))


def build_models(paths: RunPaths, cfg: Config, tokenizer) -> dict:
    """The policy, judge and environment models (tiny ones built, or the configured paths) with `tokenizer`,
    saved under models/init; the summary counts the vocabulary and each model's parameters."""
    summary = {"vocab": len(tokenizer)}
    for offset, role in enumerate(("policy", "judge", "environment")):
        model, tok = build_or_load(getattr(cfg.models, role), tokenizer, cfg.run.seed + offset)
        save_pretrained(model, tok, paths.init_models / role)
        summary[f"{role}_params"] = sum(p.numel() for p in model.parameters())
    return summary


def tokenize_pairs(tokenizer, pairs: list[tuple[str, str]]) -> list[Pair]:
    prompts = tokenizer([p for p, _ in pairs], add_special_tokens=False)["input_ids"]
    targets = tokenizer([t for _, t in pairs], add_special_tokens=False)["input_ids"]
    return [Pair(p, t + [tokenizer.eos_token_id]) for p, t in zip(prompts, targets)]


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


def warm_starts_environment(cfg: Config) -> bool:
    """Only the llm rewriter's tiny environment model is warm-started (a configured path is a real LLM)."""
    boot = cfg.bootstrap
    return (cfg.environment.rewriter == "llm" and cfg.models.environment.path is None
            and boot.environment_tasks > 0 and boot.environment_steps > 0)


def warm_start_environment(cfg: Config, paths: RunPaths) -> dict[str, float]:
    """Fine-tune the init environment model on `environment_pairs`; save it to models/bootstrap/environment."""
    start = time.perf_counter()
    pairs = environment_pairs(cfg, paths)
    model, tokenizer = load_model(paths.init_models / "environment")
    metrics = supervised_finetune(model, tokenize_pairs(tokenizer, pairs), steps=cfg.bootstrap.environment_steps,
                                  batch_size=cfg.bootstrap.batch_size, lr=cfg.bootstrap.environment_lr,
                                  seed=cfg.run.seed, desc="bootstrap environment")
    save_pretrained(model, tokenizer, paths.bootstrap / "environment")
    summary = {f"bootstrap/environment_{k}": v for k, v in metrics.items()}
    summary.update({"bootstrap/environment_pairs": float(len(pairs)),
                    "bootstrap/environment_seconds": time.perf_counter() - start})
    return summary


@stage(scope="run", folder="models/bootstrap")
def bootstrap(paths: RunPaths, cfg: Config, k: int, out: Path) -> dict:
    """Supervised warm-start: policy on oracle demonstrations, judge on oracle step labels, and (llm
    rewriter) the environment model on procedural rewrites of the critic feedback of those two."""
    from tasks import coding

    if coding.is_coding(cfg):
        return coding.bootstrap(paths, cfg)
    boot, keep = cfg.bootstrap, cfg.rollout.history_turns
    summary: dict[str, float] = {}
    apart = boot.exclude_train_games
    jobs = {
        "policy": (policy_pairs(demo_walks(cfg, paths, boot.demos, WALK_NOISE, "demos", apart), keep),
                   boot.policy_steps),
        "judge": (balance(judge_pairs(demo_walks(cfg, paths, boot.demos, boot.bad_action_rate, "labels", apart),
                                      keep), random.Random(cfg.run.seed)), boot.judge_steps),
    }
    for role, (pairs, steps) in jobs.items():
        model, tokenizer = load_model(paths.init_models / role)
        model.train()
        metrics = supervised_finetune(model, tokenize_pairs(tokenizer, pairs), steps=steps,
                                      batch_size=boot.batch_size, lr=boot.lr, seed=cfg.run.seed,
                                      desc=f"bootstrap {role}")
        save_pretrained(model, tokenizer, paths.bootstrap / role)
        summary.update({f"bootstrap/{role}_{k}": v for k, v in metrics.items()})
    if warm_starts_environment(cfg):
        summary.update(warm_start_environment(cfg, paths))
    return summary
