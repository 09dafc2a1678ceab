"""Intervals of measured rates."""
from __future__ import annotations

import math

Z = 1.959964  # two-sided 95 % normal quantile


def wilson(successes: int, n: int) -> tuple[float, float]:
    """The 95 % Wilson score interval of a success rate (0, 0 for n = 0)."""
    if n == 0:
        return 0.0, 0.0
    p = successes / n
    centre = (p + Z * Z / (2 * n)) / (1 + Z * Z / n)
    half = Z * math.sqrt(p * (1 - p) / n + Z * Z / (4 * n * n)) / (1 + Z * Z / n)
    low = 0.0 if successes == 0 else max(0.0, centre - half)  # exact at the ends, not 1e-17 off
    high = 1.0 if successes == n else min(1.0, centre + half)
    return low, high
