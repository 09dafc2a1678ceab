"""The "deepspeed" trainer: its JSON config, parity with the torch backend (ZeRO 0/2/3, one and two
ranks), and exact resume from its checkpoint. CPU + gloo; the first engine compiles a comm op once
(cached under TORCH_EXTENSIONS_DIR)."""
from __future__ import annotations

import socket
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from rla_core.config import DeepSpeedConfig, ModelSpec, TrainConfig
from rla_core.models.factory import build_model, load_pretrained, save_pretrained
from rla_core.models.tokenizer import train_tokenizer
from rla_core.schemas import TrainingSample
from rla_core.training import get_trainer
from rla_core.training.deepspeed_config import deepspeed_config

pytest.importorskip("deepspeed")

HERE = Path(__file__).parent
REL = 1e-4  # the parity tolerance (relative, per optimizer step)
STEPS = 5


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def ds_cfg(stage: int = 2, **ds_overrides) -> TrainConfig:
    """5 optimizer steps over 19 samples: mini-batches 4,4,4,4,3 of micro-batches ≤ 2; clipping active."""
    ds = DeepSpeedConfig(zero_stage=stage, master_port=_PORT, **ds_overrides)
    return TrainConfig(minibatch_size=4, micro_batch_size=2, max_optimizer_steps=STEPS, grad_clip=0.5,
                       weight_decay=0.01, deepspeed=ds)


_PORT = free_port()  # one in-process rank per pytest process: one port for all its engines


# ---- the JSON builder (pure) ----------------------------------------------------------------

def test_config_maps_the_torch_update():
    config = deepspeed_config(ds_cfg(stage=2), lr=3e-4, world_size=4)
    assert config["zero_optimization"]["stage"] == 2
    assert config["gradient_accumulation_steps"] == 1 and config["managed_gradient_accumulation"] is False
    assert config["train_micro_batch_size_per_gpu"] == 2 and config["train_batch_size"] == 8
    assert config["gradient_clipping"] == 0.5
    params = config["optimizer"]["params"]
    assert config["optimizer"]["type"] == "AdamW" and params["torch_adam"] is True
    adamw = (params["lr"], params["betas"], params["eps"], params["weight_decay"])
    assert adamw == (3e-4, [0.9, 0.999], 1e-8, 0.01)
    assert config["bf16"] == {"enabled": False} and "scheduler" not in config


@pytest.mark.parametrize("stage", [0, 1, 2, 3])
def test_config_stages(stage):
    zero = deepspeed_config(ds_cfg(stage=stage), lr=1e-3)["zero_optimization"]
    assert zero["stage"] == stage
    assert zero["overlap_comm"] is (stage >= 2)  # unmanaged accumulation allows it only there
    assert ("stage3_gather_16bit_weights_on_model_save" in zero) is (stage == 3)
    assert "offload_optimizer" not in zero and "offload_param" not in zero


def test_config_offload_bf16_and_warmup():
    config = deepspeed_config(ds_cfg(stage=3, offload_optimizer=True, offload_params=True, bf16=True,
                                     warmup_steps=10), lr=2e-4)
    zero = config["zero_optimization"]
    assert zero["offload_optimizer"]["device"] == "cpu" and zero["offload_param"]["device"] == "cpu"
    assert config["optimizer"]["params"]["torch_adam"] is False  # ZeRO-Offload needs DeepSpeed's CPU Adam
    assert config["bf16"] == {"enabled": True}
    assert config["scheduler"] == {"type": "WarmupLR", "params": {
        "warmup_min_lr": 0.0, "warmup_max_lr": 2e-4, "warmup_num_steps": 10, "warmup_type": "linear"}}


@pytest.mark.parametrize("fields, key", [
    ({"zero_stage": 2, "offload_params": True}, "offload_params"),
    ({"zero_stage": 0, "offload_optimizer": True}, "offload_optimizer"),
    ({"zero_stage": 4}, "zero_stage"),
])
def test_config_rejects_bad_combinations(fields, key):
    with pytest.raises(ValueError, match=key):  # the typed config refuses them at load...
        DeepSpeedConfig(**fields)
    ds = DeepSpeedConfig.model_construct(**{**DeepSpeedConfig().model_dump(), **fields})
    with pytest.raises(ValueError, match=key):  # ...and so does the builder, for configs built around it
        deepspeed_config(TrainConfig.model_construct(**{**TrainConfig().__dict__, "deepspeed": ds}), lr=1e-3)


def test_config_rejects_bad_world_size_and_lr():
    with pytest.raises(ValueError, match="world_size"):
        deepspeed_config(ds_cfg(), lr=1e-3, world_size=0)
    with pytest.raises(ValueError, match="learning rate"):
        deepspeed_config(ds_cfg(), lr=0.0)


def test_launch_command_lines():
    from rla_core.training.ds_launch import deepspeed_command, torchrun_command

    command = torchrun_command("pkg.mod:fn", Path("p.json"), num_procs=2, master_port=29611)
    assert command[1:3] == ["-m", "torch.distributed.run"] and "--nproc_per_node=2" in command
    assert "--master_port=29611" in command
    assert command[-4:] == ["-m", "rla_core.training.ds_launch", "pkg.mod:fn", "p.json"]
    ds = DeepSpeedConfig(launcher="deepspeed", num_procs=8, num_nodes=2, hostfile="hosts", master_port=29612)
    command = deepspeed_command("pkg.mod:fn", Path("p.json"), ds)
    assert command[:3] == ["deepspeed", "--hostfile", "hosts"]
    assert command[3:9] == ["--num_nodes", "2", "--num_gpus", "8", "--master_port", "29612"]
    assert command[-4:] == ["--module", "rla_core.training.ds_launch", "pkg.mod:fn", "p.json"]


def test_importing_the_backend_does_not_import_deepspeed():
    code = ("import sys, rla_core, rla_core.training.deepspeed_backend, rla_core.training.ds_launch; "
            "assert 'deepspeed' not in sys.modules, 'deepspeed imported eagerly'")
    subprocess.run([sys.executable, "-c", code], check=True, cwd=HERE.parents[2])


# ---- parity with the torch backend ------------------------------------------------------------

@pytest.fixture(scope="module")
def tokenizer():
    return train_tokenizer([f"take apple {i} from shelf \\boxed{{{i}}}" for i in range(30)], vocab_size=300)


def tiny_model(tokenizer):
    spec = ModelSpec(hidden_size=32, num_layers=2, num_heads=2, intermediate_size=64, max_positions=24)
    return build_model(spec, tokenizer, seed=0)


def samples(count: int = 19) -> list[TrainingSample]:
    """Varied lengths (different padding per micro-batch) and advantages of both signs."""
    out = []
    for index in range(count):
        prompt = [10 + (index * 7 + k) % 200 for k in range(2 + index % 5)]
        response = [40 + (index * 3 + k) % 200 for k in range(1 + index % 4)]
        advantage = (-1.0) ** index * (0.5 + index / 10)
        out.append(TrainingSample(prompt_ids=prompt, response_ids=response, advantage=advantage,
                                  task_id=f"t{index}", sample_index=index, step_index=0))
    return out


def step_metrics(trainer, items, seed: int) -> list[dict[str, float]]:
    """TorchTrainer.train's order (mini-batches, score once, steps), one metrics dict per step."""
    trainer.model.eval()
    batches = trainer.minibatches(items, seed)
    scored = iter(trainer.score([s for batch in batches for s in batch]))
    return [trainer.optimizer_step([next(scored) for _ in batch]) for batch in batches]


@pytest.fixture(scope="module")
def torch_reference(tokenizer):
    """Per-step losses and grad norms of the torch backend, 5 steps (lr 1e-2 so the weights move)."""
    steps = step_metrics(get_trainer("torch")(tiny_model(tokenizer), ds_cfg(), 1e-2), samples(), seed=0)
    return [step["loss"] for step in steps], [step["grad_norm"] for step in steps]


def assert_close(actual: list[float], expected: list[float]) -> None:
    assert len(actual) == len(expected) == STEPS
    for got, want in zip(actual, expected):
        assert got == pytest.approx(want, rel=REL, abs=1e-7), (actual, expected)


@pytest.mark.parametrize("stage", [0, 2, 3])
def test_matches_torch_backend_one_rank(tokenizer, torch_reference, stage):
    model = tiny_model(tokenizer)
    before = torch.cat([p.detach().flatten().clone() for p in model.parameters()])
    trainer = get_trainer("deepspeed")(model, ds_cfg(stage), 1e-2)
    steps = step_metrics(trainer, samples(), seed=0)
    assert_close([step["loss"] for step in steps], torch_reference[0])
    assert_close([step["grad_norm"] for step in steps], torch_reference[1])
    if stage < 3:  # under ZeRO-3 the module holds partitions; the checkpoint test reads full weights
        after = torch.cat([p.detach().flatten() for p in trainer.model.parameters()])
        assert not torch.equal(before, after)


def test_train_reports_the_torch_metrics(tokenizer):
    cfg = ds_cfg(0)
    ours = get_trainer("deepspeed")(tiny_model(tokenizer), cfg, 1e-2).train(samples(), None, rng_seed=3)
    theirs = get_trainer("torch")(tiny_model(tokenizer), cfg, 1e-2).train(samples(), None, rng_seed=3)
    assert set(ours) == set(theirs) and ours["optimizer_steps"] == STEPS
    for name in ("loss", "pg_loss", "kl", "clip_fraction", "grad_norm", "samples"):
        assert ours[name] == pytest.approx(theirs[name], rel=REL, abs=1e-7), name


def test_two_ranks_zero3_under_torchrun_match_torch_backend(tokenizer, torch_reference, tmp_path):
    """Each rank takes the strided half of every global mini-batch (19 samples in near-equal batches
    4, 4, 3, 4, 4: 4 → 2+2, 3 → 2+1); with micro-batches of 1, rank 1 runs a zero-weight dummy
    micro-batch in the third step (and a dummy
    scoring forward). The averaged gradient is the global mean: the torch backend's numbers."""
    from rla_core.training.ds_launch import launch

    save_pretrained(tiny_model(tokenizer), tokenizer, tmp_path / "model")
    cfg = ds_cfg(3).model_copy(update={"micro_batch_size": 1})
    payload = {"model_dir": str(tmp_path / "model"), "train_cfg": cfg.model_dump(), "lr": 1e-2, "seed": 0,
               "samples": [item.model_dump() for item in samples()]}
    ds = DeepSpeedConfig(zero_stage=3, launcher="torchrun", num_procs=2, master_port=free_port())
    results = launch(f"{HERE / 'ds_rank_worker.py'}:train_steps", payload, ds, tmp_path / "run", timeout_s=170)
    assert [r["rank"] for r in results] == [0, 1] and results[0]["world_size"] == 2
    assert results[0]["share_sizes"] == [2, 2, 2, 2, 2] and results[1]["share_sizes"] == [2, 2, 1, 2, 2]
    for result in results:
        assert_close(result["loss"], torch_reference[0])
        assert_close(result["grad_norm"], torch_reference[1])


# ---- checkpoints ----------------------------------------------------------------------------------

@pytest.mark.parametrize("stage", [0, 3])
def test_save_then_load_resumes_exactly(tokenizer, tmp_path, stage):
    """Two steps, save, then steps 3–4 live and from disk: identical losses. Step 4's loss depends on
    the Adam moments; a resume without them must differ (so the test can fail)."""
    cfg = ds_cfg(stage).model_copy(update={"max_optimizer_steps": 2})
    live = get_trainer("deepspeed")(tiny_model(tokenizer), cfg, 1e-2)
    step_metrics(live, samples(), seed=0)
    live.save(tmp_path / "ckpt", tokenizer=tokenizer)
    assert (tmp_path / "ckpt" / "config.json").is_file() and (tmp_path / "ckpt" / "optimizer.pt").is_file()
    assert (tmp_path / "ckpt" / "deepspeed_engine" / "state").is_dir()

    model, _ = load_pretrained(tmp_path / "ckpt")
    resumed = get_trainer("deepspeed")(model, cfg, 1e-2, tmp_path / "ckpt" / "optimizer.pt")
    fresh = get_trainer("deepspeed")(load_pretrained(tmp_path / "ckpt")[0], cfg, 1e-2)
    expected = [step["loss"] for step in step_metrics(live, samples(), seed=1)]
    assert [step["loss"] for step in step_metrics(resumed, samples(), seed=1)] == expected
    without_state = [step["loss"] for step in step_metrics(fresh, samples(), seed=1)]
    assert without_state[0] == expected[0] and abs(without_state[1] - expected[1]) > 1e-6


def test_load_optimizer_errors_name_the_path(tokenizer, tmp_path):
    with pytest.raises(FileNotFoundError, match="deepspeed optimizer state"):
        get_trainer("deepspeed")(tiny_model(tokenizer), ds_cfg(0), 1e-3, tmp_path / "missing")
