"""The DeepSpeed JSON config of the "deepspeed" trainer backend, built from `train` (pure, no deepspeed import).

The mapping keeps the torch backend's update (docs/design.md, "The formulas", Loss and Mini-batches) bit
for bit where DeepSpeed allows it:
- gradient accumulation is owned by the trainer (`managed_gradient_accumulation: false`,
  `gradient_accumulation_steps: 1`): it backwards `Σ_b loss_b · W / M` per micro-batch itself, so a
  mini-batch may hold any number of micro-batches and the loss is scaled exactly once;
- the optimizer is AdamW with torch's defaults (betas 0.9/0.999, eps 1e-8) and train.weight_decay;
  torch's own AdamW (`torch_adam`) runs on any device without compiling an op, except under
  ZeRO-Offload, where DeepSpeed requires its CPU Adam (a C++ op compiled on first use);
- `gradient_clipping` = train.grad_clip (pre-clip global norm, as torch.nn.utils.clip_grad_norm_);
- warmup_steps > 0 → WarmupLR (linear 0 → lr over that many optimizer steps), else a constant lr.
"""
from __future__ import annotations

from typing import Any

from rla_core.config import TrainConfig

ADAM_BETAS = (0.9, 0.999)  # torch.optim.AdamW defaults, as the torch backend uses
ADAM_EPS = 1e-8


def check_deepspeed_options(train_cfg: TrainConfig) -> None:
    """Raise ValueError (naming the key) on combinations DeepSpeed rejects or silently ignores.

    The pydantic model validates these too; this guards configs built with `model_construct`.
    """
    ds = train_cfg.deepspeed
    if ds.zero_stage not in (0, 1, 2, 3):
        raise ValueError(f"train.deepspeed.zero_stage must be one of 0, 1, 2, 3, got {ds.zero_stage}")
    if ds.offload_params and ds.zero_stage != 3:
        raise ValueError("train.deepspeed.offload_params needs zero_stage 3")
    if ds.offload_optimizer and ds.zero_stage == 0:
        raise ValueError("train.deepspeed.offload_optimizer needs zero_stage >= 1")
    if ds.warmup_steps < 0:
        raise ValueError(f"train.deepspeed.warmup_steps must be >= 0, got {ds.warmup_steps}")


def _zero_section(train_cfg: TrainConfig) -> dict[str, Any]:
    ds = train_cfg.deepspeed
    zero: dict[str, Any] = {"stage": ds.zero_stage}
    # Unmanaged accumulation allows overlap_comm only where gradients are partitioned (stage >= 2).
    zero["overlap_comm"] = ds.zero_stage >= 2
    if ds.offload_optimizer:
        zero["offload_optimizer"] = {"device": "cpu", "pin_memory": False}
    if ds.offload_params:
        zero["offload_param"] = {"device": "cpu", "pin_memory": False}
    if ds.zero_stage == 3:
        # save() gathers the full weights into one HF directory.
        zero["stage3_gather_16bit_weights_on_model_save"] = True
    return zero


def _scheduler_section(train_cfg: TrainConfig, lr: float) -> dict[str, Any] | None:
    steps = train_cfg.deepspeed.warmup_steps
    if steps == 0:
        return None  # no scheduler: the optimizer keeps the configured lr
    params = {"warmup_min_lr": 0.0, "warmup_max_lr": lr, "warmup_num_steps": steps, "warmup_type": "linear"}
    return {"type": "WarmupLR", "params": params}


def deepspeed_config(train_cfg: TrainConfig, lr: float, world_size: int = 1) -> dict[str, Any]:
    """The dict passed to `deepspeed.initialize(config=...)` for `train_cfg` at learning rate `lr`.

    world_size = data-parallel ranks (train_batch_size = micro_batch_size · world_size, GAS = 1:
    the trainer owns accumulation, see the module docstring).
    """
    check_deepspeed_options(train_cfg)
    if world_size < 1:
        raise ValueError(f"world_size must be >= 1, got {world_size}")
    if lr <= 0:
        raise ValueError(f"learning rate must be > 0, got {lr}")
    ds = train_cfg.deepspeed
    config: dict[str, Any] = {
        "train_micro_batch_size_per_gpu": train_cfg.micro_batch_size,
        "gradient_accumulation_steps": 1,
        "train_batch_size": train_cfg.micro_batch_size * world_size,
        "managed_gradient_accumulation": False,
        "gradient_clipping": train_cfg.grad_clip,
        "optimizer": {
            "type": "AdamW",
            "params": {
                "lr": lr,
                "betas": list(ADAM_BETAS),
                "eps": ADAM_EPS,
                "weight_decay": train_cfg.weight_decay,
                "torch_adam": not ds.offload_optimizer,
            },
        },
        "bf16": {"enabled": ds.bf16},
        "fp16": {"enabled": False},
        "zero_optimization": _zero_section(train_cfg),
        "zero_allow_untested_optimizer": True,  # torch AdamW under ZeRO is fine (elementwise)
        "steps_per_print": 10**9,  # metrics go through train()'s return value, not DeepSpeed logs
        "wall_clock_breakdown": False,
    }
    scheduler = _scheduler_section(train_cfg, lr)
    if scheduler is not None:
        config["scheduler"] = scheduler
    return config
