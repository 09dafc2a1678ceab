"""MLflow tracking: metrics/params read back from sqlite, nested runs, resume, model registry."""
from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from rla_core.config import Config, TrackingConfig
from tasks.tracking.tracker import (
    EXPERIMENT_KIND,
    EXPERIMENT_KIND_TAG,
    RUN_ID_FILE,
    Tracker,
    experiment_ui_url,
    flatten,
    read_metrics,
    read_params,
)
from tasks.tracking.model_registry import best_tags, heldout_tags


@pytest.fixture(scope="module")
def shared_uri(tmp_path_factory) -> str:
    """One sqlite store for the tests that do not exercise the default location (creating a store
    runs MLflow's migrations, ~3 s)."""
    return f"sqlite:///{tmp_path_factory.mktemp('store') / 'mlflow.db'}"


def test_default_store_metrics_params_and_nested_runs(tmp_path):
    run_dir = tmp_path / "runs" / "demo"
    tracker = Tracker(run_dir)
    assert tracker.tracking_uri == f"sqlite:///{run_dir.resolve()}/mlflow.db"
    assert tracker.client.get_experiment(tracker.experiment_id).tags[EXPERIMENT_KIND_TAG] == EXPERIMENT_KIND
    tracker.log_config(Config())
    tracker.log_metrics({"reward/mean": 0.5, "acc": 1, "skip": "text", "flag": True}, step=1, iteration=1)
    tracker.log_metrics({"reward/mean": 0.75}, step=2, iteration=2)
    tracker.log_metrics({"eval:acc": 0.25}, step=2)  # no iteration: parent only; ':' is sanitised

    assert (run_dir / "mlflow.db").is_file()
    assert read_metrics(run_dir) == {"reward/mean": {1: 0.5, 2: 0.75}, "acc": {1: 1.0}, "eval_acc": {2: 0.25}}
    params = read_params(run_dir)
    assert params["rollout.n"] == str(Config().rollout.n)
    assert params["tracking.mlflow_uri"] == "None"

    child = tracker.iteration_run(2)
    child_run = tracker.client.get_run(child)
    assert child_run.data.tags["mlflow.parentRunId"] == tracker.run_id
    assert child_run.info.run_name == "iter_0002"
    assert read_metrics(child, tracker.tracking_uri) == {"reward/mean": {2: 0.75}}
    assert "config.yaml" in [a.path for a in tracker.client.list_artifacts(tracker.run_id)]
    # artifacts stay inside the run folder
    assert child_run.info.artifact_uri.startswith((run_dir / "mlartifacts").resolve().as_uri())


def test_resume_reattaches_parent_and_iteration_runs(tmp_path, shared_uri):
    run_dir = tmp_path / "resume"
    config = TrackingConfig(mlflow_uri=shared_uri, experiment="resume")
    first = Tracker(run_dir, config)
    first.log_params({"train": {"lr": 0.1}})
    it1 = first.iteration_run(1)
    first.log_metrics({"loss": 2.0}, step=1, iteration=1)
    first.finish("FAILED")  # the training crashed

    second = Tracker(run_dir, config)
    assert second.run_id == first.run_id == (run_dir / RUN_ID_FILE).read_text().strip()
    assert second.client.get_run(second.run_id).info.status == "FAILED"  # a handle changes nothing
    second.start()
    assert second.client.get_run(second.run_id).info.status == "RUNNING"
    assert second.iteration_run(1) == it1
    first.end_iteration(1, "FAILED")
    assert second.start_iteration(1) == it1
    assert second.client.get_run(it1).info.status == "RUNNING"
    assert second.iteration_run(2) != it1
    # a changed param does not raise; it is kept as an override tag
    assert second.log_params({"train": {"lr": 0.2, "steps": 3}}) == {"train.lr": "0.2"}
    run = second.client.get_run(second.run_id)
    assert run.data.params == {"train.lr": "0.1", "train.steps": "3"}
    assert run.data.tags["override.train.lr"] == "0.2"
    second.log_metrics({"loss": 1.0}, step=2, iteration=2)
    second.end_iteration(2)
    second.finish()
    assert read_metrics(run_dir, shared_uri) == {"loss": {1: 2.0, 2: 1.0}}
    assert second.client.get_run(second.iteration_run(2)).info.status == "FINISHED"
    runs = second.client.search_runs([second.experiment_id])
    assert len(runs) == 3  # parent + two iterations, nothing duplicated by the resume


def test_stage_times_and_artifacts(tmp_path, shared_uri):
    tracker = Tracker(tmp_path / "times", TrackingConfig(mlflow_uri=shared_uri, experiment="times"))
    tracker.log_metrics({"time/rollout_s": 0.2, "time/judge_s": 1.5}, step=1, iteration=1)  # IterationLog's timers
    tracker.log_dict({"success": False, "advantage": math.nan, "max": math.inf}, "gates/policy.json", iteration=1)
    tracker.log_text("hello\n", "samples/iter_0001.txt", iteration=1)
    (tmp_path / "report.json").write_text("{}")
    tracker.log_artifact(tmp_path / "report.json", "adapt", iteration=1)

    child = tracker.iteration_run(1)
    for run_id in (tracker.run_id, child):
        metrics = read_metrics(run_id, shared_uri)
        assert set(metrics) == {"time/rollout_s", "time/judge_s"}
        assert metrics["time/judge_s"] == {1: 1.5}
    local = Path(tracker.client.download_artifacts(child, "gates/policy.json", str(tmp_path / "dl")))
    assert json.loads(local.read_text()) == {"success": False, "advantage": "nan", "max": "inf"}
    names = {a.path for a in tracker.client.list_artifacts(child, "adapt")}
    assert names == {"adapt/report.json"}


def _tiny_checkpoint(path: Path) -> Path:
    path.mkdir(parents=True)
    (path / "config.json").write_text(json.dumps({"model_type": "qwen2", "hidden_size": 16}))
    (path / "model.safetensors").write_bytes(bytes(range(256)) * 64)
    (path / "optimizer.pt").write_bytes(b"optimizer state")
    return path


def test_register_checkpoint_tags_idempotent_and_download(tmp_path, shared_uri):
    tracker = Tracker(tmp_path / "reg", TrackingConfig(mlflow_uri=shared_uri, experiment="reg"), run_name="demo")
    model_dir = _tiny_checkpoint(tmp_path / "model")

    info = tracker.register_checkpoint(model_dir, "rla-policy", iteration=1, data_version="abc123")
    versions = tracker.client.search_model_versions("name = 'rla-policy'")
    assert [v.version for v in versions] == [int(info["version"])]
    assert versions[0].tags == {"run": "demo", "iteration": "1", "data_version": "abc123"}
    assert versions[0].run_id == tracker.iteration_run(1)
    # a resumed iteration does not register twice; a new data version does
    assert tracker.register_checkpoint(model_dir, "rla-policy", iteration=1, data_version="abc123") == info
    other = tracker.register_checkpoint(model_dir, "rla-policy", iteration=2, data_version="def456")
    assert int(other["version"]) == int(info["version"]) + 1

    restored = tracker.download_checkpoint("rla-policy", info["version"], tmp_path / "restored")
    assert sorted(p.name for p in restored.iterdir()) == ["config.json", "model.safetensors"]  # no optimizer
    assert (restored / "model.safetensors").read_bytes() == (model_dir / "model.safetensors").read_bytes()

    off = Tracker(tmp_path / "reg", TrackingConfig(mlflow_uri=shared_uri, experiment="reg", register_models=False))
    assert off.register_checkpoint(model_dir, "rla-policy", iteration=3) is None


def test_lineage_tags_resume_and_aliases(tmp_path, shared_uri):
    """Lineage tags are not identity: a resumed registration from another commit returns the same version
    and keeps its tags; `newest` follows the iteration, `best` the dev success (ties: earlier).
    (Before dev selection this test ranked by `heldout.success_rate`; the same cases now carry dev tags.)"""
    tracker = Tracker(tmp_path / "alias", TrackingConfig(mlflow_uri=shared_uri, experiment="alias"), run_name="al")
    model_dir = _tiny_checkpoint(tmp_path / "model")
    name = "rla-alias"

    def register(k, **tags):
        return tracker.register_checkpoint(model_dir, name, iteration=k, data_version=f"d{k}", tags=tags)["version"]

    v1 = register(1, git_commit="aaa", parent_version="bootstrap", **heldout_tags({"dev/success_rate": 0.25}))
    assert tracker.update_aliases(name) == {"newest": v1, "best": v1}
    v2 = register(2, git_commit="aaa", parent_version=v1, **heldout_tags({"dev/success_rate": 0.5}))
    v3 = register(3, git_commit="aaa", parent_version=v2, **heldout_tags({"dev/success_rate": 0.5}))  # a tie
    v4 = register(4, git_commit="aaa", parent_version=v3)  # not evaluated
    assert tracker.update_aliases(name) == {"newest": v4, "best": v2}
    aliases = tracker.client.get_registered_model(name).aliases
    assert {alias: str(version) for alias, version in aliases.items()} == {"newest": v4, "best": v2}
    assert tracker.client.get_model_version_by_alias(name, "best").tags["dev.success_rate"] == "0.5"

    # resume: same run/iteration/data_version from another commit -> the same version, its tags kept,
    # missing ones added; the aliases do not move
    assert register(2, git_commit="bbb", extra="x") == v2
    tags = tracker.client.get_model_version(name, v2).tags
    assert tags["git_commit"] == "aaa" and tags["extra"] == "x" and tags["parent_version"] == v1
    assert len(tracker.client.search_model_versions(f"name = '{name}'")) == 4
    assert tracker.update_aliases(name) == {"newest": v4, "best": v2}
    assert tracker.find_version(name, 3)["version"] == v3 and tracker.find_version(name, 9) is None

    # a later evaluation of iteration 4 (`rla eval`) tags it and moves `best`
    tracker.set_version_tags(name, v4, heldout_tags({"dev/success_rate": 0.75, "bench/balanced_acc": 0.6}))
    assert tracker.client.get_model_version(name, v4).tags["bench.balanced_acc"] == "0.6"
    assert tracker.update_aliases(name) == {"newest": v4, "best": v4}
    # a run ranks its own versions only, whatever other runs registered in a shared registry
    other = Tracker(tmp_path / "other", TrackingConfig(mlflow_uri=shared_uri, experiment="alias"), run_name="other")
    other.register_checkpoint(model_dir, name, iteration=7, data_version="d7",
                              tags=heldout_tags({"dev/success_rate": 1.0}))
    assert tracker.update_aliases(name) == {"newest": v4, "best": v4}


def _aliases(tracker, name) -> dict[str, str]:
    return {alias: str(version) for alias, version in tracker.client.get_registered_model(name).aliases.items()}


def test_best_follows_dev_not_heldout_and_warm_start_can_be_best(tmp_path, shared_uri):
    """`best` ranks by the dev tag even where held-out disagrees; the warm-start is iteration 0's version
    (its artifacts on the training run) and stays `best` until a later version beats it on dev."""
    tracker = Tracker(tmp_path / "dev", TrackingConfig(mlflow_uri=shared_uri, experiment="dev"), run_name="dv")
    model_dir, name = _tiny_checkpoint(tmp_path / "model"), "rla-dev-policy"

    def register(k, dev, heldout):
        tags = heldout_tags({"dev/success_rate": dev, "heldout/success_rate": heldout})
        return tracker.register_checkpoint(model_dir, name, iteration=k, data_version=f"d{k}", tags=tags)["version"]

    v0 = register(0, dev=0.4, heldout=0.1)
    version = tracker.client.get_model_version(name, v0)
    assert version.run_id == tracker.run_id and version.tags["iteration"] == "0"
    assert tracker.update_aliases(name, best_tags("policy")) == {"newest": v0, "best": v0}
    v1 = register(1, dev=0.3, heldout=0.9)  # better on held-out, worse on dev: not `best`
    v2 = register(2, dev=0.4, heldout=0.8)  # a dev tie with the warm-start: the earlier stays
    assert tracker.update_aliases(name, best_tags("policy")) == {"newest": v2, "best": v0}
    assert _aliases(tracker, name) == {"newest": v2, "best": v0}
    assert tracker.client.get_model_version(name, v1).tags["heldout.success_rate"] == "0.9"  # kept to read
    v3 = register(3, dev=0.45, heldout=0.0)  # better on dev, worst on held-out: `best`
    assert tracker.update_aliases(name, best_tags("policy")) == {"newest": v3, "best": v3}


def test_judge_best_follows_its_own_dev_score(tmp_path, shared_uri):
    """The judge's `best` ranks by its dev benchmark score (balanced accuracy; coding: UT accuracy), not by
    the policy's success, which its versions carry too."""
    tracker = Tracker(tmp_path / "judge", TrackingConfig(mlflow_uri=shared_uri, experiment="judge"), run_name="jd")
    model_dir = _tiny_checkpoint(tmp_path / "model")
    for name, bench in (("rla-dev-judge", "dev/bench_balanced_acc"), ("rla-dev-judge-coding", "dev/bench_ut_accuracy")):
        versions = [tracker.register_checkpoint(model_dir, name, iteration=k, data_version=f"{name}{k}",
                                                tags=heldout_tags({"dev/success_rate": policy, bench: judge,
                                                                   "heldout/success_rate": 1.0 - k / 4}))["version"]
                    for k, (policy, judge) in enumerate([(0.2, 0.6), (0.9, 0.55), (0.3, 0.7)])]
        assert tracker.update_aliases(name, best_tags("judge")) == {"newest": versions[2], "best": versions[2]}
        assert tracker.update_aliases(name, best_tags("policy"))["best"] == versions[1]  # the policy's rule differs
    assert best_tags("policy") == ("dev.success_rate",)


def test_best_needs_a_dev_score(tmp_path, shared_uri):
    """Without a dev tag no version is `best`: never a held-out fallback, and a `best` an older rule left on
    this run's versions is removed; another run's `best` is left alone."""
    tracker = Tracker(tmp_path / "nodev", TrackingConfig(mlflow_uri=shared_uri, experiment="nodev"), run_name="nd")
    model_dir, name = _tiny_checkpoint(tmp_path / "model"), "rla-nodev"
    v1 = tracker.register_checkpoint(model_dir, name, iteration=1, data_version="d1",
                                     tags=heldout_tags({"heldout/success_rate": 0.9}))["version"]
    tracker.client.set_registered_model_alias(name, "best", v1)  # as chosen by held-out before
    assert tracker.update_aliases(name, best_tags("policy")) == {"newest": v1}
    assert _aliases(tracker, name) == {"newest": v1}
    other = Tracker(tmp_path / "nodev2", TrackingConfig(mlflow_uri=shared_uri, experiment="nodev"), run_name="nd2")
    v2 = other.register_checkpoint(model_dir, name, iteration=1, data_version="d1",
                                   tags=heldout_tags({"dev/success_rate": 0.1}))["version"]
    assert other.update_aliases(name, best_tags("policy")) == {"newest": v2, "best": v2}
    assert tracker.update_aliases(name, best_tags("policy")) == {"newest": v1}
    assert _aliases(tracker, name) == {"newest": v1, "best": v2}


def test_heldout_tags_round_trip():
    tags = heldout_tags({"heldout/success_rate": 1 / 3, "bench/p_pos": 0.5, "heldout/episodes": 8, "note": "x",
                         "dev/bench_balanced_acc": 0.75})
    assert tags == {"heldout.success_rate": repr(1 / 3), "bench.p_pos": "0.5", "heldout.episodes": "8.0",
                    "dev.bench_balanced_acc": "0.75"}
    assert float(tags["heldout.success_rate"]) == 1 / 3


def test_flatten():
    assert flatten({"a": {"b": 1, "c": [1, 2]}, "d": {}}) == {"a.b": "1", "a.c": "[1, 2]", "d": "{}"}


def test_experiment_opens_as_classic_ml(tmp_path, shared_uri):
    """The experiment carries `mlflow.experimentKind` = custom_model_development (runs table, not
    the GenAI landing page), both when created and when an older store's experiment lacks it."""
    tracker = Tracker(tmp_path / "kind", TrackingConfig(mlflow_uri=shared_uri, experiment="kind-new"))
    assert EXPERIMENT_KIND_TAG == "mlflow.experimentKind" and EXPERIMENT_KIND == "custom_model_development"
    assert tracker.client.get_experiment(tracker.experiment_id).tags[EXPERIMENT_KIND_TAG] == EXPERIMENT_KIND

    client = tracker.client  # a plain client of the same store
    old_id = client.create_experiment("kind-old")  # as written before the tag existed
    assert EXPERIMENT_KIND_TAG not in client.get_experiment(old_id).tags
    reopened = Tracker(tmp_path / "old", TrackingConfig(mlflow_uri=shared_uri, experiment="kind-old"))
    assert reopened.experiment_id == old_id
    assert client.get_experiment(old_id).tags[EXPERIMENT_KIND_TAG] == EXPERIMENT_KIND
    # MLflow 3.17's UI follows the URL's workflowType, not the tag: the link asks for the runs view
    assert experiment_ui_url("http://127.0.0.1:5000/", old_id) == (
        f"http://127.0.0.1:5000/#/experiments/{old_id}?workflowType=machine_learning")
