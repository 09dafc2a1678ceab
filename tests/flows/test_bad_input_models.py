"""Bad model folders and checkpoints (safetensors, optimizer state, shard indexes): one clear line for each,
nothing changed (the check and the fixtures: bad_input_helpers.py).

Cases by category (parametrised ids start with the category): models 10, checkpoints 9.
"""
from __future__ import annotations

import json
import shutil
import struct

import pytest

from tests.flows.bad_input_helpers import (args, assert_one_line_and_nothing_changed, cut, existing, registry,
                                         write_model)
from tests.flows.bad_input_helpers import cwd, flows, template  # noqa: F401  (fixtures; flows: autouse)

CASES: list = []
case = registry(CASES)


# ---- model folders
@case("models", "models.policy.path", "not found")
def policy_path_missing(cwd, template):
    return args(f"models.policy.path={cwd / 'no-model'}")


@case("models", "judge-model: no config.json", "models.judge.path")
def judge_path_without_config(cwd, template):
    write_model(cwd / "judge-model")
    (cwd / "judge-model" / "config.json").unlink()
    return args(f"models.judge.path={cwd / 'judge-model'}")


@case("models", "policy-model/config.json:1:", "not valid JSON")
def policy_path_config_not_json(cwd, template):
    write_model(cwd / "policy-model")
    cut(cwd / "policy-model" / "config.json")
    return args(f"models.policy.path={cwd / 'policy-model'}")


@case("models", "runs/r/models/init/policy", "missing", "models/init/_DONE")
def init_model_missing(cwd, template):
    shutil.rmtree(existing(cwd, template) / "models" / "init" / "policy")
    return args()


@case("models", "runs/r/models/bootstrap/judge", "no weights")
def warm_start_without_weights(cwd, template):
    (existing(cwd, template) / "models" / "bootstrap" / "judge" / "model.safetensors").unlink()
    return args()


@case("models", "runs/r/models/bootstrap/policy", "no tokenizer")
def warm_start_without_tokenizer(cwd, template):
    folder = existing(cwd, template) / "models" / "bootstrap" / "policy"
    for name in ("tokenizer.json", "tokenizer_config.json"):
        (folder / name).unlink()
    return args()


@case("models", "iter_0001/train_policy/_DONE", "model_dir", "not a model folder")
def trained_model_dir_points_nowhere(cwd, template):
    marker = existing(cwd, template) / "iterations" / "iter_0001" / "train_policy" / "_DONE"
    marker.write_text(json.dumps({**json.loads(marker.read_text()), "model_dir": "iterations/gone/model"}))
    return args()


@case("models", "runs/r/models/bootstrap/policy", "is a file")
def warm_start_model_is_a_file(cwd, template):
    folder = existing(cwd, template) / "models" / "bootstrap" / "policy"
    shutil.rmtree(folder)
    folder.write_text("weights")
    return args()


@case("models", "iter_0001/train_judge/model/tokenizer.json:1:", "not valid JSON")
def tokenizer_truncated(cwd, template):
    cut(existing(cwd, template) / "iterations" / "iter_0001" / "train_judge" / "model" / "tokenizer.json")
    return args()


@case("models", "env-model", "is a file", "models.environment.path")
def environment_path_is_a_file(cwd, template):
    (cwd / "env-model").write_text("{}")
    return args(f"models.environment.path={cwd / 'env-model'}")


# ---- checkpoints
TRAINED = ("iterations", "iter_0001", "train_policy", "model")


@case("checkpoints", "train_policy/model/model.safetensors", "truncated")
def safetensors_cut(cwd, template):
    cut(existing(cwd, template).joinpath(*TRAINED, "model.safetensors"), 0.9)
    return args()


@case("checkpoints", "models/bootstrap/policy/model.safetensors", "no safetensors header")
def safetensors_empty(cwd, template):
    (existing(cwd, template) / "models" / "bootstrap" / "policy" / "model.safetensors").write_bytes(b"")
    return args()


@case("checkpoints", "model.safetensors", "header claims")
def safetensors_header_length_huge(cwd, template):
    path = existing(cwd, template).joinpath(*TRAINED, "model.safetensors")
    path.write_bytes(struct.pack("<Q", 2**40) + path.read_bytes()[8:])
    return args()


@case("checkpoints", "model.safetensors", "header is not JSON")
def safetensors_header_garbage(cwd, template):
    path = existing(cwd, template).joinpath(*TRAINED, "model.safetensors")
    data = path.read_bytes()
    path.write_bytes(data[:8] + b"\x00" * (len(data) - 8))
    return args()


@case("checkpoints", "train_policy/model/optimizer.pt", "optimizer state")
def optimizer_state_truncated(cwd, template):
    cut(existing(cwd, template).joinpath(*TRAINED, "optimizer.pt"))
    return args()


@case("checkpoints", "train_judge/model/optimizer.pt", "optimizer state")
def optimizer_state_garbage(cwd, template):
    (existing(cwd, template) / "iterations" / "iter_0001" / "train_judge" / "model" / "optimizer.pt").write_bytes(
        b"\x80\x02not a zip" * 10)
    return args()


@case("checkpoints", "model.safetensors.index.json", "shard", "model-00002-of-00002.safetensors")
def sharded_index_names_a_missing_shard(cwd, template):
    folder = existing(cwd, template) / "models" / "bootstrap" / "judge"
    index = {"weight_map": {"w": "model.safetensors", "v": "model-00002-of-00002.safetensors"}}
    (folder / "model.safetensors.index.json").write_text(json.dumps(index))
    return args()


@case("checkpoints", "models/init/judge/model.safetensors", "describes 16 bytes", "holds 20")
def safetensors_trailing_bytes(cwd, template):
    path = existing(cwd, template) / "models" / "init" / "judge" / "model.safetensors"
    path.write_bytes(path.read_bytes() + b"\x00" * 4)
    return args()


@case("checkpoints", "user-model/model.safetensors", "truncated")
def user_model_checkpoint_cut(cwd, template):
    write_model(cwd / "user-model")
    cut(cwd / "user-model" / "model.safetensors", 0.95)
    return args(f"models.policy.path={cwd / 'user-model'}")


# --------------------------------------------------------------------------- the tests
@pytest.mark.parametrize("make, expected", CASES)
def test_bad_input_is_one_line_and_changes_nothing(make, expected, cwd, template, capsys, flows):
    assert_one_line_and_nothing_changed(make, expected, cwd, template, capsys, flows)
