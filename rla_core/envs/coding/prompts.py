"""The coding prompts and the parsing of their answers.

The policy sees the problem statement (and, for function problems, the code to complete) and answers
with a program. The judge sees ONLY the problem statement — never a program — and answers with one
unit test in the form

    input:
    <stdin>
    output:
    <expected stdout>

optionally with a worked computation between the two (`work:` and one line per step, e.g. `15 + 3 = 18`):
a real pretrained judge is warm-started on such tests (`coding.judge_work`), because a small model
computes a pipeline's output far more reliably one operation at a time than in one jump. The work is
never scored: only the input and the expected output are.

Both parsers take untrusted model text: a fenced ```python block is unwrapped (real LLMs write them),
anything that does not fit is None.
"""
from __future__ import annotations

import re
from typing import Any

_FENCE = re.compile(r"```[a-zA-Z0-9_+-]*\n(.*?)(?:```|$)", re.DOTALL)
_TEST = re.compile(r"^\s*input:[ \t]*\n(.*?)\n(?:work:[ \t]*\n(?:.*?\n)?)?output:[ \t]*\n(.*?)\s*$", re.DOTALL)
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


def unit_test_text(stdin: str, stdout: str, work: list[str] | None = None) -> str:
    """The judge's target text for one test (its warm-start demonstrations); `work`: the worked steps
    between input and output (see the module's docstring)."""
    middle = "work:\n" + "".join(line + "\n" for line in work) if work else ""
    return f"input:\n{stdin.rstrip(chr(10))}\n{middle}output:\n{stdout.rstrip(chr(10))}"


def parse_test(text: str) -> tuple[str, str] | None:
    """(stdin, expected stdout) of a judge answer, each ending with one newline; None if unparseable."""
    if len(text) > MAX_TEST_CHARS or "\x00" in text:
        return None
    match = _TEST.match(text)
    if not match:
        return None
    stdin, stdout = match.group(1), match.group(2)
    if "\noutput:" in stdin or "\nwork:" in stdin or stdin.startswith("work:"):
        return None
    return stdin.rstrip("\n") + "\n", stdout.rstrip("\n") + "\n"
