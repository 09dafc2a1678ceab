"""`rla reproduce` reports how much a re-run differs from its record, through the real code path: a record
published to a real DVC remote, the recorded checkpoint pulled back from it, the report written to the
scratch folder. Only the re-run of the stages is replaced (by one that writes perturbed outputs)."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch
from safetensors.torch import save_file

from rla_core.config import Config, config_to_yaml
from tasks.storage import reproduce as rp
from tasks.storage import rerun
from tasks.paths import RunPaths
from tasks.storage.files import mark_done
from tasks.storage.versioning import default_remote, init_run_repo, track

K = 1
WEIGHTS = {"layer.weight": torch.tensor([[1.0, -2.0], [0.5, 0.0]]), "layer.bias": torch.tensor([3.0, 4.0])}
EPISODES = [{"task": "t1", "reward": 1.0}, {"task": "t2", "reward": 2.0}]
METRICS = {"train_policy/loss": 0.5, "train_policy/kl": 0.1}


def _write_outputs(paths: RunPaths, weights: dict, episodes: list, metrics: dict) -> None:
    """Iteration K's train_policy (a checkpoint, DVC-tracked in a run) and rollout (a JSONL) folders."""
    model = paths.it(K).model("policy")
    model.mkdir(parents=True, exist_ok=True)
    save_file(weights, str(model / "model.safetensors"))
    (model / "config.json").write_text('{"hidden": 2}')
    mark_done(paths.stage(K, "train_policy"), {"metrics": metrics})
    rollout = paths.stage(K, "rollout")
    rollout.mkdir(parents=True, exist_ok=True)
    (rollout / "episodes.jsonl").write_text("".join(json.dumps(e) + "\n" for e in episodes))
    mark_done(rollout, {"metrics": {"rollout/episodes": len(episodes)}})


@pytest.fixture()
def recorded_run(tmp_path):
    """A run folder whose iteration K is recorded in its DVC remote, its checkpoint then deleted from the
    run folder (only the remote has it); the rollout file stays in the run folder (it is not tracked)."""
    cfg = Config()
    paths = RunPaths.of(tmp_path / "runs" / "mini")
    paths.root.mkdir(parents=True)
    paths.config.write_text(config_to_yaml(cfg))
    _write_outputs(paths, WEIGHTS, EPISODES, METRICS)
    init_run_repo(paths.root)
    track(paths.root, [paths.it(K).model("policy")])
    rp.publish_record(default_remote(paths.root), rp.build_record(paths, cfg, K, ["rollout", "train_policy"]))
    shutil.rmtree(paths.it(K).model("policy"))
    return paths


def _perturbed_rerun(scratch: Path, k: int) -> dict:
    """The re-run: layer.weight[1, 1] + 0.25 (max |w| = 2: 0.125), policy/loss 0.5 → 0.55 (0.05 / 0.55),
    the second episode's reward 2 → 2.5 (0.5 / 2.5 = 0.2)."""
    weights = {name: t.clone() for name, t in WEIGHTS.items()}
    weights["layer.weight"][1, 1] += 0.25
    episodes = [EPISODES[0], {**EPISODES[1], "reward": 2.5}]
    paths = RunPaths.of(scratch)
    _write_outputs(paths, weights, episodes, {**METRICS, "train_policy/loss": 0.55})
    return {name: rp.folder_outputs(paths.stage(k, name)) for name in ("rollout", "train_policy")}


def test_reproduce_reports_how_much_each_output_differs(recorded_run, tmp_path, monkeypatch):
    monkeypatch.setattr(rerun, "_rerun", _perturbed_rerun)
    result = rerun.reproduce(recorded_run.root, K, into=tmp_path / "scratch")
    report = result["report"]
    assert [(r["folder"], r["metric"], r["recorded"], r["reproduced"]) for r in report["metrics"]] == [
        ("train_policy", "train_policy/loss", 0.5, 0.55)]
    assert report["metrics"][0]["rel"] == pytest.approx(0.05 / 0.55)
    files = {r["file"]: r for r in report["files"]}
    assert set(files) == {"model/model.safetensors", "episodes.jsonl"}
    model = files["model/model.safetensors"]  # its recorded bytes came from the DVC remote
    assert model["kind"] == "tensors" and model["where"] == "layer.weight"
    assert model["tensors"] == {"layer.weight": pytest.approx(0.125)} and model["equal_tensors"] == 1
    episodes = files["episodes.jsonl"]  # from the run folder, whose file still has the recorded sha256
    assert (episodes["rel"], episodes["where"], episodes["lines_differ"]) == (pytest.approx(0.2), "line 2: reward", 1)
    summary = report["summary"]
    assert summary["max_rel"] == pytest.approx(0.2) and summary["where"] == "rollout/episodes.jsonl [line 2: reward]"
    assert summary["text"].startswith("3 differ: largest relative difference 0.2 at rollout/episodes.jsonl")
    written = json.loads((tmp_path / "scratch" / rp.REPORT).read_text())
    assert written["report"]["summary"] == summary and len(written["diffs"]) == 3
    assert not list((tmp_path / "scratch").glob(".recorded-*"))  # the pulled recorded files are gone
    lines = rp.report_lines(report)
    assert any("layer.weight" in line and "0.125" in line for line in lines)
    assert lines[-1] == f"summary: {summary['text']}"


def test_identical_rerun_says_identical(recorded_run, tmp_path, monkeypatch):
    def same(scratch: Path, k: int) -> dict:
        paths = RunPaths.of(scratch)
        _write_outputs(paths, WEIGHTS, EPISODES, METRICS)
        return {name: rp.folder_outputs(paths.stage(k, name)) for name in ("rollout", "train_policy")}

    monkeypatch.setattr(rerun, "_rerun", same)
    result = rerun.reproduce(recorded_run.root, K, into=tmp_path / "scratch")
    assert result["diffs"] == [] and result["report"]["summary"]["text"] == "identical"
    assert rp.report_lines(result["report"]) == ["summary: identical"]


def test_a_file_without_recorded_bytes_is_named_without_a_magnitude(tmp_path):
    assert rp.file_detail(None, tmp_path / "x.bin")["rel"] is None
    assert "did not write" in rp.file_detail(tmp_path / "x.bin", None)["note"]


def test_a_checkpoint_missing_from_the_remote_is_reported_without_a_magnitude(recorded_run, tmp_path, monkeypatch):
    shutil.rmtree(Path(default_remote(recorded_run.root)) / "files")  # DVC's objects; the record stays
    monkeypatch.setattr(rerun, "_rerun", _perturbed_rerun)
    report = rerun.reproduce(recorded_run.root, K, into=tmp_path / "scratch")["report"]
    model = next(r for r in report["files"] if r["file"] == "model/model.safetensors")
    assert model["rel"] is None and "DVC remote" in model["note"]
    assert report["summary"]["max_rel"] == pytest.approx(0.2) and report["summary"]["unmeasured"] == 1
