"""The real pretrained model through the whole loop: `rla bench learning-check --micro` (the GPU learning
check's script at micro size on the CPU) with SmolLM2-135M-Instruct as policy and judge, in both rows
(full loop and outcome only). Every real part runs once: the chat template, the judge's verdicts parsed
from free text, models.dtype, the warm-start, an update of each model, the registry."""
from __future__ import annotations

import json
import math

import pytest
import torch

from rla_bench import learning_check
from rla_core.models.precision import cpu_has_native_bf16
from rla_core.models.pretrained import SMOLLM2, resolve
from rla_core.models.factory import load_pretrained
from rla_core.models.precision import autocast
from rla_core.schemas import JudgedStep, TrainingSample, Trajectory
from rla_core.training import trainable
from rla_core.training.base import get_trainer
from tasks.common import load_model
from tasks.paths import RunPaths, run_config
from tasks.storage.files import done_summary, read_records


@pytest.fixture(scope="module")
def smollm2_dir():
    folder = resolve(SMOLLM2.name)
    try:
        return load_pretrained(folder)[1], folder
    except OSError:
        pytest.skip("SmolLM2 is not converted here (make install does it)")


def test_learning_check_micro_runs_smollm2_through_both_rows(harness, tmp_path, smollm2_dir, capsys):
    tokenizer, _ = smollm2_dir
    assert learning_check.main(["--micro", "--out", str(tmp_path)]) == 0
    printed = capsys.readouterr().out.splitlines()
    assert [line.split()[0] for line in printed if line[:2] in ("a ", "d ")] == ["a", "d"]  # the table
    root = tmp_path / "learning-check"
    result = json.loads((root / "learning_check.json").read_text())
    assert [line["row"] for line in result["rows"]] == ["a", "d"]
    for line in result["rows"]:
        assert line["iterations"] == 1 and 0.0 <= line["heldout_after"] <= 1.0 and line["episodes"] == 4

    start = tokenizer.convert_tokens_to_ids("<|im_start|>")
    for row in ("a", "d"):
        paths = RunPaths.of(root / f"{row}-seed0")
        init = done_summary(paths.init_models)
        native = "bfloat16" if cpu_has_native_bf16() else "float32"
        assert init["policy_dtype"] == init["judge_dtype"] == native  # models.dtype=auto on a real model
        trajectories = read_records(paths.it(1).trajectories, Trajectory)
        assert trajectories and all(step.prompt_ids[0] == start for t in trajectories for step in t.steps)
        judged = read_records(paths.it(1).judged, JudgedStep)
        assert judged and all(len(j.samples) == 2 for j in judged)  # m = 2 judge samples per step
        assert all(s.prompt_ids[0] == start and s.text for j in judged for s in j.samples)  # chat prompt, free text
        judge = done_summary(paths.it(1).trained("judge"))
        assert judge["trained"] is (row == "d")  # row (a) keeps its judge fixed; every task is in band in (d)
    d = RunPaths.of(root / "d-seed0")
    judged = read_records(d.it(1).judged, JudgedStep)
    assert sum(s.verdict != 0 for j in judged for s in j.samples) > len(judged)  # most verdicts parsed
    # the judge's update changed only what train.trainable=last_layers:2 allows, into a plain HF checkpoint
    _assert_only_the_top_moved(d.bootstrap / "judge", d.it(1).model("judge"))

    # The policy: at this size it never wins, so its batch is empty; one update of the real trainer on its
    # own recorded rollout steps (the ids and log-probs the engine sampled) stands in, as the stage runs it.
    cfg = run_config(d.root)
    trajectories = read_records(d.it(1).trajectories, Trajectory)
    samples = [TrainingSample(prompt_ids=s.prompt_ids, response_ids=s.response_ids, old_logprobs=s.response_logprobs,
                              advantage=1.0 if i % 2 else -1.0, task_id=t.task_id, sample_index=t.sample_index,
                              step_index=s.index)
               for i, (t, s) in enumerate((t, s) for t in trajectories for s in t.steps[:1])][:4]
    model, tokenizer = load_model(d.bootstrap / "policy")
    trainable.apply(model, cfg.train.trainable)
    trainer = get_trainer("torch")(model, cfg.train, cfg.train.lr, None)
    reference, _ = load_model(d.bootstrap / "policy")  # train.reference: initial, as in the quickstart
    with autocast(cfg.models.compute_dtype("policy")):
        metrics = trainer.train(samples, reference, 0)
    assert metrics["optimizer_steps"] == 1 and math.isfinite(metrics["loss"])
    trainer.save(tmp_path / "policy", tokenizer=tokenizer)
    _assert_only_the_top_moved(d.bootstrap / "policy", tmp_path / "policy")


def _assert_only_the_top_moved(before_dir, after_dir):
    before, _ = load_pretrained(before_dir)
    after, _ = load_pretrained(after_dir)
    moved = {name for (name, p), q in zip(before.named_parameters(), after.parameters()) if not torch.equal(p, q)}
    top = (".layers.28.", ".layers.29.")
    assert moved and all(any(t in name for t in top) or name.startswith(("model.norm", "model.embed")) for name in moved)
    assert any(".layers.29." in name for name in moved)
