"""`rla bench policy-warmstart`: the policy's warm-start length, scored on the dev tasks as every evaluation
scores them (rla_bench/warmstart.py)."""
from __future__ import annotations

from rla_bench.warmstart import main_for


def main(argv: list[str] | None = None) -> int:
    return main_for("policy", argv)
