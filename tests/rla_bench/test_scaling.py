"""`rla bench scaling` on the real model: the coding setting's axes and the depth axis of a pretrained
model (the micro-size scaling run itself is in test_bench.py)."""
from __future__ import annotations

import shutil

import pytest
import torch

from rla_bench import scaling
from rla_core.config import load_config
from rla_core.errors import BadValue
from rla_core.models.factory import load_pretrained
from rla_core.models.pretrained import SMOLLM2, ensure


def test_each_setting_and_model_kind_gets_its_own_axes():
    tiny = scaling.axes_for(load_config(None, []))
    assert tiny["m"][0] == "judge.m" and tiny["width"][0] == "models.*.hidden_size"
    coding = scaling.axes_for(load_config(["configs/coding.yaml"], []))
    assert coding["m"][0] == "coding.tests_per_problem" and coding["turns"][0] == "rollout.max_new_tokens"
    smol = scaling.axes_for(load_config(["configs/coding.yaml", "configs/smol_coding.yaml"], []))
    assert smol["width"] == scaling.LAYERS and smol["m"] == coding["m"]
    assert scaling.units_for(load_config(["configs/coding.yaml"], []))["turns"] == "generated_tokens"
    assert scaling.units_for(load_config(None, []))["turns"] == "policy_steps"


def test_judge_verdicts_count_what_each_settings_judge_writes():
    from rla_core.schemas import Step, Trajectory
    from tasks.settings import setting_for

    def trajectory(task: str, steps: int) -> Trajectory:
        return Trajectory(task_id=task, slot_id=task, sample_index=0, goal="g", initial_observation="o", steps=[
            Step(index=i, prompt_ids=[1], response_ids=[2], response_text="x", action="a", observation="o")
            for i in range(steps)], success=False)

    runs = [trajectory("t1", 3), trajectory("t1", 2), trajectory("t2", 1)]
    games = load_config(None, ["judge.m=3"])
    assert setting_for(games).judge_verdicts(games, runs) == 6 * 3  # m per policy step
    coding = load_config(["configs/coding.yaml"], ["coding.tests_per_problem=5"])
    assert setting_for(coding).judge_verdicts(coding, runs) == 2 * 5  # U per problem


def test_keep_layers_cuts_a_pretrained_model_to_its_first_blocks(tmp_path):
    source = ensure(SMOLLM2)
    folder = tmp_path / "policy"
    shutil.copytree(source, folder)
    scaling.keep_layers(folder, 2)
    full, _ = load_pretrained(source)
    cut, tokenizer = load_pretrained(folder)
    assert cut.config.num_hidden_layers == 2 and len(cut.model.layers) == 2
    for name, tensor in cut.state_dict().items():  # every kept weight is the original's
        assert torch.equal(tensor, full.state_dict()[name]), name
    ids = torch.tensor([tokenizer("def add(a, b):")["input_ids"]])
    assert cut(input_ids=ids).logits.shape == (1, ids.shape[1], full.config.vocab_size)
    with pytest.raises(BadValue, match="cannot keep 3 of its 2"):
        scaling.keep_layers(folder, 3)
