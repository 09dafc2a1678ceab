"""The "deepspeed" trainer backend: the torch backend's update (docs/design.md, "The formulas", Loss and
Mini-batches) run by a DeepSpeed engine.

Same semantics as `TorchTrainer` (score π_old/π_ref once, same shuffle and disjoint mini-batches,
exact mini-batch mean, grad clip, AdamW), with ZeRO 0–3, offload and bf16 from `train.deepspeed`.

Data parallelism over W ranks (torchrun/deepspeed launches; in-process is W = 1). Every rank gets
the SAME samples and seed, so all ranks cut the same global mini-batches; rank r then keeps the
positions r, r+W, r+2W, … of each (sizes differ by at most one). For a global mini-batch of M
samples rank r backwards, per micro-batch, (W / M) · Σ_{b in micro} loss_b; DeepSpeed AVERAGES
gradients over ranks (÷ W), so the reduced gradient is (1/M) Σ_b ∇loss_b — exactly the torch
backend's mini-batch mean, for any M (uneven shares included). ZeRO-2/3 communicate in every
backward and ZeRO-3 in every forward, so ranks with fewer micro-batches run zero-weight dummy
micro-batches until all ranks ran the same number. Loss metrics are summed over ranks (global means).

Checkpoints: `save` writes the HF model (full weights, gathered under ZeRO-3), the DeepSpeed engine
checkpoint (optimizer partitions, scheduler, step) in `deepspeed_engine/`, and `optimizer.pt`, a small
pointer to it, so callers that look for optimizer.pt (tasks/stages/training.py) resume either backend.
Resuming needs the same ZeRO stage and world size.
"""
from __future__ import annotations

import math
import os
import socket
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch
from transformers import PreTrainedTokenizerBase

from rla_core.config import TrainConfig
from rla_core.fileio import atomic_directory
from rla_core.schemas import TrainingSample
from rla_core.training.base import LOSS_METRICS, Trainer, register_trainer
from rla_core.training.batching import length_sorted_chunks, model_pad_id, response_logprobs
from rla_core.training.deepspeed_config import deepspeed_config
from rla_core.training.torch_backend import OPTIMIZER_FILE, Item, ScoredSample, TorchTrainer

ENGINE_DIR = "deepspeed_engine"
ENGINE_TAG = "state"


def _free_port(preferred: int) -> int:
    """`preferred` if nothing listens on it on 127.0.0.1, else a port the OS picks."""
    with socket.socket() as probe:
        try:
            probe.bind(("127.0.0.1", preferred))
            return preferred
        except OSError:
            probe.bind(("127.0.0.1", 0))
            return probe.getsockname()[1]


def prepare_single_rank_env(master_port: int) -> None:
    """Env for a one-rank process group when no launcher set it (setdefault: a launcher's values win).

    A busy `master_port` (another in-process run on this machine) is replaced by a free one. Also
    points TORCH_EXTENSIONS_DIR at a persistent cache: the first initialize compiles a comm op.
    """
    os.environ.setdefault("RANK", "0")
    os.environ.setdefault("WORLD_SIZE", "1")
    os.environ.setdefault("LOCAL_RANK", "0")
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    if "MASTER_PORT" not in os.environ:
        os.environ["MASTER_PORT"] = str(_free_port(master_port))
    cache = Path.home() / ".cache" / "rla" / "torch_extensions"
    os.environ.setdefault("TORCH_EXTENSIONS_DIR", str(cache))


def ensure_process_group(master_port: int) -> None:
    """Initialise torch.distributed once per process with DeepSpeed's backend (nccl on CUDA, gloo on CPU)."""
    import deepspeed
    import torch.distributed as dist
    from deepspeed.accelerator import get_accelerator

    prepare_single_rank_env(master_port)
    if not dist.is_initialized():
        deepspeed.init_distributed(dist_backend=get_accelerator().communication_backend_name())


def _dummy_item(pad_id: int) -> ScoredSample:
    """A 2-token, zero-advantage item that keeps a rank in step with the others (its loss weight is 0)."""
    sample = TrainingSample(prompt_ids=[pad_id], response_ids=[pad_id], advantage=0.0,
                            task_id="<pad>", sample_index=-1, step_index=-1)
    return ScoredSample(sample, torch.zeros(1), torch.zeros(1))


@register_trainer("deepspeed")
class DeepSpeedTrainer(TorchTrainer):
    """A TorchTrainer whose forward/backward/step go through a DeepSpeed engine (ZeRO 0–3)."""

    def __init__(
        self,
        model: torch.nn.Module,
        train_cfg: TrainConfig,
        lr: float,
        optimizer_state_path: str | os.PathLike | None = None,
    ) -> None:
        # Trainer.__init__, not TorchTrainer's: the engine builds and owns the optimizer.
        Trainer.__init__(self, model, train_cfg, lr, optimizer_state_path)
        import deepspeed
        import torch.distributed as dist

        self.pad_id = model_pad_id(model)
        if train_cfg.deepspeed.launcher != "inprocess" and "WORLD_SIZE" not in os.environ:
            warnings.warn(f"train.deepspeed.launcher={train_cfg.deepspeed.launcher} but this process was not "
                          "started by a launcher: training on one in-process rank "
                          "(see rla_core.training.ds_launch)", stacklevel=2)
        ensure_process_group(train_cfg.deepspeed.master_port)
        self.rank, self.world_size = dist.get_rank(), dist.get_world_size()
        self.ds_config = deepspeed_config(train_cfg, lr, self.world_size)
        params = [p for p in model.parameters() if p.requires_grad]
        self.engine, self.optimizer, _, self.scheduler = deepspeed.initialize(
            model=model, model_parameters=params, config=self.ds_config
        )
        self.model = self.engine.module  # the same HF model object (moved/partitioned by the engine)
        if optimizer_state_path is not None:
            self.load_optimizer(optimizer_state_path)

    # -- collectives (no-ops on one rank) ------------------------------------------------------
    def _all_reduce(self, values: list[float], op: str = "sum") -> list[float]:
        if self.world_size == 1:
            return values
        import torch.distributed as dist

        tensor = torch.tensor(values, dtype=torch.float64, device=self.engine.device)
        dist.all_reduce(tensor, op=dist.ReduceOp.SUM if op == "sum" else dist.ReduceOp.MAX)
        return tensor.tolist()

    def _pad_count(self, count: int) -> int:
        """The number of micro-batches every rank must run (the max over ranks)."""
        return int(self._all_reduce([float(count)], op="max")[0])

    # -- the update ------------------------------------------------------------------------------
    def minibatches(self, items: Sequence[Item], rng_seed: int) -> list[list[Item]]:
        """This rank's share (positions r, r+W, …) of each global mini-batch of TorchTrainer.minibatches."""
        batches = super().minibatches(items, rng_seed)
        return [batch[self.rank :: self.world_size] for batch in batches]

    def old_logprobs(self, samples: Sequence[TrainingSample]) -> list[torch.Tensor]:
        """log π_old through the engine (ZeRO-3 gathers weights in forward), no grad; or the generation's
        own log-probs (train.old_logprobs = "rollout"; every rank holds the same samples, so all skip)."""
        if self.train_cfg.old_logprobs == "rollout" and all(s.old_logprobs is not None for s in samples):
            return [torch.tensor(s.old_logprobs, dtype=torch.float32, device=self.engine.device) for s in samples]
        micro = self.train_cfg.micro_batch_size
        # ZeRO-3 forwards are collectives: pad with dummies to the same micro-batch count on all ranks.
        count = self._pad_count(math.ceil(len(samples) / micro)) if self.world_size > 1 else 0
        padding = [_dummy_item(self.pad_id).sample] * max(0, count * micro - len(samples))
        return response_logprobs(self.engine, [*samples, *padding], micro, self.pad_id)[: len(samples)]

    def accumulate_gradients(self, minibatch: Sequence[ScoredSample]) -> dict[str, float]:
        """Backward this rank's share of one global mini-batch of M samples (see the module docstring).

        Per micro-batch: engine.backward((W / M) · Σ loss_b); dummies get weight 0. Metrics are the
        global mini-batch means (summed over ranks).
        """
        size = int(self._all_reduce([float(len(minibatch))])[0])  # M, the global mini-batch
        micros = length_sorted_chunks(minibatch, self.train_cfg.micro_batch_size)
        count = self._pad_count(len(micros)) if self.world_size > 1 else len(micros)
        totals = dict.fromkeys(LOSS_METRICS, 0.0)
        for index in range(count):
            real = index < len(micros)
            micro = micros[index] if real else [_dummy_item(self.pad_id)]
            per_sample, parts = self.micro_batch_loss(self.engine, micro)
            weight = self.world_size / size if real else 0.0
            self.engine.backward(per_sample.sum() * weight)
            if real:
                totals["loss"] += float(per_sample.detach().sum()) / size
                for name in LOSS_METRICS[1:]:
                    totals[name] += float(parts[name]) * len(micro) / size
        return dict(zip(totals, self._all_reduce(list(totals.values()))))

    def optimizer_step(self, minibatch: Sequence[ScoredSample]) -> dict[str, float]:
        """One engine step (reduce, clip to train.grad_clip, AdamW, scheduler); pre-clip grad norm."""
        metrics = self.accumulate_gradients(minibatch)
        # A plain torch optimizer (ZeRO-0, fp32) does not record the norm: measure it before step().
        own_norm = None if hasattr(self.optimizer, "_global_grad_norm") else self._reduced_grad_norm()
        self.engine.step()
        grad_norm = own_norm if own_norm is not None else self.engine.get_global_grad_norm()
        return {**metrics, "grad_norm": float(grad_norm) if grad_norm is not None else float("nan")}

    def _reduced_grad_norm(self) -> float:
        """‖mean over ranks of the local gradients‖₂ — what ZeRO-0's step() reduces and clips."""
        grads = [p.grad.detach().flatten().float() for p in self.model.parameters() if p.grad is not None]
        if not grads:
            return 0.0
        flat = torch.cat(grads)
        if self.world_size > 1:
            import torch.distributed as dist

            dist.all_reduce(flat)  # a second copy of the gradients: ZeRO-0 multi-rank only
            flat /= self.world_size
        return float(flat.norm())

    # -- persistence -------------------------------------------------------------------------------
    def save(
        self, directory: str | os.PathLike, tokenizer: PreTrainedTokenizerBase | None = None
    ) -> None:
        """HF model (+ tokenizer) + engine checkpoint + optimizer.pt pointer, atomically (all ranks call)."""
        if self.rank == 0:
            with atomic_directory(directory) as staging:
                self._write_checkpoint(staging, tokenizer)
        else:
            self._write_checkpoint(None, tokenizer)
        self._barrier()  # the other ranks return once rank 0 has renamed the directory into place

    def _write_checkpoint(self, staging: Path | None, tokenizer: PreTrainedTokenizerBase | None) -> None:
        staging = Path(self._broadcast(str(staging) if staging is not None else None))
        state = self._full_state_dict()  # a collective under ZeRO-3
        if self.rank == 0:
            self.model.save_pretrained(staging, state_dict=state)
            if tokenizer is not None:
                tokenizer.save_pretrained(staging)
            torch.save(self._pointer(), staging / OPTIMIZER_FILE)
        self.engine.save_checkpoint(str(staging / ENGINE_DIR), tag=ENGINE_TAG)
        self._barrier()

    def _full_state_dict(self) -> dict[str, torch.Tensor] | None:
        """The full weights on rank 0 (ZeRO-3 gathers them module by module), None elsewhere."""
        if self.train_cfg.deepspeed.zero_stage == 3:
            return self.engine._zero3_consolidated_16bit_state_dict()
        return self.model.state_dict() if self.rank == 0 else None

    def _pointer(self) -> dict[str, Any]:
        ds = self.train_cfg.deepspeed
        return {"backend": "deepspeed", "engine_dir": ENGINE_DIR, "tag": ENGINE_TAG,
                "zero_stage": ds.zero_stage, "world_size": self.world_size}

    def _broadcast(self, value: str | None) -> str | None:
        if self.world_size == 1:
            return value
        import torch.distributed as dist

        holder = [value]
        dist.broadcast_object_list(holder, src=0)
        return holder[0]

    def _barrier(self) -> None:
        if self.world_size > 1:
            import torch.distributed as dist

            dist.barrier()

    def load_optimizer(self, path: str | os.PathLike) -> None:
        """Resume the engine (optimizer, scheduler, step) from a directory written by `save`, its
        optimizer.pt, or the engine folder itself. The configured lr and weight decay win."""
        engine_dir = _engine_directory(Path(path))
        loaded, _ = self.engine.load_checkpoint(
            str(engine_dir), tag=ENGINE_TAG, load_optimizer_states=True, load_lr_scheduler_states=True
        )
        if loaded is None:
            raise ValueError(f"deepspeed checkpoint {engine_dir} could not be loaded into this model")
        for group in self.optimizer.param_groups:
            if self.scheduler is None:  # WarmupLR sets the lr itself from its restored step
                group["lr"] = self.lr
            group["weight_decay"] = self.train_cfg.weight_decay


def _engine_directory(path: Path) -> Path:
    """The engine folder for `path` (model directory, its optimizer.pt, or the folder itself)."""
    if path.is_file():
        path = path.parent
    candidate = path / ENGINE_DIR if (path / ENGINE_DIR).is_dir() else path
    if not (candidate / ENGINE_TAG).is_dir():
        raise FileNotFoundError(
            f"deepspeed optimizer state not found under {path} (expected {ENGINE_DIR}/{ENGINE_TAG}); "
            "a torch-backend optimizer.pt cannot be resumed by the deepspeed backend"
        )
    return candidate
