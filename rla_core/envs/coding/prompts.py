"""The coding prompts and the parsing of their answers.

The policy sees the problem statement (and, for function problems, the code to complete) and answers
with a program. The judge sees ONLY the problem statement — never a program — and answers with one
unit test in the form

    input:
    <stdin>
    output:
    <expected stdout>

Both parsers take untrusted model text: a fenced ```python block is unwrapped (real LLMs write them),
anything that does not fit is None.
"""
from __future__ import annotations

import re
from typing import Any

_FENCE = re.compile(r"```[a-zA-Z0-9_+-]*\n(.*?)(?:```|$)", re.DOTALL)
_TEST = re.compile(r"^\s*input:[ \t]*\n(.*?)\noutput:[ \t]*\n(.*?)\s*$", re.DOTALL)
MAX_TEST_CHARS = 2000


def policy_prompt(spec: dict[str, Any]) -> str:
    if spec.get("prompt_code"):
        return (f"Complete the Python function.\n{spec['prompt_code']}")
    return f"Problem: {spec['statement']}\nWrite a Python program that reads stdin and prints the answer.\nProgram:\n"


def parse_program(text: str, spec: dict[str, Any]) -> str | None:
    """The program to run: the fenced block if any, else the text; a function problem's completion is
    appended to its prompt code. None for an empty answer."""
    fenced = _FENCE.search(text)
    body = fenced.group(1) if fenced else text
    if not body.strip():
        return None
    if spec.get("prompt_code") and not fenced:
        return spec["prompt_code"] + body
    return body if body.endswith("\n") else body + "\n"


def judge_prompt(spec: dict[str, Any]) -> str:
    """The judge's prompt: the statement only (the judge never sees a program)."""
    return f"Problem: {spec['statement']}\nWrite a unit test: an input and the output of a correct program.\nTest:\n"


def unit_test_text(stdin: str, stdout: str) -> str:
    """The judge's target text for one test (its warm-start demonstrations)."""
    return f"input:\n{stdin.rstrip(chr(10))}\noutput:\n{stdout.rstrip(chr(10))}"


def parse_test(text: str) -> tuple[str, str] | None:
    """(stdin, expected stdout) of a judge answer, each ending with one newline; None if unparseable."""
    if len(text) > MAX_TEST_CHARS or "\x00" in text:
        return None
    match = _TEST.match(text)
    if not match:
        return None
    stdin, stdout = match.group(1), match.group(2)
    if "\noutput:" in stdin:
        return None
    return stdin.rstrip("\n") + "\n", stdout.rstrip("\n") + "\n"
