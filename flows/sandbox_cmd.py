"""`rla sandbox run PROGRAM [--stdin FILE] [--expect FILE] [--timeout S]`: one program on one input (empty
without --stdin) in the program sandbox (rla_core/envs/coding/sandbox.py); prints the verdict as one JSON line.
Exit codes: EXIT_CODES (shown in the command's help)."""
from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

from rla_core.errors import MissingFile

EXIT_CODES = ("exit codes: 0 = verdict ok (ran to completion with exit status 0 and, with --expect, printed the "
              "expected output); 1 = any other verdict (wrong, timeout, memory, output_limit, crash, blocked); "
              "2 = a missing file or an unusable sandbox")


def _read(path: str, what: str) -> str:
    file = Path(path)
    if not file.is_file():
        raise MissingFile(f"{what} file not found: {path}")
    return file.read_text(encoding="utf-8", errors="surrogateescape")


def sandbox_run(program: str, stdin: str | None, expect: str | None, timeout: float | None) -> int:
    """Run `program` on the `stdin` file (None: empty input), print its verdict; 0 when it is ok, else 1."""
    from rla_core.envs.coding.sandbox import Limits, Sandbox

    source = _read(program, "program")
    given = _read(stdin, "stdin") if stdin is not None else ""
    expected = _read(expect, "expected output") if expect is not None else None
    limits = Limits() if timeout is None else replace(Limits(), wall_s=timeout, cpu_s=timeout)
    verdict = Sandbox(limits, workers=1).run(source, given, expected)
    print(json.dumps(verdict.to_dict()))
    return 0 if verdict.passed else 1
