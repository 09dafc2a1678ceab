"""The "torch" trainer backend: the clipped policy-gradient update in plain torch (docs/design.md,
"The formulas", Loss and Mini-batches).

One call of `train`:
1. drop samples whose prompt+response exceed the model's positions (whole samples, counted);
2. score every kept sample once, no grad: log π_old (the model now) and log π_ref ("old" → the same
   numbers, "initial" → the supplied reference model); the numbers are stored WITH the sample;
3. shuffle with `rng_seed` and make ONE pass over all of them in disjoint mini-batches of near-equal
   size (the paper's code does one pass too): exactly `optimizer_steps` of them when set (equal steps
   whatever the data size), else at most `minibatch_size` samples each; `max_optimizer_steps`, when
   set, is an explicit cap, and the samples it leaves out are counted in the metrics;
4. per mini-batch of M samples: for each micro-batch, backward `per_sample_loss.sum() / M`
   (the accumulated gradient is exactly that of the mini-batch mean), clip the grad norm, AdamW step.
The AdamW state lives as long as the trainer and is saved/restored with `save`/`load_optimizer`, so
moments carry over from one iteration to the next.
"""
from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TypeVar
from pathlib import Path

import torch
from torch import Tensor
from transformers import PreTrainedTokenizerBase

from rla_core.config import TrainConfig
from rla_core.fileio import atomic_directory
from rla_core.schemas import TrainingSample
from rla_core.training.base import LOSS_METRICS, Trainer, register_trainer
from rla_core.training.batching import (
    collate,
    drop_too_long,
    forward_logprobs,
    group_chunks,
    model_device,
    model_max_positions,
    model_pad_id,
    place_on_responses,
    prompt_groups,
    response_logprobs,
    split_groups,
)

OPTIMIZER_FILE = "optimizer.pt"
Item = TypeVar("Item")


@dataclass(frozen=True)
class ScoredSample:
    """A training sample with its response-token log-probs under π_old and π_ref ([n] each)."""

    sample: TrainingSample
    old_logprobs: Tensor
    ref_logprobs: Tensor

    # The attributes `collate` reads, so ids and advantage are collated from this one object.
    @property
    def prompt_ids(self) -> list[int]:
        return self.sample.prompt_ids

    @property
    def response_ids(self) -> list[int]:
        return self.sample.response_ids

    @property
    def advantage(self) -> float:
        return self.sample.advantage


@register_trainer("torch")
class TorchTrainer(Trainer):
    """AdamW + clipped policy loss on one process (CPU or one GPU)."""

    def __init__(
        self,
        model: torch.nn.Module,
        train_cfg: TrainConfig,
        lr: float,
        optimizer_state_path: str | os.PathLike | None = None,
    ) -> None:
        super().__init__(model, train_cfg, lr, optimizer_state_path)
        self.pad_id = model_pad_id(model)
        self.optimizer = torch.optim.AdamW(
            [p for p in model.parameters() if p.requires_grad],
            lr=lr,
            weight_decay=train_cfg.weight_decay,
        )
        if optimizer_state_path is not None:
            self.load_optimizer(optimizer_state_path)

    def score(
        self, samples: Sequence[TrainingSample], reference_model: torch.nn.Module | None = None
    ) -> list[ScoredSample]:
        """Attach log π_old (this model, now) and log π_ref to each sample; no grad."""
        micro = self.train_cfg.micro_batch_size
        old = self.old_logprobs(samples)
        if self.train_cfg.reference == "old":
            ref = old
        elif reference_model is None:
            raise ValueError("train.reference='initial' needs a reference model; none was supplied")
        else:
            reference_model.eval()
            ref = response_logprobs(reference_model, samples, micro, self.pad_id)
        return [ScoredSample(s, o, r) for s, o, r in zip(samples, old, ref, strict=True)]

    def old_logprobs(self, samples: Sequence[TrainingSample]) -> list[Tensor]:
        """log π_old of each sample's response tokens: the model being trained, as it is now.

        With train.old_logprobs = "rollout" and every sample carrying the log-probs its generation
        recorded (the same weights: rollout and judging sample from the model this update starts from),
        those are used and one forward pass over all samples is saved; else they are recomputed.
        """
        if self.train_cfg.old_logprobs == "rollout" and all(s.old_logprobs is not None for s in samples):
            return [torch.tensor(s.old_logprobs, dtype=torch.float32, device=model_device(self.model)) for s in samples]
        return response_logprobs(self.model, samples, self.train_cfg.micro_batch_size, self.pad_id)

    def minibatches(self, items: Sequence[Item], rng_seed: int) -> list[list[Item]]:
        """One pass over all items in disjoint near-equal mini-batches: exactly `optimizer_steps` of them
        when set, else as many as keep them near minibatch_size; cut to the first max_optimizer_steps
        when that cap is set.

        Items that share their prompt (the m judge samples of one step) are shuffled and kept together
        as one group, so their prompt is computed once (`forward_logprobs`); their advantages, z-scored
        over the group, also meet in the same step. With train.exact_steps, where whole groups would make
        fewer mini-batches than asked for, a group may straddle two (`split_groups`).
        """
        generator = torch.Generator().manual_seed(rng_seed)
        groups = prompt_groups(items)
        shuffled = [groups[g] for g in torch.randperm(len(groups), generator=generator).tolist()]
        steps = self.train_cfg.optimizer_steps or -(-len(items) // self.train_cfg.minibatch_size)
        parts = split_groups(shuffled, steps, whole=not self.train_cfg.exact_steps) if items else []
        batches = [[items[i] for i in part] for part in parts]
        cap = self.train_cfg.max_optimizer_steps
        return batches if cap is None else batches[:cap]

    def micro_batch_loss(
        self, module: torch.nn.Module, micro: Sequence[ScoredSample]
    ) -> tuple[Tensor, dict[str, Tensor]]:
        """Per-sample loss [B] of one micro-batch under `module` (with grad) and its loss parts.

        `module` is the model, or a wrapper whose forward must build the graph (a DeepSpeed engine).
        """
        from rla_core.losses import clipped_policy_loss

        batch = collate(micro, self.pad_id).to(model_device(module))
        logprobs = forward_logprobs(module, batch)
        old = place_on_responses([item.old_logprobs for item in micro], batch.response_mask)
        ref = place_on_responses([item.ref_logprobs for item in micro], batch.response_mask)
        return clipped_policy_loss(
            logprobs, old, ref, batch.advantages, batch.response_mask,
            self.train_cfg.clip_eps, self.train_cfg.kl_beta, self.train_cfg.kl_clamp,
        )

    def accumulate_gradients(self, minibatch: Sequence[ScoredSample]) -> dict[str, float]:
        """Backward the mini-batch mean loss micro-batch by micro-batch (adds into .grad).

        Each micro-batch contributes per_sample_loss.sum() / M, M = len(minibatch), so the summed
        gradient equals ∇ mean_b loss_b whatever the micro-batch size. Metrics are mini-batch means.
        """
        size = len(minibatch)
        totals = dict.fromkeys(LOSS_METRICS, 0.0)
        for chunk in group_chunks(minibatch, self.train_cfg.micro_batch_size):
            micro = [minibatch[i] for i in chunk]
            per_sample, parts = self.micro_batch_loss(self.model, micro)
            loss = per_sample.sum() / size
            loss.backward()
            totals["loss"] += float(loss.detach())
            share = len(micro) / size  # the loss module reports micro-batch means
            for name in ("pg_loss", "kl", "clip_fraction", "ratio_mean"):
                totals[name] += float(parts[name]) * share
        return totals

    def optimizer_step(self, minibatch: Sequence[ScoredSample]) -> dict[str, float]:
        """One AdamW step on one mini-batch; returns its loss metrics and the pre-clip grad norm."""
        self.optimizer.zero_grad(set_to_none=True)
        metrics = self.accumulate_gradients(minibatch)
        params = [p for group in self.optimizer.param_groups for p in group["params"]]
        grad_norm = torch.nn.utils.clip_grad_norm_(params, self.train_cfg.grad_clip)
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        return {**metrics, "grad_norm": float(grad_norm)}

    def train(
        self,
        samples: Sequence[TrainingSample],
        reference_model: torch.nn.Module | None = None,
        rng_seed: int = 0,
    ) -> dict[str, float]:
        """Run the update on `samples`; metrics are means over the optimizer steps taken."""
        kept, dropped = drop_too_long(samples, model_max_positions(self.model))
        kept = [s for s in kept if s.prompt_ids and s.response_ids]
        metrics = dict.fromkeys((*LOSS_METRICS, "grad_norm"), 0.0)
        metrics.update(samples=float(len(kept)), dropped_too_long=float(dropped), optimizer_steps=0.0,
                       samples_trained=0.0, samples_over_cap=0.0)
        metrics["dropped_empty"] = float(len(samples) - dropped - len(kept))
        if not kept:
            return metrics
        # eval(): no dropout, so π_θ equals π_old exactly before the first step (ρ = 1).
        self.model.eval()
        # Choose the mini-batches first and score only the samples they hold: log-probs of a sample
        # do not depend on its batch, and samples beyond a max_optimizer_steps cap would never be used.
        batches = self.minibatches(kept, rng_seed)
        # Counted on the global mini-batches (a multi-rank backend's `minibatches` holds its share only).
        trained = sum(len(batch) for batch in TorchTrainer.minibatches(self, kept, rng_seed))
        metrics.update(samples_trained=float(trained), samples_over_cap=float(len(kept) - trained))
        scored = iter(self.score([s for batch in batches for s in batch], reference_model))
        steps = [self.optimizer_step([next(scored) for _ in batch]) for batch in batches]
        for name in (*LOSS_METRICS, "grad_norm"):
            metrics[name] = sum(step[name] for step in steps) / len(steps)
        metrics["optimizer_steps"] = float(len(steps))
        return metrics

    def save(
        self, directory: str | os.PathLike, tokenizer: PreTrainedTokenizerBase | None = None
    ) -> None:
        """Model (HF format) + optimizer.pt (+ tokenizer if given) into `directory`, atomically."""
        with atomic_directory(directory) as staging:
            self.model.save_pretrained(staging)
            if tokenizer is not None:
                tokenizer.save_pretrained(staging)
            torch.save(self.optimizer.state_dict(), staging / OPTIMIZER_FILE)

    def load_optimizer(self, path: str | os.PathLike) -> None:
        """Restore AdamW moments from optimizer.pt (or a directory holding it).

        The configured lr and weight decay win over the saved ones, so a config change applies.
        """
        path = Path(path)
        if path.is_dir():
            path = path / OPTIMIZER_FILE
        if not path.is_file():
            raise FileNotFoundError(f"optimizer state not found: {path}")
        state = torch.load(path, map_location=model_device(self.model), weights_only=True)
        try:
            self.optimizer.load_state_dict(state)
        except (ValueError, KeyError) as err:
            raise ValueError(f"optimizer state {path} does not match this model: {err}") from err
        for group in self.optimizer.param_groups:
            group["lr"] = self.lr
            group["weight_decay"] = self.train_cfg.weight_decay
