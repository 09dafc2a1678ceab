"""Rewrite triggers and the acceptance rule at their boundaries (docs/design.md, "The formulas",
Environment adaptation)."""
from __future__ import annotations

import pytest

from rla_core.adaptation.acceptance import accept_candidate, needs_rewrite

LOW, HIGH = 0.2, 0.8


@pytest.mark.parametrize(
    ("acc", "expected"),
    [(1.0, "harder"), (0.8, "harder"), (0.79, None), (0.5, None), (0.21, None), (0.2, "easier"), (0.0, "easier")],
)
def test_needs_rewrite(acc, expected):
    assert needs_rewrite(acc, LOW, HIGH) == expected


@pytest.mark.parametrize(
    ("acc_new", "prev_acc", "expected"),
    [
        (0.2, 1.0, True),  # α_low is included
        (0.19, 1.0, False),  # too hard
        (0.5, 0.9, True),
        (0.875, 0.9, True),  # above α_high but still harder than its parent
        (0.9, 0.9, False),  # equal to prev_acc is not harder
        (1.0, 0.9, False),  # easier, not harder
        (0.0, 1.0, False),  # acc = 0 never accepted
    ],
)
def test_accept_harder(acc_new, prev_acc, expected):
    assert accept_candidate(acc_new, prev_acc, "harder", LOW, HIGH) is expected


@pytest.mark.parametrize(
    ("acc_new", "prev_acc", "expected"),
    [
        (0.8, 0.0, True),  # α_high is included
        (0.81, 0.0, False),  # too easy
        (0.125, 0.0, True),  # below α_low but still easier than its parent
        (0.1, 0.1, False),  # equal to prev_acc is not easier
        (0.05, 0.1, False),  # harder, not easier
        (0.0, 0.0, False),  # acc = 0 never accepted
    ],
)
def test_accept_easier(acc_new, prev_acc, expected):
    assert accept_candidate(acc_new, prev_acc, "easier", LOW, HIGH) is expected


def test_acc_zero_rejected_even_when_band_allows_it():
    assert accept_candidate(0.0, 0.5, "harder", 0.0, HIGH) is False
    assert accept_candidate(0.01, 0.5, "harder", 0.0, HIGH) is True


def test_bad_direction_raises():
    with pytest.raises(ValueError, match="harder"):
        accept_candidate(0.5, 0.9, "sideways", LOW, HIGH)  # type: ignore[arg-type]
