"""Reading JSONL record files line by line: a bad line fails as one DataError naming the file and line.

Lines are split on "\\n" only. JSON writers (pydantic among them) leave U+0085, U+2028 and U+2029 raw
inside strings, and `str.splitlines` would cut a record in two at them: model text holding one of
those characters must read back as it was written.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import TypeVar

from pydantic import BaseModel, ValidationError

from rla_core.errors import DataError, MissingFile

RecordT = TypeVar("RecordT", bound=BaseModel)

_SHOWN = 60  # characters of a bad value quoted in a message


def _short(value: object) -> str:
    text = repr(value)
    return text if len(text) <= _SHOWN else text[: _SHOWN - 3] + "..."


def explain_record_error(err: ValidationError, record_type: type[BaseModel]) -> str:
    """One line for the first error of a record's validation: bad JSON, not an object, or the field."""
    first = err.errors(include_url=False)[0]
    kind, name = first["type"], record_type.__name__
    field = ".".join(str(p) for p in first["loc"])
    if kind == "json_invalid":
        why = first["msg"].removeprefix("Invalid JSON: ").replace("line 1 column", "column")
        return f"not valid JSON ({why}); a truncated or hand-edited line?"
    if not field:
        return f"a {name} record must be a JSON object ({first['msg']}, got {_short(first.get('input'))})"
    if kind == "extra_forbidden":
        return f"{name} record: unknown field '{field}'"
    if kind == "missing":
        return f"{name} record: field '{field}' is missing"
    return f"{name} record: field '{field}': {first['msg']} (got {_short(first.get('input'))})"


def decode_lines(path: str | Path) -> list[tuple[int, str]]:
    """(line number, text) of every non-blank line of a UTF-8 file; DataError names a line that is not
    UTF-8, MissingFile a file that is not there."""
    path = Path(path)
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        raise MissingFile(f"{path}: file not found") from None
    except IsADirectoryError:
        raise DataError(f"{path}: is a folder, expected a JSONL file") from None
    lines = []
    for number, raw in enumerate(data.split(b"\n"), start=1):
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError as err:
            raise DataError(f"{path}:{number}: not UTF-8 text (byte 0x{raw[err.start]:02x} at column "
                            f"{err.start + 1})") from None
        if text.strip():
            lines.append((number, text))
    return lines


def read_numbered(path: str | Path, record_type: type[RecordT]) -> list[tuple[int, RecordT]]:
    """(line number, record) of every non-blank line; the first bad line raises DataError
    `path:LINE: what is wrong`."""
    out = []
    for number, text in decode_lines(path):
        try:
            out.append((number, record_type.model_validate_json(text)))
        except ValidationError as err:
            raise DataError(f"{path}:{number}: {explain_record_error(err, record_type)}") from None
        except RecursionError:
            raise DataError(f"{path}:{number}: nested too deeply to be a {record_type.__name__} record") from None
    return out


def read_jsonl(path: str | Path, record_type: type[RecordT]) -> list[RecordT]:
    """Every record of a JSONL file (blank lines skipped); see `read_numbered` for the errors."""
    return [record for _, record in read_numbered(path, record_type)]


def load_json_file(path: str | Path) -> object:
    """The value of a JSON file; DataError `path:LINE: ...` when it is not UTF-8 JSON."""
    path = Path(path)
    try:
        text = path.read_bytes().decode("utf-8")
    except UnicodeDecodeError as err:
        raise DataError(f"{path}: not UTF-8 text (byte at offset {err.start})") from None
    except FileNotFoundError:
        raise MissingFile(f"{path}: file not found") from None
    except IsADirectoryError:
        raise DataError(f"{path}: is a folder, expected a JSON file") from None
    try:
        return json.loads(text)
    except json.JSONDecodeError as err:
        at = "column" if err.msg.endswith(" at") else "at column"  # "Unterminated string starting at"
        raise DataError(f"{path}:{err.lineno}: not valid JSON ({err.msg} {at} {err.colno})") from None
    except RecursionError:
        raise DataError(f"{path}: JSON nested too deeply") from None
