"""`rla bench judge-warmstart`: the judge's warm-start length (coding: and test form), scored on the dev judge
benchmark (rla_bench/warmstart.py)."""
from __future__ import annotations

from rla_bench.warmstart import main_for


def main(argv: list[str] | None = None) -> int:
    return main_for("judge", argv)
