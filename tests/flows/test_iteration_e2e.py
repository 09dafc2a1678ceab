"""End to end on micro sizes: the training flow through Prefect (ephemeral test harness), MLflow,
DVC and the gates. Asserts real effects: parameters changed, metrics logged, outputs versioned, and a
corrupted batch stopped before any model is updated."""
from __future__ import annotations

import json

import pytest
import torch

from flows.rl_iteration import rl_iteration
from flows.train import train
from rla_core.config import DeepSpeedConfig
from rla_core.models.factory import load_pretrained
from rla_core.schemas import TrainingSample
from tasks.gates import GateFailed
from tasks.iteration import adapt, data, judge, rollout, select
from tasks.paths import RunPaths, run_config
from tasks.training import train_role
from tasks.storage import read_records, write_records
from tasks.tracking import read_metrics
from tasks.versioning import restore, tracked_hashes


@pytest.fixture(scope="module")
def trained_run(harness, micro, tmp_path_factory):
    out = tmp_path_factory.mktemp("runs")
    result = train(None, micro + [f"run.output_dir={out}", "run.name=micro"])
    return RunPaths.of(result["run_dir"])


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
    for key in ("train/success_rate", "judge/train_p_pos", "policy/loss", "time/rollout_s",
                "heldout/success_rate", "env/slots"):
        assert key in metrics, f"{key} missing from MLflow; have {sorted(metrics)[:20]}"
    assert 1 in metrics["train/success_rate"]


def test_dvc_tracks_and_restores_the_iteration_outputs(trained_run):
    paths = trained_run
    store = paths.stage(1, "adapt") / "store"
    hashes = tracked_hashes(paths.root, [store, paths.stage(1, "train_policy") / "model"])
    assert all(md5.endswith(".dir") for md5 in hashes.values())
    original = (store / "slots.jsonl").read_text()
    (store / "slots.jsonl").unlink()
    restore(paths.root, store)
    assert (store / "slots.jsonl").read_text() == original


def test_corrupted_batch_is_stopped_before_any_model_update(trained_run):
    run_dir, k = str(trained_run.root), 2
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
    assert trained_run.model_dir(k + 1, "policy") == trained_run.stage(1, "train_policy") / "model"
    assert json.loads((trained_run.stage(k, "validate") / "report.json").read_text())["policy_batch"]["success"] is False
    assert "gates/policy_batch_failed" in read_metrics(trained_run.root)


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
    assert summary["metrics"]["policy/optimizer_steps"] == expected["policy/optimizer_steps"] > 0
    for name in ("policy/loss", "policy/pg_loss", "policy/kl", "policy/clip_fraction", "policy/ratio_mean",
                 "policy/grad_norm"):
        assert summary["metrics"][name] == pytest.approx(expected[name], rel=1e-4, abs=1e-6), name
    torch_params = _params(paths.stage(1, "train_policy") / "model")
    assert torch.allclose(_params(out / "model"), torch_params, atol=1e-5)
