"""The seam from the real rewriters into training: over many rewrite rounds and several seeds, starting from
train slots drawn as the seed stage draws them, no candidate plays a reserved (shipped held-out or dev) task,
while the same rounds without the reserved set do land on reserved content (the leak this guards against)."""
from __future__ import annotations

import random
from pathlib import Path

import pytest

from rla_core.adaptation.rewriters import RESERVED_ERROR, get_rewriter
from rla_core.bootstrap import generate_tasks
from rla_core.envs.coding.bootstrap import generate_mixed
from rla_core.envs.coding.problems import CODING
from rla_core.envs.base import get_environment
from rla_core.schemas import CriticFeedback, Task

DATA = Path(__file__).resolve().parents[3] / "data"
ROUNDS = 6


def _shipped(setting: str) -> list[Task]:
    return [Task.model_validate_json(line) for name in ("heldout.jsonl", "dev.jsonl")
            for line in (DATA / setting / name).read_text().splitlines() if line.strip()]


def _slots(setting: str, family, reserved: set[str], seed: int) -> list[Task]:
    rng = random.Random(f"{seed}/train")
    if setting == "coding":
        return generate_mixed(CODING, {}, [1, 2, 3, 2, 3], 120, rng, "slot", reserved)
    knobs = {"goal_type": ["put", "examine"], "closed": 0, "distractors": 1}
    return generate_tasks(family, knobs, 160, rng, "slot", reserved, 12)


def _rounds(setting: str, seed: int, reserved: frozenset[str]) -> tuple[int, int, int]:
    """(candidates made, candidates playing reserved content, attempts refused as reserved)."""
    family = CODING if setting == "coding" else get_environment(setting)
    all_reserved = {family.content_hash(t.spec) for t in _shipped(setting)}
    active = _slots(setting, family, all_reserved, seed)
    rewriter, rng = get_rewriter("procedural"), random.Random(seed)
    made = leaked = refused = 0
    for round_index in range(ROUNDS):
        for index, task in enumerate(active):
            direction = "easier" if (index + round_index) % 2 == 0 else "harder"
            candidate, log = rewriter.rewrite(task, direction, CriticFeedback(), 3, rng, family, horizon=12,
                                              reserved=reserved)
            refused += sum(a.reserved for a in log)
            assert all(a.error == RESERVED_ERROR for a in log if a.reserved)
            if candidate is not None:
                made += 1
                leaked += family.content_hash(candidate.spec) in all_reserved
                active[index] = candidate
    return made, leaked, refused


@pytest.mark.parametrize("setting", ["coding", "household"])
def test_no_reserved_content_reachable_through_rewrites(setting):
    family = CODING if setting == "coding" else get_environment(setting)
    reserved = frozenset(family.content_hash(t.spec) for t in _shipped(setting))
    for seed in (0, 1, 2):
        made, leaked, refused = _rounds(setting, seed, reserved)
        assert made > 100 and leaked == 0
        if setting == "coding":  # one operation dropped is often a held-out pipeline: refusals do happen
            assert refused > 0


def test_without_the_reserved_set_coding_rewrites_land_on_held_out_problems():
    """What the refusal prevents: the same rounds with no reserved set reach held-out/dev pipelines."""
    made, leaked, refused = _rounds("coding", 0, frozenset())
    assert refused == 0 and leaked > 0
