"""A fourth setting is one module plus one registry line.

`SpellSetting` below is that module: a single-turn toy (the policy is asked to spell a word; success = the
word comes back), with its own environment family. The test registers it with one `register(...)` line
and runs the real training flow on it: Prefect, MLflow, DVC, the Great Expectations gates, both trainers,
the registry. Nothing under tasks/ or flows/ knows its name.
"""
from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

from flows.train import train
from rla_core.adaptation.cycle import AdaptReport
from rla_core.adaptation.store import TaskStore
from rla_core.config import Config
from rla_core.envs.base import SpecError
from rla_core.models.factory import save_pretrained
from rla_core.models.tokenizer import train_tokenizer
from rla_core.rollout.base import SamplingParams
from rla_core.schemas import Step, Task, TrainingSample, Trajectory
from rla_core.training.sft import supervised_finetune
from tasks.common import load_model, stage_seed
from tasks.stages.engines import engine_for
from tasks.paths import RunPaths
from tasks.settings import Setting, register, setting_for
from tasks.settings.base import build_models, save_adapted, tokenize_pairs
from tasks.storage.files import done_summary, read_json, read_records, write_json, write_records
from tasks.stages.training import write_batches

WORDS = ["ab", "ba", "abc", "cab", "bca", "aa", "bb", "cc", "acb", "bac"]


class SpellFamily:
    """The toy's tasks: {"word": str} over the letters a, b, c."""
    name = "spell"

    def validate(self, spec: dict, horizon: int | None = None) -> dict:
        word = spec.get("word") if isinstance(spec, dict) else None
        if not isinstance(word, str) or not word or set(word) - set("abc"):
            raise SpecError(f"not a word over a, b, c: {spec!r}")
        return {"word": word}

    def content_hash(self, spec: dict) -> str:
        return hashlib.sha256(json.dumps(spec, sort_keys=True).encode()).hexdigest()[:16]

    def difficulty(self, spec: dict) -> float:
        return float(len(spec["word"]))


def _task(word: str, prefix: str) -> Task:
    return Task(task_id=f"{prefix}-{word}", slot_id=f"{prefix}-{word}", env="spell", spec={"word": word},
                difficulty=float(len(word)))


def _prompt(task: Task) -> str:
    return f"spell {task.spec['word']}:"


class SpellSetting(Setting):
    name = "spell"
    family = SpellFamily()
    summary_rows = (("held-out success (sampled)", "heldout/success_rate"),)

    def seed(self, paths: RunPaths, cfg: Config) -> dict:
        train_words, heldout_words = WORDS[:6], WORDS[6:]
        TaskStore.from_seed([_task(w, "slot") for w in train_words]).save(paths.seed_store)
        write_records(paths.heldout, [_task(w, "heldout") for w in heldout_words])
        write_json(paths.reserved, sorted(self.family.content_hash({"word": w}) for w in heldout_words))
        return {"train": len(train_words), "heldout": len(heldout_words)}

    def init_models(self, paths: RunPaths, cfg: Config) -> dict:
        texts = [f"{_prompt(_task(w, 'x'))} {w}" for w in WORDS] * 20
        return build_models(paths, cfg, train_tokenizer(texts, cfg.models.vocab_size))

    def bootstrap(self, paths: RunPaths, cfg: Config) -> dict:
        summary = {}
        for role in ("policy", "judge"):
            model, tokenizer = load_model(paths.init_models / role)
            model.train()
            pairs = [(_prompt(_task(w, "x")), f" {w}") for w in WORDS[:6]]
            metrics = supervised_finetune(model, tokenize_pairs(tokenizer, pairs), steps=20, batch_size=6, lr=3e-3,
                                          seed=cfg.run.seed, desc=f"bootstrap {role}")
            save_pretrained(model, tokenizer, paths.bootstrap / role)
            summary.update({f"bootstrap/{role}_{k}": v for k, v in metrics.items()})
        return summary

    def _spell(self, paths, cfg, tasks, model_dir, n, temperature, seed) -> list[Trajectory]:
        engine, tokenizer = engine_for(cfg, paths.root, "policy", model_dir, cfg.rollout.batch_size)
        prompts = tokenizer([_prompt(t) for t in tasks], add_special_tokens=False)["input_ids"]
        generations = engine.generate(prompts, SamplingParams(6, temperature, seed, n))
        out = []
        for i, g in enumerate(generations):
            task, prompt = tasks[i // n], prompts[i // n]
            step = Step(index=0, prompt_ids=prompt, response_ids=g.token_ids, response_text=g.text,
                        response_logprobs=g.logprobs, action=g.text.strip() or None, observation="")
            out.append(Trajectory(task_id=task.task_id, slot_id=task.slot_id, sample_index=i % n, goal=_prompt(task),
                                  initial_observation="", steps=[step], success=g.text.strip() == task.spec["word"]))
        return out

    def rollout(self, paths: RunPaths, cfg: Config, k: int) -> dict:
        tasks = read_records(paths.it(k).tasks, Task)
        trajectories = self._spell(paths, cfg, tasks, paths.model_dir(k, "policy"), cfg.rollout.n,
                                   cfg.rollout.temperature, stage_seed(cfg, k, "rollout"))
        write_records(paths.it(k).trajectories, trajectories)
        return {"metrics": {"success_rate": sum(t.success for t in trajectories) / len(trajectories)}}

    def judge(self, paths: RunPaths, cfg: Config, k: int) -> dict:
        write_records(paths.it(k).judged, [])  # the toy's reward is exact match: nothing to judge
        return {"metrics": {}}

    def adapt(self, paths: RunPaths, cfg: Config, k: int, rewrite) -> dict:
        store = TaskStore.load(paths.store_dir(k))  # the toy never rewrites a word
        return save_adapted(paths, k, store, store, AdaptReport(), {"accepted": 0.0, "proposed": 0.0})

    def data(self, paths: RunPaths, cfg: Config, k: int, report: AdaptReport) -> dict:
        trajectories = read_records(paths.it(k).trajectories, Trajectory)
        groups: dict[str, list[Trajectory]] = {}
        for t in trajectories:
            groups.setdefault(t.task_id, []).append(t)
        policy = []
        for group in groups.values():
            mean = sum(t.success for t in group) / len(group)
            policy += [TrainingSample(prompt_ids=t.steps[0].prompt_ids, response_ids=t.steps[0].response_ids,
                                      advantage=float(t.success) - mean, task_id=t.task_id,
                                      sample_index=t.sample_index, step_index=0,
                                      old_logprobs=t.steps[0].response_logprobs or None)
                       for t in group if mean not in (0.0, 1.0)]
        return write_batches(paths, cfg, k, policy, [], {}, trajectories, [])

    def evaluate_models(self, paths: RunPaths, cfg: Config, policy_dir: Path, judge_dir: Path, out: Path,
                        seed: int, final: bool = True) -> dict[str, float]:
        tasks = read_records(paths.heldout, Task)
        trajectories = self._spell(paths, cfg, tasks, policy_dir, cfg.eval.episodes_per_task, cfg.eval.temperature,
                                   seed)
        metrics = {"heldout/success_rate": sum(t.success for t in trajectories) / len(trajectories),
                   "heldout/episodes": float(len(trajectories))}
        write_json(out / "metrics.json", metrics)
        return metrics


@pytest.fixture(scope="module")
def spell_run(harness, micro, tmp_path_factory):
    register(SpellSetting())  # the one registry line
    out = tmp_path_factory.mktemp("runs")
    overrides = micro + [f"run.output_dir={out}", "run.name=spell", "environment.name=spell",
                         "environment.heldout_file=null", "environment.reserved_files=[]", "environment.knobs={}",
                         "environment.adapt=false", "eval.judge_benchmark=null", "eval.dev_file=null",
                         "eval.dev_judge_benchmark=null", "eval.episodes_per_task=2", "rollout.n=4",
                         "train.optimizer_steps=1"]
    return train(None, overrides)


def test_a_registered_setting_runs_the_whole_flow_and_updates_the_policy(spell_run):
    paths = RunPaths.of(spell_run["run_dir"])
    assert paths.is_complete(1)
    before = json.loads((paths.baseline / "metrics.json").read_text())
    after = json.loads(paths.it(1).eval_metrics.read_text())
    assert before["heldout/episodes"] == after["heldout/episodes"] == 8.0  # 4 held-out words x 2
    policy = read_records(paths.it(1).batch("policy"), TrainingSample)
    rollouts = read_records(paths.it(1).trajectories, Trajectory)
    assert len(rollouts) == 4 * 4 and {t.task_id for t in rollouts} <= {f"slot-{w}" for w in WORDS[:6]}
    # the policy trained on the toy's own samples, through the common gates and trainer
    assert policy and {s.task_id for s in policy} <= {t.task_id for t in rollouts}
    assert done_summary(paths.stage(1, "train_policy"))["trained"]
    init = (paths.bootstrap / "policy" / "model.safetensors").read_bytes()
    assert (paths.model_dir(2, "policy") / "model.safetensors").read_bytes() != init
    assert read_json(paths.reserved) and not {t.task_id for t in rollouts} & {f"heldout-{w}" for w in WORDS[6:]}


def test_the_setting_is_found_by_name_and_its_summary_rows_are_the_table(spell_run):
    from flows.commands import summary_table

    assert isinstance(setting_for("spell"), SpellSetting)
    table = summary_table(spell_run["run_dir"])
    assert "held-out success (sampled)" in table and "judge benchmark" not in table


def test_no_stage_branches_on_a_setting_name():
    """The stages, flows and benches ask the setting (its methods, `episodic`, `summary_rows`), never
    compare `environment.name` with a setting's name."""
    import re

    root = Path(__file__).resolve().parents[2]
    branch = re.compile(r"environment\.name\s*[!=]=|[!=]=\s*[\"'](coding|household|textworld)[\"']|is_coding")
    found = [(str(path.relative_to(root)), line.strip()) for package in ("tasks", "flows", "rla_bench")
             for path in sorted((root / package).rglob("*.py"))
             for line in path.read_text().splitlines() if branch.search(line)]
    # `rla eval --games` plays TextWorld game files: a family's own command, refused for other runs
    assert found == [("tasks/reports/game_eval.py", 'if cfg.environment.name != "textworld":')]
