"""`rla bench train-options` on the real SmolLM2: the option suffixes do what they say, measured on a
small batch (the numbers of docs/design.md come from the full-size run)."""
from __future__ import annotations

import json

import pytest

from rla_bench import train_options
from rla_core.models.pretrained import SMOLLM2, ensure


@pytest.fixture(scope="module")
def smol() -> str:
    return str(ensure(SMOLLM2))


def test_responses_only_loss_equals_the_full_logits_loss(smol):
    """+resp computes the loss through the trainer's forward_logprobs (head at response positions only):
    on the same batch and weights its first loss is the model's own labels loss."""
    full = train_options._one(smol, "last_layers:1", batch=2, tokens=32, steps=1, threads=2)
    resp = train_options._one(smol, "last_layers:1+resp", batch=2, tokens=32, steps=1, threads=2)
    assert resp["losses"][0] == pytest.approx(full["losses"][0], rel=1e-5)
    assert resp["trainable_params"] == full["trainable_params"] < full["total_params"]


def test_stop_gradient_trains_the_same_weights_and_changes_the_loss_path_only(smol):
    exact = train_options._one(smol, "last_layers:1", batch=2, tokens=32, steps=2, threads=2)
    stopped = train_options._one(smol, "last_layers:1+sg", batch=2, tokens=32, steps=2, threads=2)
    assert stopped["trainable_params"] == exact["trainable_params"]
    assert stopped["losses"][0] == pytest.approx(exact["losses"][0], rel=1e-6)  # same forward
    assert stopped["losses"][1] != exact["losses"][1]  # the tied weight got only its head side


def test_unknown_suffix_is_reported_in_its_row(smol, tmp_path):
    out = tmp_path / "t.json"
    assert train_options.main(["--model", smol, "--batch", "1", "--tokens", "16", "--steps", "1",
                               "--options", "all+fp8", "--out", str(out)]) == 0
    row = json.loads(out.read_text())["rows"][0]
    assert row["option"] == "all+fp8" and "unknown suffix fp8" in row["error"][0]
