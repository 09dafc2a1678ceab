"""`run.keep_checkpoints`: a real micro run (DVC on) whose commit stage deletes older checkpoints; the run
still resumes and extends, and `rla eval` of a pruned iteration brings its checkpoint back from DVC and
reproduces the logged evaluation. Without DVC, the error says the checkpoint is gone."""
from __future__ import annotations

import pytest

from flows.train import evaluate_run, train
from rla_core.errors import MissingFile
from tasks.checks.preflight import check
from tasks.paths import ROLES, RunPaths
from tasks.storage.files import done_summary, read_json
from tasks.storage.retention import PRUNED, bring_back, is_pruned, prune_checkpoints


@pytest.fixture(scope="module")
def kept(harness, micro, tmp_path_factory):
    out = tmp_path_factory.mktemp("runs")
    overrides = micro + [f"run.output_dir={out}", "run.name=keep", "run.iterations=2", "run.eval_every=1",
                         "run.keep_checkpoints=1"]
    result = train(None, overrides)
    return RunPaths.of(result["run_dir"]), overrides


def test_commit_keeps_the_newest_checkpoint_of_each_role(kept):
    paths, _ = kept
    assert done_summary(paths.stage(1, "commit"))["pruned"] == []
    pruned = done_summary(paths.stage(2, "commit"))["pruned"]
    assert sorted(pruned) == sorted(paths.rel(paths.it(1).model(role)) for role in ROLES)
    for role in ROLES:
        old, new = paths.it(1).model(role), paths.it(2).model(role)
        assert is_pruned(old) and "deleted after iteration 2 by run.keep_checkpoints=1" in \
            (old.parent / PRUNED).read_text()
        assert old.with_name("model.dvc").is_file()  # the pointer stays: DVC can bring it back
        assert (new / "model.safetensors").is_file() and paths.model_dir(3, role) == new
    assert prune_checkpoints(paths, 2, 1, versioned=True) == []  # idempotent


def test_a_pruned_run_passes_preflight_and_extends(kept, micro):
    paths, overrides = kept
    more = overrides[:-3] + ["run.iterations=3", "run.eval_every=1", "run.keep_checkpoints=1"]
    check(None, more)  # the resume pre-flight skips pruned folders instead of calling the run broken
    train(None, more)
    assert paths.is_complete(3)
    assert is_pruned(paths.it(2).model("policy")) and (paths.it(3).model("policy") / "model.safetensors").is_file()


def test_rla_eval_of_a_pruned_iteration_restores_it_and_reproduces_its_numbers(kept):
    paths, overrides = kept
    assert is_pruned(paths.it(1).model("policy"))
    logged = read_json(paths.it(1).eval_metrics)
    check(None, overrides, command="eval", iteration=1)  # what `rla eval --iteration 1` checks first
    assert evaluate_run(None, overrides, iteration=1) == logged
    for role in ROLES:
        model = paths.it(1).model(role)
        assert (model / "model.safetensors").is_file() and not (model.parent / PRUNED).exists()


def test_an_unversioned_pruned_checkpoint_is_reported_gone(tmp_path):
    paths = RunPaths.of(tmp_path)
    stage = paths.it(1).trained("policy")
    stage.mkdir(parents=True)
    (stage / PRUNED).write_text("model/ deleted after iteration 3 by run.keep_checkpoints=1; it was not versioned "
                                "(versioning.dvc: false): it is gone\n")
    with pytest.raises(MissingFile, match="iter_0001/train_policy/model: .*it is gone"):
        bring_back(paths, paths.it(1).model("policy"))
    with pytest.raises(MissingFile, match="train_judge/model: missing"):
        bring_back(paths, paths.it(1).model("judge"))
    with pytest.raises(ValueError, match="keep must be >= 1"):
        prune_checkpoints(paths, 1, 0, versioned=False)
