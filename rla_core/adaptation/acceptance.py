"""When to rewrite a task, and when to accept the rewrite (docs/design.md, "The formulas", Environment
adaptation)."""
from __future__ import annotations

from rla_core.schemas import Direction


def needs_rewrite(acc: float, alpha_low: float, alpha_high: float) -> Direction | None:
    """"harder" when acc ≥ α_high, "easier" when acc ≤ α_low, None inside the open band."""
    if acc >= alpha_high:
        return "harder"
    if acc <= alpha_low:
        return "easier"
    return None


def accept_candidate(
    acc_new: float, prev_acc: float, direction: Direction, alpha_low: float, alpha_high: float
) -> bool:
    """Accept q' iff acc(q') > 0 and
    harder: α_low ≤ acc(q') < prev_acc   (harder than its parent, yet not too hard), or
    easier: prev_acc < acc(q') ≤ α_high  (easier than its parent, yet not too easy).

    acc(q') = 0 is always rejected: no success means no evidence that q' is solvable by the policy.
    """
    if acc_new <= 0:
        return False
    if direction == "harder":
        return alpha_low <= acc_new < prev_acc
    if direction == "easier":
        return prev_acc < acc_new <= alpha_high
    raise ValueError(f"direction must be 'harder' or 'easier', got {direction!r}")
