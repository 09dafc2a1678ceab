"""Collate (prompt_ids, response_ids[, advantage]) items into padded tensors; score them.

Layout: each row is prompt_ids + response_ids, padded to the longest row. Everything a trainer needs
about a sample (ids, masks, advantage) is built from the same item in the same pass, so a sample can
never be paired with another sample's advantage. Log-prob tensors follow `rla_core.losses`: [B, T]
aligned with input_ids, position t = log p(input_ids[t] | input_ids[:t]).

Training pads on the RIGHT: with left padding the pad rows at the start of a sequence attend to
nothing, which some attention kernels turn into NaN. Position ids are computed from the attention
mask, so a sample's log-probs do not depend on its padding or on the other rows of its batch.
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal, Protocol, TypeVar

import torch
from torch import Tensor

class SequencePair(Protocol):
    """Anything with generated token ids: TrainingSample, or an SFT (prompt, response) pair."""

    prompt_ids: list[int]
    response_ids: list[int]


Pair = TypeVar("Pair", bound=SequencePair)
T = TypeVar("T")


@dataclass(frozen=True)
class Batch:
    """input_ids/attention_mask/position_ids [B, T] long, response_mask [B, T] bool, advantages [B]."""

    input_ids: Tensor
    attention_mask: Tensor
    position_ids: Tensor
    response_mask: Tensor
    advantages: Tensor

    def to(self, device: torch.device | str) -> "Batch":
        return Batch(*(getattr(self, name).to(device) for name in self.__dataclass_fields__))


def collate(
    items: Sequence[SequencePair],
    pad_id: int = 0,
    padding_side: Literal["left", "right"] = "right",
) -> Batch:
    """Pad prompt+response rows to one length; mark response tokens; carry each item's advantage.

    Items without an `advantage` attribute (SFT pairs) get 0. Every prompt must be non-empty
    (position 0 has no prediction, see `rla_core.losses`).
    """
    if not items:
        raise ValueError("collate needs at least one item")
    rows = [list(item.prompt_ids) + list(item.response_ids) for item in items]
    width = max(len(row) for row in rows)
    shape = (len(rows), width)
    input_ids = torch.full(shape, pad_id, dtype=torch.long)
    attention_mask = torch.zeros(shape, dtype=torch.long)
    response_mask = torch.zeros(shape, dtype=torch.bool)
    for index, (item, row) in enumerate(zip(items, rows)):
        if not item.prompt_ids:
            raise ValueError("every item needs at least one prompt token")
        start = width - len(row) if padding_side == "left" else 0
        input_ids[index, start : start + len(row)] = torch.tensor(row, dtype=torch.long)
        attention_mask[index, start : start + len(row)] = 1
        response_mask[index, start + len(item.prompt_ids) : start + len(row)] = True
    position_ids = (attention_mask.cumsum(dim=-1) - 1).clamp(min=0)
    advantages = torch.tensor([float(getattr(item, "advantage", 0.0)) for item in items])
    return Batch(input_ids, attention_mask, position_ids, response_mask, advantages)


def model_max_positions(model: torch.nn.Module) -> int | None:
    """The longest sequence the model accepts (config.max_position_embeddings), None if unknown."""
    return getattr(getattr(model, "config", None), "max_position_embeddings", None)


def drop_too_long(items: Sequence[Pair], max_positions: int | None) -> tuple[list[Pair], int]:
    """(items whose prompt+response fit in `max_positions`, how many were dropped).

    Dropping happens on whole items, before collating, so nothing positional can shift.
    """
    if max_positions is None:
        return list(items), 0
    kept = [item for item in items if len(item.prompt_ids) + len(item.response_ids) <= max_positions]
    return kept, len(items) - len(kept)


def chunked(items: Sequence[T], size: int) -> list[list[T]]:
    """Consecutive disjoint chunks of `size` (the last may be shorter)."""
    if size <= 0:
        raise ValueError(f"chunk size must be > 0, got {size}")
    return [list(items[start : start + size]) for start in range(0, len(items), size)]


def split_groups(groups: Sequence[Sequence[int]], count: int, whole: bool = True) -> list[list[int]]:
    """Consecutive groups packed into `count` parts of near-equal size, no group split: a group goes to
    the part its midpoint falls in (singletons: parts differ by at most one). Empty parts are dropped.

    whole=False: where that leaves fewer than `count` parts (fewer groups than parts, or groups too
    uneven), the items, in the same order, are cut into min(count, items) consecutive parts whose sizes
    differ by at most one instead, so a group may straddle two parts."""
    if count <= 0:
        raise ValueError(f"part count must be > 0, got {count}")
    total = sum(len(g) for g in groups)
    parts: list[list[int]] = [[] for _ in range(count)]
    seen = 0
    for group in groups:
        parts[min(count - 1, int((seen + len(group) / 2) * count / total))].extend(group)
        seen += len(group)
    parts = [part for part in parts if part]
    if whole or len(parts) == min(count, total):
        return parts
    items = [i for group in groups for i in group]
    cuts = min(count, total)
    return [items[j * total // cuts:(j + 1) * total // cuts] for j in range(cuts)]


def length_order(items: Sequence[SequencePair]) -> list[int]:
    """Indices of `items` from longest to shortest prompt+response (stable).

    Micro-batches cut from this order hold rows of similar length, so less compute goes to padding.
    A sample's log-probs do not depend on its batch-mates (see the module docstring) and the
    mini-batch loss is a sum over samples, so the order changes nothing but float summation order.
    """
    return sorted(range(len(items)), key=lambda i: -(len(items[i].prompt_ids) + len(items[i].response_ids)))


def length_sorted_chunks(items: Sequence[T], size: int) -> list[list[T]]:
    """`chunked` over the items in `length_order`: disjoint micro-batches of similar-length rows."""
    order = length_order(items)  # type: ignore[arg-type]
    return chunked([items[i] for i in order], size)


def model_pad_id(model: torch.nn.Module) -> int:
    """The model's pad token id (config.pad_token_id), 0 when it has none."""
    return getattr(getattr(model, "config", None), "pad_token_id", None) or 0


def model_device(model: torch.nn.Module) -> torch.device:
    """Where inputs go: a wrapper's own `device` (a DeepSpeed engine: its ZeRO-3 parameters may be
    empty placeholders, offloaded to CPU), else the device of the first parameter."""
    device = getattr(model, "device", None)
    if isinstance(device, torch.device):
        return device
    return next(model.parameters()).device


# Causal LMs whose logits are exactly lm_head(last hidden state): no soft-capping or scaling after it.
_PLAIN_HEAD_TYPES = frozenset({"qwen2", "qwen3", "llama", "mistral"})


def _decoder_and_head(model: torch.nn.Module) -> tuple[torch.nn.Module, torch.nn.Module] | None:
    """(decoder, lm_head) of a plain HF causal LM, or None (a wrapper such as a DeepSpeed engine, or
    an architecture whose logits are more than a projection) — then the full forward is used."""
    config = getattr(model, "config", None)
    if getattr(config, "model_type", None) not in _PLAIN_HEAD_TYPES or not hasattr(model, "get_decoder"):
        return None
    head = model.get_output_embeddings()
    return (model.get_decoder(), head) if head is not None else None


def prompt_groups(items: Sequence[SequencePair]) -> list[list[int]]:
    """Indices of `items` grouped by identical prompt_ids, groups in first-seen order.

    The m judge samples of one step share their prompt, and so do the first steps of the N rollouts of
    one task: `forward_logprobs` runs such a prompt once for the whole group.
    """
    groups: dict[tuple[int, ...], list[int]] = {}
    for index, item in enumerate(items):
        groups.setdefault(tuple(item.prompt_ids), []).append(index)
    return list(groups.values())


def group_chunks(items: Sequence[SequencePair], size: int) -> list[list[int]]:
    """Indices of `items` in micro-batches of at most `size` (a bigger group gets one of its own) that
    keep same-prompt groups whole, longest rows first so that each micro-batch pads little."""
    def longest(group: list[int]) -> int:
        return max(len(items[i].prompt_ids) + len(items[i].response_ids) for i in group)

    chunks: list[list[int]] = []
    for group in sorted(prompt_groups(items), key=lambda g: (-longest(g), g[0])):
        if chunks and len(chunks[-1]) + len(group) <= size:
            chunks[-1].extend(group)
        else:
            chunks.append(list(group))
    return chunks


def _shared_prefix_logprobs(decoder: torch.nn.Module, head: torch.nn.Module, batch: Batch) -> Tensor | None:
    """`forward_logprobs` with each distinct prompt of the batch run once (None when none repeats).

    The distinct prompts go through the decoder right-padded, with a KV cache; the cache is indexed out
    to one copy per row (differentiable, so gradients from every response reach the shared prompt);
    then all responses run on top of it. A row's first response token is predicted from its prompt's
    last hidden state, the others from the response pass. Same numbers as the unshared forward up to
    float rounding.
    """
    mask = batch.response_mask.bool()
    starts = mask.int().argmax(dim=1).tolist()  # prompt length of each row
    rows = batch.input_ids.tolist()
    distinct: dict[tuple[int, ...], int] = {}
    group = [distinct.setdefault(tuple(row[:start]), len(distinct)) for row, start in zip(rows, starts)]
    if len(distinct) == len(rows):
        return None
    device, pad_id = batch.input_ids.device, 0  # pads are masked: any id will do
    prompts = list(distinct)
    width = max(len(p) for p in prompts)
    prompt_ids = torch.full((len(prompts), width), pad_id, dtype=torch.long, device=device)
    prompt_mask = torch.zeros_like(prompt_ids)
    for row, prompt in enumerate(prompts):
        prompt_ids[row, : len(prompt)] = torch.tensor(prompt, dtype=torch.long)
        prompt_mask[row, : len(prompt)] = 1
    positions = torch.arange(width, device=device).expand(len(prompts), width)
    out = decoder(input_ids=prompt_ids, attention_mask=prompt_mask, position_ids=positions, use_cache=True)
    index = torch.tensor(group, dtype=torch.long, device=device)
    cache = out.past_key_values
    cache.batch_select_indices(index)
    lengths = mask.sum(dim=1)
    span = int(lengths.max())
    response_mask = torch.arange(span, device=device)[None, :] < lengths[:, None]
    response_ids = torch.full((len(rows), span), pad_id, dtype=torch.long, device=device)
    response_ids[response_mask] = batch.input_ids[mask]
    start = torch.tensor(starts, dtype=torch.long, device=device)
    hidden = decoder(input_ids=response_ids, attention_mask=torch.cat([prompt_mask[index], response_mask.long()], 1),
                     position_ids=start[:, None] + torch.arange(span, device=device)[None, :],
                     past_key_values=cache, use_cache=True).last_hidden_state
    last_prompt = out.last_hidden_state[index, start - 1]  # predicts response token 0
    predictors = torch.cat([last_prompt[:, None, :], hidden[:, :-1, :]], dim=1)[response_mask]
    logits = head(predictors).float()
    targets = response_ids[response_mask]
    picked = logits.gather(-1, targets[:, None]).squeeze(-1) - torch.logsumexp(logits, dim=-1)
    result = torch.zeros(mask.shape, dtype=picked.dtype, device=device)
    result[mask] = picked  # row-major: the same token order as response_mask
    return result


def forward_logprobs(model: torch.nn.Module, batch: Batch) -> Tensor:
    """Per-token log-probs [B, T] of `batch` under `model` (0 outside the response); keeps grad.

    For plain causal LMs the vocabulary projection runs only at the positions that predict a response
    token (t−1 for each response token t), not at every position: responses are a few tokens of rows
    of hundreds, and the [B, T, V] logits were most of the memory and a large share of the compute.
    Rows that share their prompt run it once (`_shared_prefix_logprobs`). Same numbers as
    `sequence_logprobs(model(...).logits, ...)` up to float rounding.
    """
    from rla_core.losses import sequence_logprobs

    inputs = dict(input_ids=batch.input_ids, attention_mask=batch.attention_mask,
                  position_ids=batch.position_ids, use_cache=False)
    parts = _decoder_and_head(model)
    if parts is None:
        return sequence_logprobs(model(**inputs).logits, batch.input_ids, batch.response_mask)
    decoder, head = parts
    mask = batch.response_mask.bool()
    if mask[:, 0].any():
        raise ValueError("response_mask[:, 0] must be 0: position 0 has no preceding token to predict it")
    shared = _shared_prefix_logprobs(decoder, head, batch)
    if shared is not None:
        return shared
    hidden = decoder(**inputs).last_hidden_state
    predicts = torch.zeros_like(mask)
    predicts[:, :-1] = mask[:, 1:]  # row-major order of predicts matches that of mask, token by token
    logits = head(hidden[predicts]).float()  # [N, V], N = response tokens in the batch
    targets = batch.input_ids[mask]
    picked = logits.gather(-1, targets[:, None]).squeeze(-1) - torch.logsumexp(logits, dim=-1)
    out = torch.zeros(mask.shape, dtype=picked.dtype, device=picked.device)
    out[mask] = picked
    return out


@torch.no_grad()
def response_logprobs(
    model: torch.nn.Module,
    items: Sequence[SequencePair],
    micro_batch_size: int,
    pad_id: int = 0,
) -> list[Tensor]:
    """Log-probs of each item's response tokens under `model`, no grad: list of [n_i] tensors.

    Runs in micro-batches of at most `micro_batch_size` that keep same-prompt items together
    (`group_chunks`); the result is in the order of `items`.
    """
    device = model_device(model)
    chunks = group_chunks(items, micro_batch_size)
    order = [i for chunk in chunks for i in chunk]
    scored: list[Tensor] = []
    for chunk in chunks:
        batch = collate([items[i] for i in chunk], pad_id).to(device)
        token_logprobs = forward_logprobs(model, batch)
        lengths = batch.response_mask.sum(dim=-1).tolist()
        scored.extend(token_logprobs[batch.response_mask].split(lengths))
    out: list[Tensor] = [torch.empty(0)] * len(items)
    for position, index in enumerate(order):
        out[index] = scored[position]
    return out


def place_on_responses(values: Sequence[Tensor], response_mask: Tensor) -> Tensor:
    """Inverse of `token_logprobs[response_mask].split(...)`: [B, T] with values[b] on row b's
    response tokens (in order) and 0 elsewhere. values[b] has length response_mask[b].sum()."""
    out = torch.zeros(response_mask.shape, dtype=values[0].dtype, device=response_mask.device)
    # Boolean indexing walks rows in order, and each row's response tokens left to right.
    out[response_mask] = torch.cat([value.to(response_mask.device) for value in values])
    return out
