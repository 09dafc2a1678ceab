"""Losses, pure torch: the clipped policy-gradient loss with a k3 KL penalty (docs/design.md,
"The formulas", Loss), the per-token log-prob gather it needs, and the SFT loss of the bootstrap
warm-start (docs/design.md, "The loop", Warm-start).

Shift convention (used by every function here): tensors are [B, T] aligned with `input_ids`
positions. Position t holds log p(input_ids[:, t] | input_ids[:, :t]), i.e. it is computed from the
logits at position t − 1. Position 0 has no prediction and is always 0, so `response_mask[:, 0]` must
be 0 (a prompt has at least one token). `response_mask` is 1 exactly on the generated response tokens.

Gradient accumulation: `clipped_policy_loss` returns the PER-SAMPLE loss [B]. A trainer that splits a
minibatch of size M into micro-batches must backpropagate `per_sample.sum() / M` for each micro-batch;
the accumulated gradient then equals that of `per_sample.mean()` over the whole minibatch, whatever the
split — the loss is scaled exactly once.
"""
from __future__ import annotations

import torch
from torch import Tensor


def _masked_token_sums(values: Tensor, mask: Tensor) -> Tensor:
    """Σ_t values[b, t] over response tokens, [B]. `where` (not multiply) so that inf/nan in padding
    positions cannot leak into the sum."""
    return torch.where(mask, values, torch.zeros_like(values)).sum(dim=-1)


def clipped_policy_loss(
    logprobs: Tensor,
    old_logprobs: Tensor,
    ref_logprobs: Tensor,
    advantages: Tensor,
    response_mask: Tensor,
    clip_eps: float,
    kl_beta: float,
    kl_clamp: float | None = None,
) -> tuple[Tensor, dict[str, Tensor]]:
    """Per-sample clipped surrogate + k3 KL: loss_b = L_pg,b + L_kl,b, shape [B].

    ρ_t = exp(log π_θ − log π_old);  L_pg = −(1/n) Σ_t min(ρ_t Â, clip(ρ_t, 1−ε, 1+ε) Â);
    d_t = log π_θ − log π_ref;  k3_t = exp(−d_t) − 1 + d_t;  L_kl = β (1/n) Σ_t min(k3_t, kl_clamp);
    n = number of response tokens of the sample (a sample with n = 0 gets loss 0).

    `kl_clamp` bounds k3 per token (no gradient above it). k3 grows like exp(−d): a token sampled far
    in the tail (log-prob −12 at temperature 1) leaves the following tokens out of distribution, one
    update can move them by several nats, and a single such token then sets the whole mini-batch's
    gradient. Bounding the estimator is common practice (verl's "low_var_kl" clamps it at 10).

    Args: logprobs/old_logprobs/ref_logprobs [B, T] float (per-token log-probs of the response
    tokens; only logprobs carries gradient), advantages [B], response_mask [B, T] (1 on response
    tokens). Metrics (detached scalars), each a mean over samples of a per-sample token mean (like the
    loss, so a sample-weighted average over micro-batches or ranks gives the mini-batch value exactly):
    pg_loss (L_pg), kl ((1/n) Σ_t k3_t), clip_fraction (share of the sample's tokens where the clipped
    term is strictly the smaller, i.e. the gradient is cut), ratio_mean ((1/n) Σ_t ρ_t).
    """
    mask = response_mask.bool()
    old_logprobs = old_logprobs.detach()
    ref_logprobs = ref_logprobs.detach()
    n_tokens = mask.sum(dim=-1).clamp(min=1).to(logprobs.dtype)
    adv = advantages.detach().to(logprobs.dtype).unsqueeze(-1)  # [B, 1]

    # Padding may hold arbitrary numbers; zero the log-ratio there so exp cannot overflow.
    log_ratio = torch.where(mask, logprobs - old_logprobs, torch.zeros_like(logprobs))
    ratio = torch.exp(log_ratio)
    unclipped = ratio * adv
    clipped = torch.clamp(ratio, 1.0 - clip_eps, 1.0 + clip_eps) * adv
    surrogate = torch.minimum(unclipped, clipped)
    pg_loss = -_masked_token_sums(surrogate, mask) / n_tokens

    ref_diff = torch.where(mask, logprobs - ref_logprobs, torch.zeros_like(logprobs))
    k3 = torch.exp(-ref_diff) - 1.0 + ref_diff
    if kl_clamp is not None:
        k3 = torch.clamp(k3, max=kl_clamp)
    kl = _masked_token_sums(k3, mask) / n_tokens
    per_sample = pg_loss + kl_beta * kl

    with torch.no_grad():
        metrics = {
            "pg_loss": pg_loss.mean(),
            "kl": kl.mean(),
            "clip_fraction": (_masked_token_sums((clipped < unclipped).to(logprobs.dtype), mask) / n_tokens).mean(),
            "ratio_mean": (_masked_token_sums(ratio, mask) / n_tokens).mean(),
        }
    return per_sample, {name: value.detach() for name, value in metrics.items()}


def sequence_logprobs(logits: Tensor, input_ids: Tensor, response_mask: Tensor) -> Tensor:
    """Per-token log-probs of the observed next tokens, [B, T], aligned with `input_ids`.

    out[b, t] = log_softmax(logits[b, t−1])[input_ids[b, t]] where response_mask[b, t] = 1, else 0
    (see the module docstring for the shift). logits [B, T, V], input_ids [B, T], response_mask [B, T].
    Computed as gathered logit − logsumexp, in float32 at least, without materialising a [B, T, V]
    log-softmax.
    """
    mask = response_mask.bool()
    if mask[:, 0].any():
        raise ValueError("response_mask[:, 0] must be 0: position 0 has no preceding token to predict it")
    logits = logits[:, :-1]
    if logits.dtype in (torch.float16, torch.bfloat16):
        logits = logits.float()
    targets = input_ids[:, 1:].unsqueeze(-1)
    picked = torch.gather(logits, dim=-1, index=targets).squeeze(-1) - torch.logsumexp(logits, dim=-1)
    out = torch.zeros(input_ids.shape, dtype=picked.dtype, device=picked.device)
    out[:, 1:] = picked
    return torch.where(mask, out, torch.zeros_like(out))


def sft_loss(logits: Tensor, input_ids: Tensor, response_mask: Tensor) -> Tensor:
    """Mean token negative log-likelihood over all response tokens of the batch (a scalar).

    loss = −Σ_{b,t} mask·log p(y_bt) / Σ_{b,t} mask, with the shift of `sequence_logprobs`.
    """
    token_logprobs = sequence_logprobs(logits, input_ids, response_mask)
    count = response_mask.bool().sum().clamp(min=1)
    return -token_logprobs.sum() / count
