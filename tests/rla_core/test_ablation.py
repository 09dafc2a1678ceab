"""The ablation rows and λ as a setting keeps it: the overrides a row makes, and the base-config check."""
from __future__ import annotations

import pytest

from rla_core.ablation import ROWS, JudgeWeight, check_base, parse_rows, row_overrides
from rla_core.config import PROJECT_ROOT, ConfigError, load_config

CODING = str(PROJECT_ROOT / "configs" / "coding.yaml")


def test_judge_weight_reads_the_settings_key_from_the_config():
    cfg = load_config([CODING], ["coding.judge_test_weight=0.5"])
    assert JudgeWeight.of(cfg, "coding.judge_test_weight") == JudgeWeight("coding.judge_test_weight", 0.5)
    assert JudgeWeight.of(cfg, "reward.step_weight").value == cfg.reward.step_weight


def test_rows_switch_the_settings_lambda_and_nothing_else():
    weight = JudgeWeight("coding.judge_test_weight", 0.5)
    overrides = {key: row_overrides(weight, "exp", "/r", ROWS[key], 2) for key in "ade"}
    assert "coding.judge_test_weight=0.5" in overrides["d"]
    assert "coding.judge_test_weight=0.0" in overrides["a"] and "coding.judge_test_weight=0.0" in overrides["e"]
    assert not any(o.startswith("reward.step_weight") for rows in overrides.values() for o in rows)
    # (e) is the full loop of (d) with λ = 0: same judge training and adaptation, other name
    assert set(overrides["e"]) - set(overrides["d"]) == {"coding.judge_test_weight=0.0", "run.name=e-seed2"}
    cfg = load_config([CODING], overrides["e"])
    assert (cfg.coding.judge_test_weight, cfg.judge.train, cfg.environment.adapt) == (0.0, True, True)


def test_check_base_names_the_settings_key():
    cfg = load_config([CODING])
    with pytest.raises(ConfigError, match=r"coding.judge_test_weight .* \(b, d\)"):
        check_base(cfg, parse_rows("abd"), JudgeWeight("coding.judge_test_weight", 0.0))
    check_base(cfg, parse_rows("ae"), JudgeWeight("coding.judge_test_weight", 0.0))  # no row needs λ > 0
    check_base(cfg, parse_rows("ade"), JudgeWeight("coding.judge_test_weight", 0.3))
    assert [r.key for r in parse_rows("e,a")] == ["a", "e"]


def test_experiment_differences_keep_what_changes_a_result():
    from rla_core.ablation import experiment_differences
    from rla_core.config import config_differences

    base = load_config([str(PROJECT_ROOT / "configs" / "coding.yaml")], [])
    other = load_config([str(PROJECT_ROOT / "configs" / "coding.yaml")],
                        ["run.seed=3", "coding.judge_test_weight=0.3", "run.eval_every=4", "versioning.dvc=false",
                         "tracking.register_models=false", "run.keep_checkpoints=1", "bootstrap.policy_steps=7",
                         "run.torch_threads=1"])
    assert experiment_differences(config_differences(base, other), "coding.judge_test_weight") == [
        "run.torch_threads", "bootstrap.policy_steps"]  # threads change the last bits of a CPU update
    # a whole section's name covers its keys, not keys that merely start with the same letters
    assert experiment_differences(["tracking.experiment", "trackingx", "run.eval_everyx"], "w") == [
        "trackingx", "run.eval_everyx"]
