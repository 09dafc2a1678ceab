"""Clipped policy loss, k3 KL, log-prob gather and SFT loss, against hand-computed numbers."""
from __future__ import annotations

import math

import pytest
import torch

from rla_core.losses import clipped_policy_loss, sequence_logprobs, sft_loss

LN2 = math.log(2.0)


def _ratios(ratios: list[list[float]]) -> tuple[torch.Tensor, torch.Tensor]:
    """logprobs (leaf, requires grad) and old_logprobs such that exp(logπ − logπ_old) = ratios."""
    old = torch.full((len(ratios), len(ratios[0])), -1.0)
    logprobs = (old + torch.log(torch.tensor(ratios))).requires_grad_(True)
    return logprobs, old


def test_ratio_one_gives_minus_advantage():
    logprobs = torch.randn(2, 4)
    mask = torch.tensor([[0, 1, 1, 1], [0, 0, 1, 1]])
    loss, metrics = clipped_policy_loss(
        logprobs, logprobs.clone(), logprobs.clone(), torch.tensor([0.5, -2.0]), mask, clip_eps=0.2, kl_beta=0.5
    )
    assert loss.tolist() == pytest.approx([-0.5, 2.0])
    assert metrics["ratio_mean"].item() == pytest.approx(1.0)
    assert metrics["kl"].item() == pytest.approx(0.0)
    assert metrics["clip_fraction"].item() == 0.0


def test_clipping_positive_advantage():
    # Â = 1, ε = 0.2: ρ = 1.5 → min(1.5, 1.2) = 1.2 (clipped); ρ = 0.5 → min(0.5, 0.8) = 0.5
    logprobs, old = _ratios([[1.5, 0.5]])
    loss, metrics = clipped_policy_loss(
        logprobs, old, old, torch.tensor([1.0]), torch.ones(1, 2), clip_eps=0.2, kl_beta=0.0
    )
    assert loss.item() == pytest.approx(-(1.2 + 0.5) / 2)
    assert metrics["clip_fraction"].item() == pytest.approx(0.5)
    loss.sum().backward()
    # clipped token: no gradient; unclipped: d/dlogπ of −ρÂ/n = −ρÂ/n = −0.5/2
    assert logprobs.grad[0].tolist() == pytest.approx([0.0, -0.25])


def test_clipping_negative_advantage():
    # Â = −1: ρ = 1.5 → min(−1.5, −1.2) = −1.5 (unclipped); ρ = 0.5 → min(−0.5, −0.8) = −0.8 (clipped)
    logprobs, old = _ratios([[1.5, 0.5]])
    loss, metrics = clipped_policy_loss(
        logprobs, old, old, torch.tensor([-1.0]), torch.ones(1, 2), clip_eps=0.2, kl_beta=0.0
    )
    assert loss.item() == pytest.approx((1.5 + 0.8) / 2)
    assert metrics["clip_fraction"].item() == pytest.approx(0.5)
    assert metrics["ratio_mean"].item() == pytest.approx(1.0)
    loss.sum().backward()
    assert logprobs.grad[0].tolist() == pytest.approx([1.5 / 2, 0.0])


def test_inside_clip_range_is_unclipped():
    logprobs, old = _ratios([[1.1, 0.9], [1.1, 0.9]])
    loss, metrics = clipped_policy_loss(
        logprobs, old, old, torch.tensor([2.0, -2.0]), torch.ones(2, 2), clip_eps=0.2, kl_beta=0.0
    )
    assert loss.tolist() == pytest.approx([-2.0, 2.0])
    assert metrics["clip_fraction"].item() == 0.0
    assert metrics["pg_loss"].item() == pytest.approx(0.0)


def test_k3_kl_value():
    # d = +ln2: k3 = 1/2 − 1 + ln2;  d = −ln2: k3 = 2 − 1 − ln2;  mean = 1/4
    ref = torch.zeros(1, 2)
    logprobs = torch.tensor([[LN2, -LN2]])
    loss, metrics = clipped_policy_loss(
        logprobs, logprobs.clone(), ref, torch.tensor([0.0]), torch.ones(1, 2), clip_eps=0.2, kl_beta=0.1
    )
    assert metrics["kl"].item() == pytest.approx(0.25)
    assert loss.item() == pytest.approx(0.1 * 0.25)
    single, metrics = clipped_policy_loss(
        logprobs[:, :1], logprobs[:, :1], ref[:, :1], torch.tensor([0.0]), torch.ones(1, 1), clip_eps=0.2, kl_beta=1.0
    )
    assert single.item() == pytest.approx(LN2 - 0.5)
    assert metrics["kl"].item() == pytest.approx(0.1931472, abs=1e-6)


def test_mask_with_different_lengths_ignores_padding():
    nan, big = float("nan"), 1e4
    # sample 0: prompt at t=0, response t=1..3 with ρ = 1.1, 0.9, 1.0, Â = 1 → −(1.1+0.9+1.0)/3 = −1
    # sample 1: prompt t=0..1, response t=2 with ρ = 1.1, Â = 2, padding t=3 → −2.2
    mask = torch.tensor([[0, 1, 1, 1], [0, 0, 1, 0]])
    old = torch.tensor([[nan, -1.0, -1.0, -1.0], [nan, nan, -1.0, nan]])
    logprobs = torch.tensor(
        [[big, -1.0 + math.log(1.1), -1.0 + math.log(0.9), -1.0], [big, big, -1.0 + math.log(1.1), big]],
        requires_grad=True,
    )
    ref = torch.tensor([[nan, -1.0, -1.0, -1.0], [nan, nan, -1.0 + math.log(1.1), nan]])
    loss, metrics = clipped_policy_loss(logprobs, old, ref, torch.tensor([1.0, 2.0]), mask, clip_eps=0.2, kl_beta=0.0)
    assert loss.tolist() == pytest.approx([-1.0, -2.2])
    # per-sample token means (1.1 + 0.9 + 1.0) / 3 = 1.0 and 1.1, then their mean over samples
    assert metrics["ratio_mean"].item() == pytest.approx((1.0 + 1.1) / 2)
    loss.sum().backward()
    assert torch.isfinite(logprobs.grad).all()
    assert (logprobs.grad[mask == 0] == 0).all()


def test_empty_response_gives_zero_loss():
    logprobs = torch.zeros(1, 3)
    loss, _ = clipped_policy_loss(logprobs, logprobs, logprobs, torch.tensor([3.0]), torch.zeros(1, 3), 0.2, 0.1)
    assert loss.item() == 0.0


def test_batch_split_invariance_of_sum_over_minibatch():
    torch.manual_seed(0)
    batch, length = 6, 5
    params = torch.randn(batch, length, requires_grad=True)
    old = torch.randn(batch, length)
    ref = torch.randn(batch, length)
    adv = torch.randn(batch)
    mask = (torch.rand(batch, length) > 0.3).long()
    mask[:, 0] = 0
    mask[:, 1] = 1

    def per_sample(rows: slice) -> torch.Tensor:
        loss, _ = clipped_policy_loss(params[rows], old[rows], ref[rows], adv[rows], mask[rows], 0.2, 0.05)
        return loss

    per_sample(slice(0, batch)).mean().backward()
    full = params.grad.clone()
    params.grad = None
    for rows in (slice(0, 1), slice(1, 3), slice(3, 6)):  # micro-batches of 1, 2, 3
        (per_sample(rows).sum() / batch).backward()
    assert torch.allclose(params.grad, full, atol=1e-7)
    assert full.abs().sum() > 0


def test_sequence_logprobs_shift_and_sft_loss():
    # pos 0 logits [0, 0] predict input_ids[1] = 1: log 1/2; pos 1 logits [ln3, 0] predict input_ids[2] = 0:
    # log 3/4; pos 2 logits are unused (nothing follows).
    logits = torch.tensor([[[0.0, 0.0], [math.log(3.0), 0.0], [5.0, -5.0]]])
    input_ids = torch.tensor([[1, 1, 0]])
    mask = torch.tensor([[0, 1, 1]])
    out = sequence_logprobs(logits, input_ids, mask)
    assert out[0].tolist() == pytest.approx([0.0, math.log(0.5), math.log(0.75)])
    only_last = sequence_logprobs(logits, input_ids, torch.tensor([[0, 0, 1]]))
    assert only_last[0].tolist() == pytest.approx([0.0, 0.0, math.log(0.75)])
    assert sft_loss(logits, input_ids, mask).item() == pytest.approx(-(math.log(0.5) + math.log(0.75)) / 2)
    with pytest.raises(ValueError):
        sequence_logprobs(logits, input_ids, torch.tensor([[1, 1, 1]]))


def test_sequence_logprobs_matches_log_softmax_and_upcasts_bf16():
    torch.manual_seed(1)
    logits = torch.randn(3, 6, 11)
    input_ids = torch.randint(0, 11, (3, 6))
    mask = torch.ones(3, 6, dtype=torch.long)
    mask[:, 0] = 0
    out = sequence_logprobs(logits, input_ids, mask)
    reference = torch.log_softmax(logits, dim=-1)[:, :-1].gather(-1, input_ids[:, 1:, None]).squeeze(-1)
    assert torch.allclose(out[:, 1:], reference, atol=1e-6)
    assert sequence_logprobs(logits.bfloat16(), input_ids, mask).dtype == torch.float32


def test_kl_clamp_bounds_k3_per_token_and_stops_its_gradient():
    """d = −6 (a tail token whose probability fell 400-fold): k3 = e^6 − 1 − 6 ≈ 396.4, capped at 10 with no
    gradient; d = −ln2 (k3 = 1 − ln2 ≈ 0.307) is below the cap and keeps its gradient 1 − e^{ln2} = −1."""
    ref = torch.zeros(1, 2)
    logprobs = torch.tensor([[-6.0, -LN2]], requires_grad=True)
    free, free_metrics = clipped_policy_loss(logprobs, logprobs.detach(), ref, torch.tensor([0.0]), torch.ones(1, 2),
                                             clip_eps=0.2, kl_beta=1.0)
    assert free_metrics["kl"].item() == pytest.approx((math.exp(6) - 7 + 1 - LN2) / 2)
    loss, metrics = clipped_policy_loss(logprobs, logprobs.detach(), ref, torch.tensor([0.0]), torch.ones(1, 2),
                                        clip_eps=0.2, kl_beta=1.0, kl_clamp=10.0)
    assert metrics["kl"].item() == pytest.approx((10.0 + 1 - LN2) / 2)
    loss.sum().backward()
    # d/dlogπ of (1/n)·k3 = (1 − e^{−d})/n: 0 for the capped token, (1 − 2)/2 for the other
    assert logprobs.grad[0].tolist() == pytest.approx([0.0, -0.5])
