"""Supervised warm-start: fine-tune on (prompt_ids, response_ids) pairs by response-token NLL.

loss = −Σ_{b,t} m_bt log p(y_bt | y_<t) / Σ_{b,t} m_bt over the response tokens of a batch (the
prompt is context only). Used to bootstrap the policy on oracle demonstrations and the judge on
oracle step labels before RL (docs/design.md, "The loop", Warm-start).
"""
from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence

import torch
from tqdm.auto import tqdm

from rla_core.training.batching import (
    SequencePair,
    collate,
    drop_too_long,
    forward_logprobs,
    length_sorted_chunks,
    model_device,
    model_max_positions,
    model_pad_id,
    response_logprobs,
)


def _batch_indices(count: int, batch_size: int, generator: torch.Generator) -> Iterator[list[int]]:
    """Endless batches of indices: walk a fresh permutation each epoch (a batch may span two)."""
    buffer: list[int] = []
    while True:
        while len(buffer) < batch_size:
            buffer.extend(torch.randperm(count, generator=generator).tolist())
        yield buffer[:batch_size]
        buffer = buffer[batch_size:]


def _accumulate_nll(model: torch.nn.Module, batch: Sequence[SequencePair], micro_batch_size: int) -> float:
    """Backward the batch's token-mean NLL micro-batch by micro-batch; return its value.

    Each micro-batch adds −Σ log p / (response tokens of the WHOLE batch), so the summed gradient
    is the batch mean's gradient whatever the split.
    """
    total_tokens = sum(len(pair.response_ids) for pair in batch)
    device, pad_id = model_device(model), model_pad_id(model)
    value = 0.0
    for micro in length_sorted_chunks(batch, micro_batch_size):
        collated = collate(micro, pad_id).to(device)
        loss = -forward_logprobs(model, collated).sum() / total_tokens
        loss.backward()
        value += float(loss.detach())
    return value


def supervised_finetune(
    model: torch.nn.Module,
    pairs: Sequence[SequencePair],
    *,
    steps: int,
    batch_size: int,
    lr: float,
    seed: int = 0,
    micro_batch_size: int | None = None,
    weight_decay: float = 0.0,
    grad_clip: float = 1.0,
    progress: bool = True,
    desc: str = "sft",
    on_step: Callable[[int, float], None] | None = None,
) -> dict[str, float]:
    """Train `model` in place for `steps` AdamW steps on random batches of `pairs`; `on_step(step, loss)`
    is called after each step (1-based), e.g. to save checkpoints.

    Pairs longer than the model's positions or with an empty response are dropped first.
    Metrics: loss_first, loss_last (mean of the last ≤10 steps), loss_mean, steps, samples,
    dropped_too_long.
    """
    kept, dropped = drop_too_long(pairs, model_max_positions(model))
    kept = [pair for pair in kept if pair.prompt_ids and pair.response_ids]
    metrics = {"steps": 0.0, "samples": float(len(kept)), "dropped_too_long": float(dropped)}
    if not kept or steps <= 0:
        return metrics
    params = [p for p in model.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(params, lr=lr, weight_decay=weight_decay)
    batches = _batch_indices(len(kept), batch_size, torch.Generator().manual_seed(seed))
    losses: list[float] = []
    model.train()
    bar = tqdm(range(steps), desc=desc, disable=not progress, leave=False)
    for _ in bar:
        optimizer.zero_grad(set_to_none=True)
        batch = [kept[index] for index in next(batches)]
        losses.append(_accumulate_nll(model, batch, micro_batch_size or batch_size))
        torch.nn.utils.clip_grad_norm_(params, grad_clip)
        optimizer.step()
        bar.set_postfix(loss=f"{losses[-1]:.3f}")
        if on_step is not None:
            on_step(len(losses), losses[-1])
    optimizer.zero_grad(set_to_none=True)
    model.eval()
    tail = losses[-10:]
    metrics.update(
        steps=float(steps),
        loss_first=losses[0],
        loss_last=sum(tail) / len(tail),
        loss_mean=sum(losses) / len(losses),
    )
    return metrics


def response_nll(model: torch.nn.Module, pairs: Sequence[SequencePair], micro_batch_size: int = 32) -> float:
    """Mean response-token NLL of `pairs` under `model` (no grad), in nats per token."""
    token_logprobs = response_logprobs(model, pairs, micro_batch_size, model_pad_id(model))
    total = sum(float(values.sum()) for values in token_logprobs)
    count = sum(values.numel() for values in token_logprobs)
    return -total / max(count, 1)
