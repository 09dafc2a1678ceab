"""One TextWorld game played through the engine (the `Episode` protocol of rla_core.envs.base).

The engine (`textworld.start` on the `.z8` file, Jericho underneath) gives the text, the admissible
commands, win/lose and, when asked, its winning policy from the current state (`policy_commands`).
The oracle is that policy: `oracle_plan` is it, and a command is progress when it shortens it, which
`is_progress` decides on a copy of the engine's own game-progression tracker without stepping the game.

Observations are cleaned for tiny models: the title banner and the objective are cut from the first
one (the objective is the episode's goal), the trailing `>` prompt and status line are dropped, blank
runs are collapsed, and the result is capped at `max_chars` characters. The goal is the objective
without the grammar's greeting and sign-off sentences (`clean_goal`).
"""
from __future__ import annotations

import re
from pathlib import Path

from rla_core.envs.base import StepOutcome

NOTHING = "Nothing happens."  # an inadmissible command: not sent to the game, the state is unchanged
OVER = "The episode is over."
_BLANKS = re.compile(r"\n\s*\n+")
_SPACES = re.compile(r"[ \t]+")


# Sentences of TextWorld's objective grammar that carry no instruction ("Welcome to TextWorld!", "Here is
# how to play!", "That's it!", ...): cut from the goal a tiny model reads, every instruction kept.
_BOILERPLATE = re.compile(
    r"TextWorld|^Here is (how to play|your task for today)|^You do!$|^(Good|Alright, thanks|That's it|Got it)[!?.]$"
    r"|you're the winner!$|you can stop!$|you win!$|^There is something I need you to do")
_SENTENCE = re.compile(r"(?<=[.!?])\s+")


def clean_goal(objective: str, max_chars: int) -> str:
    """The objective without its greeting and sign-off sentences, whitespace collapsed, capped."""
    sentences = [s for s in _SENTENCE.split(" ".join(objective.split())) if s]
    kept = [s for s in sentences if not _BOILERPLATE.search(s)] or sentences
    return clean_text(" ".join(kept), max_chars)


_ROOM_HEADER = re.compile(r"^-= .+ =-$", re.MULTILINE)


def clean_text(text: str, max_chars: int, objective: str = "") -> str:
    """The readable part of an engine message (see the module doc). With `objective` (the first message):
    what follows the first room header (`-= Kitchen =-`), else what follows the objective text."""
    if objective:
        header = _ROOM_HEADER.search(text)
        if header:
            text = text[header.start():]
        elif objective in text:
            text = text.split(objective, 1)[1]
    cut = text.rfind("\n>")
    if cut >= 0:
        text = text[:cut]
    text = _BLANKS.sub("\n", text)
    text = "\n".join(_SPACES.sub(" ", line).strip() for line in text.splitlines()).strip()
    if len(text) > max_chars:
        text = text[: max_chars - 1].rstrip() + "…"
    return text or NOTHING


class TextWorldEpisode:
    """An episode of one game file. `step` counts every call (inadmissible ones too) until `step_limit`."""

    def __init__(self, game_file: str | Path, step_limit: int, objective: str, max_chars: int = 400,
                 goal_chars: int = 400) -> None:
        import textworld

        self.game_file = str(game_file)
        self.step_limit = step_limit
        self.max_chars = max_chars
        self.objective = objective
        self.goal = clean_goal(objective, goal_chars)
        infos = textworld.EnvInfos(admissible_commands=True, policy_commands=True, won=True, lost=True)
        self._env = textworld.start(self.game_file, request_infos=infos)
        self._inform7 = None
        self._state = None
        self.steps = 0
        self.won = self.lost = False

    @property
    def done(self) -> bool:
        return self.won or self.lost or self.steps >= self.step_limit

    def reset(self) -> str:
        self._state = self._env.reset()
        self.steps, self.won, self.lost = 0, False, False
        return clean_text(self._state["feedback"], self.max_chars, self.objective)

    def admissible_commands(self) -> list[str]:
        """The engine's admissible commands (it sorts them), [] once the episode is over."""
        return [] if self.done else list(self._state["admissible_commands"])

    def step(self, command: str) -> StepOutcome:
        if self.done:
            return StepOutcome(OVER, True, self.won)
        self.steps += 1
        command = " ".join(command.split())
        if command not in self._state["admissible_commands"]:
            return StepOutcome(NOTHING, self.done, self.won)
        self._state, _, _ = self._env.step(command)
        self.won, self.lost = bool(self._state["won"]), bool(self._state["lost"])
        return StepOutcome(clean_text(self._state["feedback"], self.max_chars), self.done, self.won)

    def _plan(self) -> list[str]:
        return list(self._state["policy_commands"] or [])

    def oracle_plan(self) -> list[str]:
        """The engine's winning policy from the current state ([] when won or lost)."""
        return [] if (self.won or self.lost) else self._plan()

    def is_progress(self, command: str) -> bool:
        """Does `command` shorten the engine's winning policy? (False when inadmissible or over.)"""
        if self.done:
            return False
        command = " ".join(command.split())
        progression = self._state["_game_progression"]
        actions = progression.valid_actions
        if self._inform7 is None:
            from textworld.generator.inform7 import Inform7Game

            self._inform7 = Inform7Game(self._state["game"])
        commands = self._inform7.gen_commands_from_actions(actions)
        before = progression.winning_policy
        if before is None:
            return False
        for action, text in zip(actions, commands):
            if text == command:
                after = progression.copy()
                after.update(action)
                if after.completed:
                    return True
                policy = after.winning_policy
                return policy is not None and len(policy) < len(before)
        return False

    def close(self) -> None:
        self._env.close()

    def __del__(self) -> None:  # Jericho holds a C emulator per episode
        try:
            self._env.close()
        except Exception:
            pass
