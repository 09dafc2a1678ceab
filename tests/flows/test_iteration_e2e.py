"""End to end on micro sizes: the training flow through Prefect (ephemeral test harness), MLflow,
DVC and the gates. Asserts real effects: parameters changed, metrics logged, outputs versioned, the
lineage of every registered version (the warm-start's of iteration 0 too), `best` chosen on the dev
scores, `rla eval` reproducing the logged evaluation, and a corrupted batch stopped before any model is
updated.

The dev split of the micro run is its own held-out tasks (already reserved, so the run trains on what it
trained on before the dev split existed) and 40 steps of the shipped dev judge benchmark."""
from __future__ import annotations

import hashlib
import json
import shutil
import subprocess

import pytest
import torch

from flows.rl_iteration import rl_iteration
from flows.train import evaluate_run, train
from rla_core.config import PROJECT_ROOT, DeepSpeedConfig, load_config
from rla_core.envs.base import get_environment
from rla_core.models.factory import load_pretrained
from rla_core.schemas import Task, TrainingSample, Trajectory
from tasks.checks.gates import GateFailed
from tasks.stages.iteration import adapt, data, judge, rollout, select
from tasks.paths import RunPaths, run_config
from tasks.stages.training import train_role
from tasks.storage.files import read_records, write_records
from tasks.storage import versioning
from tasks.stages.commit import commit
from tasks.paths import ROLES
from tasks.storage.reproduce import version_start
from tasks.settings.episodic import heldout_tasks
from tasks.storage.files import done_summary, read_json
from tasks.tracking.model_registry import best_tags, model_name
from tasks.tracking.tracker import read_metrics
from tasks.tracking.run_log import log_evaluation, tracker_for
from tasks.storage.versioning import config_hash, restore, tracked_hashes

TWO_EVALUATED = ["run.name=micro", "run.iterations=2", "run.eval_every=1"]  # iteration 1 non-final, 2 final
DEV_BENCHMARK_STEPS = 40


def _dev_overrides(out) -> list[str]:
    return [f"eval.dev_file={out / 'dev.jsonl'}", f"eval.dev_judge_benchmark={out / 'judge_benchmark_dev.jsonl'}"]


def _write_dev_split(micro, out) -> None:
    """The micro run's dev split: its generated held-out tasks and the first steps of the shipped dev benchmark."""
    cfg = load_config(None, micro + TWO_EVALUATED)
    write_records(out / "dev.jsonl", heldout_tasks(cfg, get_environment(cfg.environment.name)))
    lines = (PROJECT_ROOT / "data" / "household" / "judge_benchmark_dev.jsonl").read_text().splitlines()
    (out / "judge_benchmark_dev.jsonl").write_text("\n".join(lines[:DEV_BENCHMARK_STEPS]) + "\n")


@pytest.fixture(scope="module")
def trained_run(harness, micro, tmp_path_factory):
    out = tmp_path_factory.mktemp("runs")
    _write_dev_split(micro, out)
    result = train(None, micro + [f"run.output_dir={out}"] + TWO_EVALUATED + _dev_overrides(out))
    return RunPaths.of(result["run_dir"])


def _overrides(micro, paths):
    return micro + [f"run.output_dir={paths.root.parent}"] + TWO_EVALUATED + _dev_overrides(paths.root.parent)


def _versions(paths, role):
    """{iteration: ModelVersion} of the run's registered `role` versions (one per iteration, or it fails)."""
    tracker = tracker_for(str(paths.root))
    found = tracker.client.search_model_versions(f"name = '{model_name(role)}'")
    by_iteration = {int(v.tags["iteration"]): v for v in found}
    assert len(by_iteration) == len(found), f"duplicate versions: {[(v.version, v.tags) for v in found]}"
    return by_iteration


def _params(path):
    model, _ = load_pretrained(path)
    return torch.cat([p.detach().flatten() for p in model.parameters()])


def test_iteration_updates_both_models(trained_run):
    paths = trained_run
    assert paths.is_complete(1)
    for role in ("policy", "judge"):
        summary = json.loads((paths.stage(1, f"train_{role}") / "_DONE").read_text())
        assert summary["trained"], f"{role} was not trained: {summary}"
        before, after = _params(paths.bootstrap / role), _params(paths.stage(1, f"train_{role}") / "model")
        assert not torch.equal(before, after)


def test_mlflow_run_holds_the_iteration_metrics(trained_run):
    metrics = read_metrics(trained_run.root)
    for key in ("rollout/success_rate", "judge/p_pos", "train_policy/loss", "time/rollout_s",
                "heldout/success_rate", "adapt/slots", "dev/success_rate", "dev/bench_balanced_acc"):
        assert key in metrics, f"{key} missing from MLflow; have {sorted(metrics)[:20]}"
    assert 1 in metrics["rollout/success_rate"]
    tracker = tracker_for(str(trained_run.root))
    for k in (1, 2):  # each stage metric once per iteration (the gates' were logged twice before)
        for key in ("validate/reserved_content_failed", "validate/policy_batch_failed", "rollout/success_rate"):
            history = tracker.client.get_metric_history(tracker.iteration_run(k), key)
            assert [m.step for m in history] == [k], (k, key, history)


def test_training_run_records_its_float_path(trained_run):
    tracker = tracker_for(str(trained_run.root))
    tags = tracker.client.get_run(tracker.run_id).data.tags
    assert tags["cpu.mkl_cbwr"] == "AVX2" and tags["cpu.model"] and tags["cpu.aten_capability"]
    assert tags["cpu.torch_threads"] == str(torch.get_num_threads()) and tags["torch.version"] == torch.__version__


def test_the_parent_run_says_at_a_glance_whether_training_helped(trained_run):
    """Description (before/after table from the run's own evaluation files), overview.png, and short
    final metrics equal to the numbers of the baseline and the last evaluation."""
    paths = trained_run
    tracker = tracker_for(str(paths.root))
    run = tracker.client.get_run(tracker.run_id)
    before = json.loads((paths.baseline / "metrics.json").read_text())
    after = json.loads(paths.it(2).eval_metrics.read_text())
    note = run.data.tags["mlflow.note.content"]
    assert "held-out success (95 % interval)" in note and f"{before['heldout/success_rate']:.3f} (" in note
    assert f"{after['heldout/success_rate']:.3f} (" in note, note
    gain = after["heldout/success_rate"] - before["heldout/success_rate"]
    assert f"{gain * 100:+.1f} points" in note
    # the micro run scores the judge on the dev benchmark only: that row, and no held-out judge row
    assert f"| judge dev benchmark balanced accuracy | {before['dev/bench_balanced_acc']:.3f} | " \
           f"{after['dev/bench_balanced_acc']:.3f} |" in note, note
    assert "bench/balanced_acc" not in after and "judge benchmark `" not in note
    final = run.data.metrics
    assert final["heldout_before"] == pytest.approx(before["heldout/success_rate"])
    assert final["heldout_after"] == pytest.approx(after["heldout/success_rate"])
    assert final["heldout_gain"] == pytest.approx(gain)
    assert "judge_after" not in final and final["dev_after"] == pytest.approx(after["dev/success_rate"])
    episodes = sum(done_summary(paths.stage(k, "data"))["metrics"]["data/compute/episodes"] for k in (1, 2))
    assert final["episodes"] == episodes > 0 and final["time/minutes"] > 0
    assert "overview.png" in {a.path for a in tracker.client.list_artifacts(tracker.run_id)}


def test_every_evaluation_scores_the_dev_split(trained_run):
    """The warm-start's and each in-loop evaluation hold dev/* beside heldout/*, logged at their step."""
    paths = trained_run
    logged = read_metrics(paths.root)
    for k, file in ((0, paths.baseline / "metrics.json"), (1, paths.it(1).eval_metrics), (2, paths.it(2).eval_metrics)):
        metrics = read_json(file)
        assert metrics["dev/episodes"] == 4 and 0.0 <= metrics["dev/success_rate"] <= 1.0  # 4 tasks, 1 episode
        assert metrics["dev/bench_steps"] == DEV_BENCHMARK_STEPS and 0.0 <= metrics["dev/bench_balanced_acc"] <= 1.0
        assert "heldout/success_rate" in metrics and not any(key.startswith("dev/judge_") for key in metrics)
        assert logged["dev/success_rate"][k] == metrics["dev/success_rate"]
        assert logged["dev/bench_balanced_acc"][k] == metrics["dev/bench_balanced_acc"]
        assert (file.parent / "dev_trajectories.jsonl").is_file() and (file.parent / "dev_benchmark_verdicts.json").is_file()
    assert read_records(paths.dev, Task) == read_records(paths.heldout, Task)  # the run's copy of eval.dev_file


def test_evaluating_on_the_way_changes_no_trained_weight(trained_run, micro, tmp_path):
    """run.eval_every is among the keys in which an ablation's seeds may differ (rla_core.ablation.UNMEASURED_KEYS):
    the same run from the same warm start, evaluated only at its end, rolls out, labels and trains exactly the
    same as the one evaluated after iteration 1 too."""
    from flows.ablation import share_warm_start

    (tmp_path / "micro").mkdir()
    share_warm_start(trained_run.root, tmp_path / "micro")
    again = RunPaths.of(train(None, micro + [f"run.output_dir={tmp_path}", "run.name=micro", "run.iterations=2",
                                             "run.eval_every=0"] + _dev_overrides(trained_run.root.parent))["run_dir"])
    assert trained_run.it(1).eval_metrics.is_file() and not again.it(1).eval_metrics.is_file()
    for k in (1, 2):
        before, after = trained_run.it(k), again.it(k)
        assert (after.root / "rollout" / "trajectories.jsonl").read_bytes() == \
            (before.root / "rollout" / "trajectories.jsonl").read_bytes()
        for role in ("policy", "judge"):
            assert after.batch(role).read_bytes() == before.batch(role).read_bytes(), (k, role)
            weights = sorted(p.relative_to(before.model(role)) for p in before.model(role).rglob("*.safetensors"))
            assert weights, before.model(role)
            for rel in weights:
                assert (after.model(role) / rel).read_bytes() == (before.model(role) / rel).read_bytes(), (k, role)


def test_iteration_wall_time_and_orchestration_share_are_logged(trained_run):
    from tasks.pipeline import ITERATION

    bookkeeping = {s.name for s in ITERATION if s.bookkeeping}
    assert bookkeeping == {"validate", "commit"}

    metrics = read_metrics(trained_run.root)
    for k in (1, 2):
        wall, overhead = metrics["time/iteration_s"][k], metrics["time/orchestration_s"][k]
        stages = {s.name: json.loads((trained_run.stage(k, s.name) / "_DONE").read_text())["seconds"]
                  for s in ITERATION}
        compute = sum(v for name, v in stages.items() if name not in bookkeeping)
        assert wall > sum(stages.values())  # the flow's wall time holds every stage body and more
        assert overhead == pytest.approx(wall - compute)
        assert metrics["time/orchestration_share"][k] == pytest.approx(overhead / wall)
        for s in ITERATION:  # each stage's own peak memory, in its _DONE and in MLflow
            peak = json.loads((trained_run.stage(k, s.name) / "_DONE").read_text())["peak_rss_gib"]
            assert 0.05 < peak < 24 and metrics[f"memory/{s.name}_peak_rss_gib"][k] == pytest.approx(peak)


def test_dvc_tracks_and_restores_the_iteration_outputs(trained_run):
    paths = trained_run
    store = paths.stage(1, "adapt") / "store"
    hashes = tracked_hashes(paths.root, [store, paths.stage(1, "train_policy") / "model"])
    assert all(md5.endswith(".dir") for md5 in hashes.values())
    original = (store / "slots.jsonl").read_text()
    (store / "slots.jsonl").unlink()
    restore(paths.root, store)
    assert (store / "slots.jsonl").read_text() == original


def test_registered_versions_carry_their_lineage(trained_run):
    paths = trained_run
    tracker = tracker_for(str(paths.root))
    head = subprocess.run(["git", "-C", str(versioning._CHECKOUT), "rev-parse", "HEAD"], capture_output=True, text=True)
    commit_expected = head.stdout.strip() if head.returncode == 0 else "unknown"
    config = config_hash(run_config(paths.root))
    for role in ROLES:
        versions = _versions(paths, role)
        assert sorted(versions) == [0, 1, 2]  # 0: the warm-start (test_warm_start_is_version_0)
        for k, version in versions.items():
            if k == 0:
                continue
            it, tags = paths.it(k), version.tags
            data_version = it.complete.read_text().strip()
            assert tags["run"] == "micro" and tags["iteration"] == str(k) and tags["data_version"] == data_version
            assert tags["git_commit"] == commit_expected and tags["git_dirty"] in ("true", "false", "unknown")
            assert tags["config_hash"] == config
            assert tags["dvc.store"] == tracked_hashes(paths.root, [it.store])[paths.rel(it.store)]
            assert tags["dvc.batch"] == hashlib.md5(it.batch(role).read_bytes()).hexdigest()
            assert tags["dvc.model"] == tracked_hashes(paths.root, [it.model(role)])[paths.rel(it.model(role))]
            assert tags["parent_version"] == str(versions[k - 1].version)  # k = 1: the warm-start's version
            logged = read_json(it.eval_metrics)  # eval_every=1: both iterations evaluated in the loop
            assert float(tags["heldout.success_rate"]) == logged["heldout/success_rate"]
            assert float(tags["heldout.invalid_rate"]) == logged["heldout/invalid_rate"]
            assert float(tags["dev.success_rate"]) == logged["dev/success_rate"]
            assert float(tags["dev.bench_balanced_acc"]) == logged["dev/bench_balanced_acc"]
            rank = best_tags(role)[0]  # the description: lineage first, in one line
            assert version.description == (
                f"Lineage: iteration {k} · commit {tags['git_commit'][:12]}"
                + (" (uncommitted changes)" if tags["git_dirty"] == "true" else "")
                + f" · config {config[:12]} · data {data_version[:12]} · parent {tags['parent_version']}"
                + f" · {rank} {float(tags[rank]):.3f}")
            assert version.run_id == tracker.iteration_run(k)
            run_tags = tracker.client.get_run(version.run_id).data.tags
            assert {key: run_tags[key] for key in ("data_version", "git_commit", "git_dirty", "config_hash")} == {
                "data_version": data_version, "git_commit": tags["git_commit"], "git_dirty": tags["git_dirty"],
                "config_hash": config}
        # `best`: the highest dev score of the role (the policy's success, the judge's benchmark balanced
        # accuracy), the warm-start included; ties go to the earlier iteration. Held-out is not read.
        aliases = {a: str(v) for a, v in tracker.client.get_registered_model(model_name(role)).aliases.items()}
        rank = {"policy": "dev.success_rate", "judge": "dev.bench_balanced_acc"}[role]
        assert best_tags(role)[0] == rank
        best = max(versions, key=lambda k: (float(versions[k].tags[rank]), -k))
        assert aliases == {"newest": str(versions[2].version), "best": str(versions[best].version)}


def test_warm_start_is_version_0(trained_run):
    """The warm-start of each role is registered as iteration 0 (artifacts on the training run), with the
    start's data version and lineage and the baseline's held-out and dev metrics as tags; `rla eval` of
    iteration 0 tags the same version."""
    paths = trained_run
    tracker = tracker_for(str(paths.root))
    baseline = read_json(paths.baseline / "metrics.json")
    start_version = done_summary(version_start.out_dir(paths))["data_version"]
    model_md5 = tracked_hashes(paths.root, [paths.bootstrap])[paths.rel(paths.bootstrap)]
    for role in ROLES:
        version = _versions(paths, role)[0]
        tags = version.tags
        assert tags["run"] == "micro" and tags["iteration"] == "0" and tags["data_version"] == start_version != ""
        assert tags["parent_version"] == "init" and tags["config_hash"] == config_hash(run_config(paths.root))
        assert tags["dvc.model"] == model_md5 and version.run_id == tracker.run_id
        assert float(tags["dev.success_rate"]) == baseline["dev/success_rate"]
        assert float(tags["dev.bench_balanced_acc"]) == baseline["dev/bench_balanced_acc"]
        assert float(tags["heldout.success_rate"]) == baseline["heldout/success_rate"]
        files = {a.path.rsplit("/", 1)[-1] for a in tracker.client.list_artifacts(
            tracker.run_id, f"checkpoints/{model_name(role)}")}
        assert "config.json" in files and "model.safetensors" in files
    tagged = log_evaluation(str(paths.root), 0, baseline)
    assert tagged == {role: str(_versions(paths, role)[0].version) for role in ROLES}


def test_resumed_commit_registers_no_second_version(trained_run):
    paths, name = trained_run, model_name("policy")
    tracker = tracker_for(str(paths.root))
    before = {role: {k: v.version for k, v in _versions(paths, role).items()} for role in ROLES}
    aliases = tracker.client.get_registered_model(name).aliases
    shutil.rmtree(paths.stage(2, "commit"))  # as if interrupted after registering, before COMPLETE
    summary = commit.run_here(str(paths.root), 2)
    assert {role: int(info["version"]) for role, info in summary["registered"].items()} == {
        role: before[role][2] for role in ROLES}
    assert {role: {k: v.version for k, v in _versions(paths, role).items()} for role in ROLES} == before
    assert tracker.client.get_registered_model(name).aliases == aliases


def test_rla_eval_reproduces_the_logged_evaluation_and_logs_it(trained_run, micro):
    paths = trained_run
    tracker = tracker_for(str(paths.root))
    policy_v1 = _versions(paths, "policy")[1]
    for key in [key for key in policy_v1.tags if key.startswith(("heldout.", "dev."))]:  # as if evaluated later
        tracker.client.delete_model_version_tag(model_name("policy"), str(policy_v1.version), key)
    for k in (1, 2):  # 1: an in-loop evaluation without the final passes; 2: the last one, with them
        logged = read_json(paths.it(k).eval_metrics)
        assert evaluate_run(None, _overrides(micro, paths), iteration=k) == logged
        shutil.rmtree(paths.root / "eval" / f"iter_{k:04d}")  # recomputed, not read back
        assert evaluate_run(None, _overrides(micro, paths), iteration=k) == logged
        assert evaluate_run(None, _overrides(micro, paths), iteration=k) == logged  # stored this time
        for run_id in (tracker.iteration_run(k), tracker.run_id):
            history = tracker.client.get_metric_history(run_id, "eval/heldout/success_rate")
            assert [(m.step, m.value) for m in history if m.step == k] == [(k, logged["heldout/success_rate"])]
    assert "heldout/judge_p_pos" not in read_json(paths.it(1).eval_metrics)
    assert "heldout/judge_p_pos" in read_json(paths.it(2).eval_metrics)
    tags = tracker.client.get_model_version(model_name("policy"), str(policy_v1.version)).tags
    assert float(tags["heldout.success_rate"]) == read_json(paths.it(1).eval_metrics)["heldout/success_rate"]
    assert float(tags["dev.success_rate"]) == read_json(paths.it(1).eval_metrics)["dev/success_rate"]


def _tree_hashes(root, rels):
    import hashlib

    out = {}
    for rel in rels:
        path = root / rel
        files = [path] if path.is_file() else sorted(p for p in path.rglob("*") if p.is_file())
        for f in files:
            out[str(f.relative_to(root))] = hashlib.sha256(f.read_bytes()).hexdigest()
    return out


def test_reproduce_iteration_2_from_the_remote_alone(trained_run, tmp_path):
    """The record of iteration 2 and the DVC remote are enough: its inputs are restored into a scratch
    folder, its stages re-run there, and every output file and metric equals the recorded one. A record
    altered by one metric is reported as a difference (the comparison can fail)."""
    import json
    import shutil

    from tasks.storage.reproduce import compare, read_record, record_name
    from tasks.storage.rerun import reproduce
    from tasks.storage.versioning import default_remote

    remote = default_remote(trained_run.root)
    result = reproduce(trained_run.root, 2, remote, tmp_path / "scratch")
    assert result["diffs"] == [] and result["files"] >= 15 and result["metrics"] >= 30, result["diffs"]
    record = read_record(remote, 2)
    assert set(record["outputs"]) == {"select", "rollout", "judge", "adapt", "data", "validate", "train_policy",
                                      "train_judge", "evaluate"}
    # the original run folder was only read
    assert not (trained_run.root.parent / f"{trained_run.root.name}.reproduce-iter_0002").exists()
    altered = json.loads(json.dumps(record["outputs"]))
    key = next(iter(altered["rollout"]["metrics"]))
    altered["rollout"]["metrics"][key] += 1.0
    got = {name: {"files": v["files"], "metrics": v["metrics"]} for name, v in record["outputs"].items()}
    assert [d[:2] for d in compare(altered, got)] == [("rollout", key)]
    shutil.rmtree(tmp_path / "scratch")
    assert record_name(2) == "rla-records/iter_0002.json"


def test_restore_checks_out_an_iteration_into_an_empty_folder(trained_run, tmp_path):
    from tasks.storage.reproduce import read_record, restore_from_record
    from tasks.storage.versioning import default_remote

    remote = default_remote(trained_run.root)
    target = tmp_path / "restored"
    pulled = restore_from_record(read_record(remote, 2), target, remote)
    assert "iterations/iter_0002/train_policy/model" in pulled and "models/bootstrap" in pulled
    assert _tree_hashes(target, pulled) == _tree_hashes(trained_run.root, pulled)


def test_corrupted_batch_is_stopped_before_any_model_update(trained_run):
    run_dir, k = str(trained_run.root), 3
    for stage in (select, rollout, judge, adapt, data):
        stage.run_here(run_dir, k)
    batch = trained_run.stage(k, "data") / "policy.jsonl"
    samples = read_records(batch, TrainingSample) or [
        TrainingSample(prompt_ids=[1, 2], response_ids=[3], advantage=1.0, task_id="x", sample_index=0, step_index=0)]
    samples[0] = samples[0].model_copy(update={"advantage": float("inf")})
    write_records(batch, samples)
    with pytest.raises(GateFailed, match="policy_batch"):
        rl_iteration(run_dir, k)
    assert not (trained_run.stage(k, "train_policy")).exists()
    assert not (trained_run.stage(k, "train_judge")).exists()
    assert trained_run.model_dir(k + 1, "policy") == trained_run.stage(k - 1, "train_policy") / "model"
    assert json.loads((trained_run.stage(k, "validate") / "report.json").read_text())["policy_batch"]["success"] is False
    assert "validate/policy_batch_failed" in read_metrics(trained_run.root)


def test_reserved_content_is_stopped_before_any_model_update(trained_run):
    """A rolled-out task whose content is a held-out task's (under a training id) fails the gate by hash."""
    run_dir, k = str(trained_run.root), 3
    for stage in (select, rollout, judge, adapt, data):
        stage.run_here(run_dir, k)
    heldout = read_records(trained_run.heldout, Task)[0]
    rolled = {t.task_id for t in read_records(trained_run.it(k).trajectories, Trajectory)}
    tasks = read_records(trained_run.it(k).tasks, Task)
    index = next(i for i, t in enumerate(tasks) if t.task_id in rolled)
    tasks[index] = tasks[index].model_copy(update={"spec": heldout.spec})  # same id, held-out content
    write_records(trained_run.it(k).tasks, tasks)
    with pytest.raises(GateFailed, match="reserved_content"):
        rl_iteration(run_dir, k)
    assert not (trained_run.stage(k, "train_policy")).exists()
    report = json.loads((trained_run.stage(k, "validate") / "report.json").read_text())["reserved_content"]
    assert report["success"] is False and report["rows"] > 0


def _free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def test_two_rank_deepspeed_stage_matches_the_torch_stage(trained_run):
    """The pipeline's policy update of iteration 1 again, as ZeRO-3 on 2 ranks under torchrun."""
    paths = trained_run
    out = paths.root / "deepspeed_check"  # model dirs are recorded relative to the run folder
    cfg = run_config(paths.root)
    ds = DeepSpeedConfig(zero_stage=3, launcher="torchrun", num_procs=2, master_port=_free_port())
    ds_cfg = cfg.model_copy(update={"train": cfg.train.model_copy(update={"backend": "deepspeed", "deepspeed": ds})})
    summary = train_role(paths, ds_cfg, 1, out, "policy", cfg.train.lr, enabled=True)
    expected = json.loads((paths.stage(1, "train_policy") / "_DONE").read_text())["metrics"]
    # train_role returns the body's metrics; the stage stored them under `train_policy/`
    assert summary["metrics"]["optimizer_steps"] == expected["train_policy/optimizer_steps"] > 0
    for name in ("loss", "pg_loss", "kl", "clip_fraction", "ratio_mean", "grad_norm"):
        assert summary["metrics"][name] == pytest.approx(expected[f"train_policy/{name}"], rel=1e-4, abs=1e-6), name
    torch_params = _params(paths.stage(1, "train_policy") / "model")
    assert torch.allclose(_params(out / "model"), torch_params, atol=1e-5)
