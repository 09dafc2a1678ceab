"""The real pretrained model through the whole loop: `rla bench learning-check --micro` (the GPU learning
check's script at micro size on the CPU) with SmolLM2-135M-Instruct as policy and judge, in both rows
(full loop and outcome only). Every real part runs once: the chat template, the judge's verdicts parsed
from free text, models.dtype, the warm-start, an update of each model, the registry."""
from __future__ import annotations

import json

import pytest
import torch

from rla_bench import learning_check
from rla_core.models.precision import cpu_has_native_bf16
from rla_core.models.pretrained import SMOLLM2, resolve
from rla_core.schemas import JudgedStep, Trajectory
from rla_core.models.factory import load_pretrained
from tasks.paths import RunPaths
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
        assert line["iterations"] == 1 and 0.0 <= line["heldout_after"] <= 1.0 and line["episodes"] == 6

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
        policy = done_summary(paths.it(1).trained("policy"))
        judge = done_summary(paths.it(1).trained("judge"))
        if policy["trained"]:  # a batch needs a task with mixed outcomes: at micro size it may have none
            assert policy["metrics"]["train_policy/trainable_params"] < policy["metrics"][
                "train_policy/total_params"]
        assert judge["trained"] is False if row == "a" else judge["why"] != "disabled"
    # the update changed only what train.trainable=last_layers:1 allows, and the checkpoint is a plain model
    d = RunPaths.of(root / "d-seed0")
    if done_summary(d.it(1).trained("policy"))["trained"]:
        before, _ = load_pretrained(d.bootstrap / "policy")
        after, _ = load_pretrained(d.it(1).model("policy"))
        moved = {name for (name, p), q in zip(before.named_parameters(), after.parameters())
                 if not torch.equal(p, q)}
        assert moved and all(".layers.29." in name or name.startswith(("model.norm", "model.embed")) for name in moved)
