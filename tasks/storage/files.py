"""Reads and writes of stage outputs and their `_DONE` markers, atomic through rla_core.fileio: an
interrupted stage leaves either nothing or the complete output (tasks/storage/object_store.py copies them to S3)."""
from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any, Iterable, Mapping, TypeVar

from pydantic import BaseModel

from rla_core.fileio import atomic_write_text
from rla_core.records import load_json_file, read_jsonl

RecordT = TypeVar("RecordT", bound=BaseModel)

DONE_MARKER = "_DONE"


def write_text(path: str | Path, text: str) -> Path:
    return atomic_write_text(path, text)


def write_json(path: str | Path, data: object) -> Path:
    return write_text(path, json.dumps(data, indent=2, sort_keys=True, default=str))


def read_json(path: str | Path) -> object:
    """A JSON file; DataError `path:LINE: ...` when it is not valid JSON."""
    return load_json_file(path)


def write_records(path: str | Path, records: Iterable[BaseModel]) -> Path:
    lines = [record.model_dump_json() for record in records]
    return write_text(path, "\n".join(lines) + ("\n" if lines else ""))


def read_records(path: str | Path, record_type: type[RecordT]) -> list[RecordT]:
    """Every record of a JSONL file; a bad line raises DataError `path:LINE: what is wrong`."""
    return read_jsonl(path, record_type)


_SHARED: dict[tuple, list] = {}
_SHARED_FILES = 4


def read_records_shared(path: str | Path, record_type: type[RecordT]) -> list[RecordT]:
    """`read_records` for readers that never change a record (the data gates, the iteration report):
    the parsed records of the last few files are kept in this process and handed out again while the
    file is unchanged (same size and modification time). The gates and the commit read the same
    rollouts and batch, about 0.7 s of parsing per quickstart iteration."""
    resolved = Path(path).resolve()
    info = resolved.stat()
    key = (str(resolved), info.st_mtime_ns, info.st_size, record_type)
    if key not in _SHARED:
        if len(_SHARED) >= _SHARED_FILES:
            _SHARED.pop(next(iter(_SHARED)))
        _SHARED[key] = read_records(resolved, record_type)
    return list(_SHARED[key])


def mark_done(stage_dir: str | Path, summary: dict | None = None) -> Path:
    """Write the stage's completion marker last; its presence means every output is complete."""
    return write_json(Path(stage_dir) / DONE_MARKER, summary or {})


def is_done(stage_dir: str | Path) -> bool:
    return (Path(stage_dir) / DONE_MARKER).is_file()


def done_summary(stage_dir: str | Path) -> dict:
    data = read_json(Path(stage_dir) / DONE_MARKER)
    return data if isinstance(data, dict) else {}


def json_safe(value: Any) -> Any:
    """JSON-safe copy: numpy scalars to Python numbers, NaN/±inf to "nan"/"inf"/"-inf", others to str."""
    if isinstance(value, Mapping):
        return {str(key): json_safe(item) for key, item in value.items()}
    if isinstance(value, (list, tuple, set)):
        return [json_safe(item) for item in value]
    if hasattr(value, "item") and type(value).__module__ == "numpy":
        value = value.item()
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    if value is None or isinstance(value, (str, int, float, bool)):
        return value
    return str(value)
