"""Attention for one new token over a KV cache, as two small matmuls (`rollout.decode_attention: matmul`).

Measured on SmolLM2-135M (9 query heads sharing 3 key/value heads) on a 2-core AMD EPYC in bfloat16:
PyTorch's CPU `scaled_dot_product_attention` took 4.4 ms per layer for one query token of 64 rows over
140 cached positions, 60 % of a 231 ms decode step, for 10 MFLOP of work. Here the query heads that
share a key/value head are stacked into one [G, D] matrix per (row, kv head), so the scores are one
batched matmul against the cached keys without repeating them, and the weighted sum a second one.

The engine keeps the cache in float32 for this path (`PreallocatedLayer(store_dtype=float32)`): the
scores, the softmax and the weighted sum run in float32 whatever the model's dtype, so a bfloat16
model's attention is computed more exactly than by the bfloat16 kernel it replaces, but not identically:
samples change (tests/rla_core/rollout/test_decode_attention.py measures by how much).

Every call with more than one query position (the prefill, any training forward) goes to transformers'
own `sdpa` function with the mask `sdpa` builds, so those are unchanged to the bit.

With n > 1 samples per prompt the cache does not copy the prompt's keys and values n times: it hands this
function a `SharedPrefix`, the prompt part once per prompt ([B, Hkv, P, D]) and the generated part per
sample ([B·n, Hkv, t, D]). The n samples' queries of a prompt are stacked against its prompt keys in one
matmul; the softmax runs over both parts together, so the result is the same attention, summed in another
order (float rounding apart).
"""
from __future__ import annotations

import contextlib
from dataclasses import dataclass
from typing import Any, Iterator

import torch

NAME = "rla_decode_matmul"
_registered = False


@dataclass(frozen=True)
class SharedPrefix:
    """Keys (or values) of B prompts × n samples: the prompt's positions once per prompt, then each
    sample's own generated positions. Row b·n + j of the batch is sample j of prompt b.

    `rows` (None: all B·n): the decode dropped finished samples, and `own` holds only the rows at these
    places of the B·n. The prompt part is still computed over all B·n places (the dropped ones as zeros),
    so every kept row's prompt sums come out of the same matmul shapes, bit for bit."""

    prefix: torch.Tensor  # [B, Hkv, P, D]
    own: torch.Tensor  # [B·n, Hkv, t, D], or [len(rows), Hkv, t, D]
    repeats: int
    rows: torch.Tensor | None = None

    def materialize(self) -> torch.Tensor:
        """The [rows, Hkv, P + t, D] tensor that an unshared cache would hold."""
        prefix = self.prefix.repeat_interleave(self.repeats, dim=0)
        if self.rows is not None:
            prefix = prefix.index_select(0, self.rows)
        return torch.cat([prefix, self.own], dim=2)


def _on_prompts(x: torch.Tensor, prefix: torch.Tensor, repeats: int, rows: torch.Tensor | None) -> torch.Tensor:
    """x [rows, Hkv, G, X] @ prefix [B, Hkv, X, Y] with each row against its prompt, the n samples of a
    prompt stacked into one matmul; dropped rows (`rows` given) take part as zeros and are cut after."""
    if rows is not None:
        x = x.new_zeros((prefix.shape[0] * repeats, *x.shape[1:])).index_copy_(0, rows, x)
    out = _by_sample(torch.matmul(_by_prompt(x, repeats), prefix), repeats)
    return out if rows is None else out.index_select(0, rows)


def _by_prompt(x: torch.Tensor, repeats: int) -> torch.Tensor:
    """[B·n, Hkv, G, X] -> [B, Hkv, n·G, X]: the n samples' rows of a prompt stacked per kv head."""
    rows, kv_heads, group, last = x.shape
    return x.reshape(rows // repeats, repeats, kv_heads, group, last).transpose(1, 2).reshape(
        rows // repeats, kv_heads, repeats * group, last)


def _by_sample(x: torch.Tensor, repeats: int) -> torch.Tensor:
    """The inverse of `_by_prompt`."""
    prompts, kv_heads, stacked, last = x.shape
    group = stacked // repeats
    return x.reshape(prompts, kv_heads, repeats, group, last).transpose(1, 2).reshape(
        prompts * repeats, kv_heads, group, last)


def _shared_scores_and_sum(grouped: torch.Tensor, key: SharedPrefix, value: SharedPrefix, mask: torch.Tensor | None,
                           scale: float) -> torch.Tensor:
    """Grouped queries [B·n (or the kept rows), Hkv, G, D] over a shared prompt part and per-sample
    generated part."""
    n, prompt_length = key.repeats, key.prefix.shape[2]
    prefix_scores = _on_prompts(grouped, key.prefix.transpose(-1, -2), n, key.rows)
    own_scores = torch.matmul(grouped, key.own.transpose(-1, -2))
    scores = torch.cat([prefix_scores, own_scores], dim=-1).float() * scale  # [B·n, Hkv, G, P + t]
    probs = _masked_softmax(scores, mask).to(value.own.dtype)
    prefix_probs, own_probs = probs[..., :prompt_length], probs[..., prompt_length:]
    prefix_out = _on_prompts(prefix_probs, value.prefix, n, key.rows)
    return prefix_out + torch.matmul(own_probs, value.own)


def _masked_softmax(scores: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
    if mask is not None:
        if mask.dtype == torch.bool:
            scores = scores.masked_fill(~mask, float("-inf"))
        else:  # an additive float mask
            scores = scores + mask.float()
    return torch.softmax(scores, dim=-1)


def decode_attention(module: Any, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                     attention_mask: torch.Tensor | None, dropout: float = 0.0, scaling: float | None = None,
                     **kwargs: Any) -> tuple[torch.Tensor, None]:
    """transformers' attention-function signature: query [B, H, q, D], key/value [B, Hkv, T, D], boolean
    mask [B, 1, q, T] (True = attend) or None; returns ([B, q, H, D], None). key/value may be
    `SharedPrefix`es (a cache that shares the prompt among n samples)."""
    if query.shape[2] != 1 or module.training:
        from transformers.integrations.sdpa_attention import sdpa_attention_forward

        if isinstance(key, SharedPrefix):
            key, value = key.materialize(), value.materialize()
        return sdpa_attention_forward(module, query, key, value, attention_mask, dropout=dropout, scaling=scaling,
                                      **kwargs)
    batch, heads, _, dim = query.shape
    shared = isinstance(key, SharedPrefix)
    kv_heads = (key.prefix if shared else key).shape[1]
    if heads % kv_heads:
        raise ValueError(f"{heads} query heads cannot share {kv_heads} key/value heads")
    scale = dim ** -0.5 if scaling is None else scaling
    # query head h reads key/value head h // G (transformers' repeat_kv): stack the G heads of a kv head
    grouped = query.reshape(batch, kv_heads, heads // kv_heads, dim).to((key.prefix if shared else key).dtype)
    if shared:
        out = _shared_scores_and_sum(grouped, key, value, attention_mask, scale)
    else:
        scores = torch.matmul(grouped, key.transpose(-1, -2)).float() * scale  # [B, Hkv, G, T]
        probs = _masked_softmax(scores, attention_mask).to(value.dtype)
        out = torch.matmul(probs, value)  # [B, Hkv, G, D]
    return out.reshape(batch, 1, heads, dim).to(query.dtype), None


def register() -> str:
    """Make NAME a transformers attention implementation whose masks are built as for `sdpa`."""
    global _registered
    if not _registered:
        from transformers import AttentionInterface
        from transformers.masking_utils import AttentionMaskInterface, sdpa_mask

        AttentionInterface.register(NAME, decode_attention)
        AttentionMaskInterface.register(NAME, sdpa_mask)
        _registered = True
    return NAME


def supported(model: Any) -> bool:
    """Whether `model` picks its attention function by name (transformers' attention interface)."""
    config = getattr(model, "config", None)
    return config is not None and getattr(config, "_attn_implementation", None) in ("sdpa", NAME)


@contextlib.contextmanager
def using(model: Any) -> Iterator[None]:
    """Within the block, `model` attends with `decode_attention` (its prefill with sdpa); restored after."""
    config = model.config
    before = config._attn_implementation
    config._attn_implementation = register()
    try:
        yield
    finally:
        config._attn_implementation = before
