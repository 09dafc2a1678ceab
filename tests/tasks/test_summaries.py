"""Typed stage summaries: the stage-name prefix, the evaluations' split names, old folders' names migrated."""
from __future__ import annotations

import pytest
from pydantic import ValidationError

from tasks.stages.evaluation import evaluate
from tasks.stages.iteration import adapt, data, judge, rollout, select
from tasks.storage.files import mark_done
from tasks.summaries import (EvaluateSummary, StageSummary, TrainSummary, migrate, parse_summary, prefixed,
                             read_summary)
from tasks.stages.training import train_judge, train_policy
from tasks.stages.validate import validate

# (stage, a summary as stage folders held it before the prefix rule, the names it has now)
OLD_AND_NEW = [
    ("rollout", {"train/success_rate": 0.5}, {"rollout/success_rate": 0.5}),
    ("judge", {"judge/train_p_pos": 0.7}, {"judge/p_pos": 0.7}),
    ("adapt", {"env/accepted": 2.0, "env/slots": 8.0}, {"adapt/accepted": 2.0, "adapt/slots": 8.0}),
    ("data", {"data/policy/samples": 9.0, "compute/episodes": 64.0},
     {"data/policy/samples": 9.0, "data/compute/episodes": 64.0}),
    ("validate", {"gates/reserved_content_failed": 0.0}, {"validate/reserved_content_failed": 0.0}),
    ("train_policy", {"policy/loss": 0.25}, {"train_policy/loss": 0.25}),
    ("train_judge", {"judge/loss": 0.5}, {"train_judge/loss": 0.5}),
]


@pytest.mark.parametrize("stage, old, new", OLD_AND_NEW)
def test_old_names_are_migrated_and_new_ones_kept(stage, old, new):
    assert migrate(stage, {"metrics": old})["metrics"] == new
    assert migrate(stage, {"metrics": new})["metrics"] == new  # idempotent: no new name has an old prefix


def test_every_iteration_stage_prefixes_with_its_name_and_evaluations_by_split():
    for declared in (select, rollout, judge, adapt, data, validate, train_policy, train_judge):
        assert declared.prefix_metrics
        assert prefixed(declared.name, {"x": 1}) == {f"{declared.name}/x": 1.0}
    assert not evaluate.prefix_metrics
    assert prefixed("evaluate", {"heldout/success_rate": 0.3, "dev/success_rate": 0.2}, prefix=False) == {
        "heldout/success_rate": 0.3, "dev/success_rate": 0.2}
    with pytest.raises(ValueError, match="must start with one of"):
        prefixed("evaluate", {"success_rate": 0.3}, prefix=False)


def test_read_summary_types_a_folder_of_either_age(tmp_path):
    folder = tmp_path / "train_policy"
    folder.mkdir()
    mark_done(folder, {"model_dir": "iterations/iter_0001/train_policy/model", "trained": True,
                       "metrics": {"policy/loss": 0.25}, "seconds": 1.5})
    summary = read_summary(folder, TrainSummary)
    assert (summary.model_dir, summary.trained, summary.why) == ("iterations/iter_0001/train_policy/model", True, None)
    assert summary.metrics == {"train_policy/loss": 0.25} and summary.seconds == 1.5
    common = read_summary(folder)  # a reader of the common fields only
    assert type(common) is StageSummary and common.metrics == {"train_policy/loss": 0.25}


def test_a_body_summary_is_held_to_its_class():
    with pytest.raises(ValidationError):
        TrainSummary.model_validate({"trained": True, "metrics": {}})  # no model_dir
    with pytest.raises(ValidationError):
        EvaluateSummary.model_validate({"evaluated": True, "metrics": {}, "typo": 1})
    # reading tolerates keys that are not the class's (a routed stage adds its flow run id)
    parsed = parse_summary("evaluate", {"evaluated": False, "metrics": {}, "flow_run_id": "x"}, EvaluateSummary)
    assert parsed.evaluated is False and parsed.final is True
