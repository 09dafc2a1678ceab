"""Supervised warm-start on a tiny copy task."""
from __future__ import annotations

import random
from dataclasses import dataclass

import torch

from rla_core.config import ModelSpec
from rla_core.models.factory import build_model
from rla_core.models.tokenizer import train_tokenizer
from rla_core.training.sft import response_nll, supervised_finetune

SEPARATOR = 5


@dataclass
class Pair:
    prompt_ids: list[int]
    response_ids: list[int]


def copy_pairs(count: int, seed: int = 0) -> list[Pair]:
    """prompt = 4 symbols + separator, response = the same 4 symbols."""
    rng = random.Random(seed)
    pairs = []
    for _ in range(count):
        symbols = [rng.randrange(10, 18) for _ in range(4)]
        pairs.append(Pair(symbols + [SEPARATOR], list(symbols)))
    return pairs


def tiny_model(seed: int = 0):
    tokenizer = train_tokenizer(["copy these symbols"] * 5, vocab_size=280)
    spec = ModelSpec(hidden_size=32, num_layers=2, num_heads=2, intermediate_size=64, max_positions=16)
    return build_model(spec, tokenizer, seed=seed)


def test_loss_decreases_on_copy_task(capsys):
    model = tiny_model()
    pairs = copy_pairs(64)
    before = response_nll(model, pairs)
    metrics = supervised_finetune(model, pairs, steps=40, batch_size=16, lr=5e-3, seed=0, desc="copy-sft")
    after = response_nll(model, pairs)
    assert after < before - 2.0, (before, after)
    assert metrics["loss_last"] < metrics["loss_first"]
    assert metrics["steps"] == 40 and metrics["samples"] == 64 and metrics["dropped_too_long"] == 0
    assert "copy-sft" in capsys.readouterr().err  # the tqdm progress bar


def test_response_nll_scores_response_tokens_only():
    """Hand loop: NLL = −mean over response positions t of log softmax(logits[t−1])[ids[t]]."""
    model = tiny_model()
    pairs = [Pair([10, 11, SEPARATOR], [12, 13]), Pair([14, SEPARATOR], [15, 16, 17])]
    total, count = 0.0, 0
    with torch.no_grad():
        for pair in pairs:
            ids = pair.prompt_ids + pair.response_ids
            logprobs = model(input_ids=torch.tensor([ids])).logits[0].log_softmax(-1)
            for t in range(len(pair.prompt_ids), len(ids)):
                total -= float(logprobs[t - 1, ids[t]])
                count += 1
    assert count == 5
    assert abs(response_nll(model, pairs, micro_batch_size=2) - total / count) < 1e-5


def test_micro_batching_does_not_change_the_update():
    pairs = copy_pairs(8, seed=1) + [Pair([10, SEPARATOR], [11])]  # lengths differ
    params = []
    for micro in (9, 2):
        model = tiny_model(seed=3)
        supervised_finetune(
            model, pairs, steps=1, batch_size=9, lr=1e-4, micro_batch_size=micro, progress=False
        )
        params.append(torch.cat([p.detach().flatten() for p in model.parameters()]))
    assert torch.allclose(params[0], params[1], rtol=0, atol=1e-6)


def test_too_long_pairs_are_dropped_and_counted():
    model = tiny_model()
    pairs = copy_pairs(4) + [Pair([10] * 12, [11] * 5)]  # 17 > 16 positions
    metrics = supervised_finetune(model, pairs, steps=2, batch_size=4, lr=1e-3, progress=False)
    assert metrics["dropped_too_long"] == 1 and metrics["samples"] == 4 and metrics["steps"] == 2
