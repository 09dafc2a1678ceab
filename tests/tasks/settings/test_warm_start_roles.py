"""`Setting.warm_start_pairs` knows two roles, "policy" and "judge": any other name is a BadValue raised before
any work (no demonstrations drawn, nothing written), in every setting. Before, any role but "policy" silently
got the judge's pairs. The pairs themselves are checked end to end in tests/flows/test_ablation.py."""
from __future__ import annotations

from pathlib import Path

import pytest

from rla_core.config import load_config
from rla_core.errors import BadValue
from tasks.paths import RunPaths
from tasks.settings.base import WARM_START_ROLES, check_role, setting_for

ROOT = Path(__file__).resolve().parents[3]
CONFIGS = ["quickstart.yaml", "textworld.yaml", "coding.yaml"]


@pytest.mark.parametrize("config", CONFIGS)
@pytest.mark.parametrize("role", ["verdict", "Policy", "", "environment"])
def test_an_unknown_role_is_refused_before_any_work(tmp_path, config, role):
    cfg = load_config([ROOT / "configs" / config])
    run = tmp_path / "run"
    with pytest.raises(BadValue, match="warm-start role must be one of policy, judge"):
        setting_for(cfg).warm_start_pairs(RunPaths.of(run), cfg, role)
    assert not run.exists()


def test_the_known_roles_pass_unchanged():
    assert WARM_START_ROLES == ("policy", "judge")
    assert [check_role(r) for r in WARM_START_ROLES] == ["policy", "judge"]


def test_judge_labels_on_the_policys_steps_need_the_warm_started_policy(tmp_path):
    """bootstrap.judge_policy_tasks without models/bootstrap/policy: MissingFile naming it, nothing written."""
    from rla_core.errors import MissingFile
    from tasks.settings.episodic import policy_step_labels

    cfg = load_config([ROOT / "configs" / "quickstart.yaml"], ["bootstrap.judge_policy_tasks=2"])
    run = tmp_path / "run"
    with pytest.raises(MissingFile, match="bootstrap/policy is missing: bootstrap.judge_policy_tasks"):
        policy_step_labels(cfg, RunPaths.of(run))
    assert not run.exists()
