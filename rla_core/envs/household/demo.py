"""Oracle demonstrations: (observation, admissible, command, good) tuples for warm-starting models."""
from __future__ import annotations

import random
from typing import NamedTuple

from rla_core.envs.base import Episode


class DemoStep(NamedTuple):
    observation: str  # what the policy saw before choosing (the reset text, then each step's text)
    admissible: list[str]
    command: str
    good: bool  # oracle label: the command is the first step of some shortest plan


def demonstration(episode: Episode, rng: random.Random | None = None, noise: float = 0.0) -> list[DemoStep]:
    """Play `episode` from reset with the oracle; with probability `noise` per turn take a uniformly
    random admissible command instead (labelled by `is_progress`), then re-plan from the new state.

    Works for any `Episode`. With noise = 0 every step is good and the episode ends won.
    """
    rng = rng or random.Random(0)
    observation = episode.reset()
    steps: list[DemoStep] = []
    done = False
    while not done:
        admissible = episode.admissible_commands()
        plan = episode.oracle_plan()
        if not admissible or not plan:
            break
        command = rng.choice(admissible) if noise > 0 and rng.random() < noise else plan[0]
        good = command == plan[0] or episode.is_progress(command)
        steps.append(DemoStep(observation, admissible, command, good))
        outcome = episode.step(command)
        observation, done = outcome.observation, outcome.done
    return steps
