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
"""
from __future__ import annotations

import contextlib
from typing import Any, Iterator

import torch

NAME = "rla_decode_matmul"
_registered = False


def decode_attention(module: Any, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                     attention_mask: torch.Tensor | None, dropout: float = 0.0, scaling: float | None = None,
                     **kwargs: Any) -> tuple[torch.Tensor, None]:
    """transformers' attention-function signature: query [B, H, q, D], key/value [B, Hkv, T, D], boolean
    mask [B, 1, q, T] (True = attend) or None; returns ([B, q, H, D], None)."""
    if query.shape[2] != 1 or module.training:
        from transformers.integrations.sdpa_attention import sdpa_attention_forward

        return sdpa_attention_forward(module, query, key, value, attention_mask, dropout=dropout, scaling=scaling,
                                      **kwargs)
    batch, heads, _, dim = query.shape
    kv_heads = key.shape[1]
    if heads % kv_heads:
        raise ValueError(f"{heads} query heads cannot share {kv_heads} key/value heads")
    scale = dim ** -0.5 if scaling is None else scaling
    # query head h reads key/value head h // G (transformers' repeat_kv): stack the G heads of a kv head
    grouped = query.reshape(batch, kv_heads, heads // kv_heads, dim).to(key.dtype)
    scores = torch.matmul(grouped, key.transpose(-1, -2)).float() * scale  # [B, Hkv, G, T]
    if attention_mask is not None:
        if attention_mask.dtype == torch.bool:
            scores = scores.masked_fill(~attention_mask, float("-inf"))
        else:  # an additive float mask
            scores = scores + attention_mask.float()
    probs = torch.softmax(scores, dim=-1).to(value.dtype)
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
