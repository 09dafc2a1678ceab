"""`rla sandbox run PROGRAM --stdin FILE [--expect FILE] [--timeout S]`: one program on one input in the
program sandbox (rla_core/coding/sandbox.py); prints the verdict as one JSON line. Exit code 0 whenever
the program ran, whatever its verdict; a missing file or an unusable sandbox is a user error (2)."""
from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

from rla_core.errors import MissingFile


def _read(path: str, what: str) -> str:
    file = Path(path)
    if not file.is_file():
        raise MissingFile(f"{what} file not found: {path}")
    return file.read_text(encoding="utf-8", errors="surrogateescape")


def sandbox_run(program: str, stdin: str, expect: str | None, timeout: float | None) -> int:
    from rla_core.coding.sandbox import Limits, Sandbox

    source, given = _read(program, "program"), _read(stdin, "stdin")
    expected = _read(expect, "expected output") if expect is not None else None
    limits = Limits() if timeout is None else replace(Limits(), wall_s=timeout, cpu_s=timeout)
    verdict = Sandbox(limits, workers=1).run(source, given, expected)
    print(json.dumps(verdict.to_dict()))
    return 0
