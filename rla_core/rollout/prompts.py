"""The policy's prompt and the parsing of its `\\boxed{index}` answer.

The policy sees the goal, the last few turns, the current observation and the numbered admissible
commands, and answers with `\\boxed{k}` (1-based index into the list).
"""
from __future__ import annotations

import re
from dataclasses import dataclass

BOXED = re.compile(r"\\boxed\{\s*(-?\d+)\s*\}")


@dataclass(frozen=True)
class Turn:
    action: str  # the command taken ("(invalid)" when the answer did not parse)
    observation: str  # what followed


def format_history(history: list[Turn], keep: int) -> str:
    if keep <= 0 or not history:
        return ""
    lines = [f"> {t.action}\n{t.observation}" for t in history[-keep:]]
    return "History:\n" + "\n".join(lines) + "\n"


def policy_prompt(goal: str, history: list[Turn], observation: str, commands: list[str], keep: int) -> str:
    numbered = "\n".join(f"{i}: {c}" for i, c in enumerate(commands, start=1))
    return (
        f"{goal}\n{format_history(history, keep)}Now: {observation}\n"
        f"Commands:\n{numbered}\nAnswer with \\boxed{{k}}.\nAnswer:"
    )


def policy_answer(index: int) -> str:
    """The target text for choosing command number `index` (1-based)."""
    return f" \\boxed{{{index}}}"


def parse_action(text: str, commands: list[str]) -> str | None:
    """The chosen admissible command, or None when the answer is missing or out of range."""
    found = BOXED.findall(text)
    if not found:
        return None
    number = found[0]
    digits = number.lstrip("-").lstrip("0") or "0"
    if number.startswith("-") or len(digits) > 18:  # out of range; int() refuses more than 4,300 digits
        return None
    index = int(digits)
    return commands[index - 1] if 1 <= index <= len(commands) else None
