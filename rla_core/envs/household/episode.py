"""One playable household episode (the `Episode` protocol of rla_core.envs.base)."""
from __future__ import annotations

from rla_core.envs.base import StepOutcome
from rla_core.envs.household.oracle import Oracle
from rla_core.envs.household.world import NOTHING, Action, Layout, State

OVER = "The episode is over."


class HouseholdEpisode:
    """An episode of one spec. `step` counts every call (inadmissible ones too) until the step limit.

    The oracle's distance cache survives `reset` (the layout does not change) and may be shared by
    all episodes of one spec (`HouseholdFamily.make` does so).
    """

    def __init__(self, layout: Layout, oracle: Oracle | None = None) -> None:
        self.layout = layout
        self.goal = layout.goal_text()
        self.oracle = oracle or Oracle(layout)
        self.state: State = layout.initial_state()
        self.steps = 0
        self.won = False
        self._admissible: dict[str, Action] | None = None

    @property
    def done(self) -> bool:
        return self.won or self.steps >= self.layout.step_limit

    def reset(self) -> str:
        self.state = self.layout.initial_state()
        self.steps, self.won, self._admissible = 0, False, None
        return self.layout.look(self.state)

    def _actions(self) -> dict[str, Action]:
        if self._admissible is None:
            self._admissible = self.layout.admissible(self.state)
        return self._admissible

    def admissible_commands(self) -> list[str]:
        """Valid commands now: useful ones sorted alphabetically, then examine/inventory/look."""
        return [] if self.done else list(self._actions())

    def step(self, command: str) -> StepOutcome:
        if self.done:
            return StepOutcome(OVER, True, self.won)
        self.steps += 1
        action = self._actions().get(" ".join(command.lower().split()))
        if action is None:
            observation = NOTHING
        else:
            observation = self.layout.apply(self.state, action)
            self._admissible = None
            self.won = self.layout.is_won(self.state)
        return StepOutcome(observation, self.done, self.won)

    def is_progress(self, command: str) -> bool:
        """Oracle label: dist(next) = dist(now) − 1; inadmissible commands and finished episodes are False."""
        if self.done:
            return False
        action = self._actions().get(" ".join(command.lower().split()))
        return action is not None and self.oracle.is_progress(self.state, action)

    def oracle_plan(self) -> list[str]:
        """A shortest command list to the goal from the current state ([] when won)."""
        return [] if self.won else self.oracle.plan(self.state)

    def distance(self) -> float:
        """Oracle plan length from the current state (∞ if unreachable)."""
        return 0 if self.won else self.oracle.distance(self.state)
