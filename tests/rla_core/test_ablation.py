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


def test_judge_training_keys_separate_only_runs_that_train_their_judge():
    from rla_core.ablation import JUDGE_TRAINING_KEYS, experiment_differences

    differences = ["train.judge_lr", "coding.judge_alpha_high", "train.lr"]
    assert experiment_differences(differences, "coding.judge_test_weight") == differences
    # a fixed judge is the same run whatever its (unused) training keys say; the policy's lr still counts
    assert experiment_differences(differences, "coding.judge_test_weight", judge_trained=False) == ["train.lr"]
    assert set(JUDGE_TRAINING_KEYS) == {"train.judge_lr", "coding.judge_alpha_high"}


def test_iteration_only_keys_are_read_by_the_iteration_stages_only():
    """--warm-start reuses a warm start made with other values of ITERATION_ONLY_KEYS: that holds while nothing
    but the training stage (both lrs) and the coding data stage (the judge's band) reads them. A new reader
    elsewhere (a warm start using train.lr, say) fails here until it is judged safe and listed."""
    import re

    from rla_core.ablation import ITERATION_ONLY_KEYS

    readers = {"train.lr": r"\btrain\.lr\b", "train.judge_lr": r"\.judge_lr\b",
               "coding.judge_alpha_high": r"\.judge_alpha_high\b"}
    assert set(readers) == set(ITERATION_ONLY_KEYS)
    allowed = {"train.lr": {"tasks/stages/training.py"}, "train.judge_lr": {"tasks/stages/training.py"},
               "coding.judge_alpha_high": {"tasks/settings/coding.py", "rla_core/config_schema.py"}}  # + its check
    found: dict[str, set[str]] = {key: set() for key in readers}
    for package in ("rla_core", "tasks", "flows"):
        for path in (PROJECT_ROOT / package).rglob("*.py"):
            code = "\n".join(line.split("#")[0] for line in path.read_text().splitlines())
            code = re.sub(r'"""[\s\S]*?"""', "", code)  # docstrings name keys without reading them
            code = re.sub(r'"[^"\n]*"', '""', code)  # so do messages
            for key, pattern in readers.items():
                if re.search(pattern, code):
                    found[key].add(str(path.relative_to(PROJECT_ROOT)))
    assert found == allowed
