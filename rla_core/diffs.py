"""How much a re-run differs from a recorded result, where bytes differ (`rla reproduce`).

Every difference is relative and unitless, 0 for equal values:

  a number      |a - b| / max(|a|, |b|, FLOOR);
  a tensor      max_i |a_i - b_i| / max(max_i |a_i|, FLOOR), a being the recorded tensor: the largest
                element difference on the scale of the recorded tensor's largest element;
  a record file per line, the largest of its numeric fields' differences (as numbers above).

NaN equals NaN (a metric or weight that was NaN and is NaN again is reproduced); NaN against a number,
or an infinity against anything else, is an infinite difference. A difference that has no magnitude (a
key or tensor on one side only, shapes or text that differ) is None. Pure: torch and safetensors only.
"""
from __future__ import annotations

import math
from collections.abc import Iterator, Mapping, Sequence
from itertools import zip_longest
from pathlib import Path

import torch
from safetensors import safe_open

FLOOR = 1e-12  # smallest denominator: a difference of values this close to 0 is measured in absolute terms
CHUNK = 1 << 22  # elements of a tensor compared at once in float64 (32 MiB a side)
_ABSENT = object()


def relative_difference(a: float, b: float) -> float:
    """|a - b| / max(|a|, |b|, FLOOR); 0 for equal values (NaN and NaN included), inf when either is
    NaN or infinite and they are not equal."""
    if a == b or (math.isnan(a) and math.isnan(b)):
        return 0.0
    if not (math.isfinite(a) and math.isfinite(b)):
        return math.inf
    return abs(a - b) / max(abs(a), abs(b), FLOOR)


def as_number(value: object) -> float | None:
    """A metric value as a float: an int or float, or the text "nan", "inf" or "-inf" (how JSON-safe
    summaries write them); None for anything else (booleans, other text, lists, None)."""
    if isinstance(value, bool):
        return None
    if isinstance(value, (int, float)):
        return float(value)
    if isinstance(value, str) and value.strip().lower() in ("nan", "inf", "-inf", "+inf"):
        return float(value)
    return None


def value_difference(a: object, b: object) -> float | None:
    """relative_difference of two values when both are numbers; else 0.0 when they are equal and None
    (no magnitude) when they are not, e.g. text, or a value on one side only (_ABSENT)."""
    x, y = as_number(a), as_number(b)
    if x is not None and y is not None:
        return relative_difference(x, y)
    return 0.0 if (a is not _ABSENT and b is not _ABSENT and a == b) else None


def metric_differences(recorded: Mapping[str, object], reproduced: Mapping[str, object]) -> dict[str, float | None]:
    """{key: relative difference} of every key, of either side, whose values differ (see value_difference;
    None: no magnitude). Equal values, NaN against NaN included, are left out."""
    out: dict[str, float | None] = {}
    for key in sorted(set(recorded) | set(reproduced)):
        rel = value_difference(recorded.get(key, _ABSENT), reproduced.get(key, _ABSENT))
        if rel != 0.0:
            out[key] = rel
    return out


def _chunk_extremes(a: torch.Tensor, b: torch.Tensor) -> tuple[float, float]:
    """(max |a - b|, max |a|) of two equally long flat chunks in float64: equal elements (infinities,
    NaN against NaN) differ by 0, NaN against anything else by inf; NaN of `a` counts 0 in max |a|."""
    x, y = a.to(torch.float64), b.to(torch.float64)
    gap = torch.where((x == y) | (x.isnan() & y.isnan()), 0.0, (x - y).abs())
    gap = torch.nan_to_num(gap, nan=math.inf, posinf=math.inf)
    return gap.max().item(), torch.nan_to_num(x.abs(), nan=0.0).max().item()


def tensor_relative_difference(recorded: torch.Tensor, reproduced: torch.Tensor) -> float | None:
    """max |a - b| / max(max |a|, FLOOR) with a the recorded tensor, computed in float64 chunks of CHUNK
    elements (a 7B model's largest matrix never doubles in memory); None when the shapes differ."""
    if recorded.shape != reproduced.shape:
        return None
    a, b = recorded.reshape(-1), reproduced.reshape(-1)
    gap, scale = 0.0, 0.0
    for start in range(0, a.numel(), CHUNK):
        g, s = _chunk_extremes(a[start:start + CHUNK], b[start:start + CHUNK])
        gap, scale = max(gap, g), max(scale, s)
    if gap == 0.0 or math.isinf(gap):
        return gap
    return gap / max(scale, FLOOR)


def tensor_differences(recorded: Mapping[str, torch.Tensor],
                       reproduced: Mapping[str, torch.Tensor]) -> dict[str, float | None]:
    """{name: tensor_relative_difference} for every tensor name of either side, 0.0 for equal tensors,
    None for a name on one side only or shapes that differ. Reads one pair of tensors at a time, so a
    lazy mapping (SafetensorsFile) keeps one tensor a side in memory."""
    out: dict[str, float | None] = {}
    for name in sorted(set(recorded) | set(reproduced)):
        both = name in recorded and name in reproduced
        out[name] = tensor_relative_difference(recorded[name], reproduced[name]) if both else None
    return out


class SafetensorsFile(Mapping[str, torch.Tensor]):
    """The tensors of an open safetensors file (safe_open handle), read one by one when asked for."""

    def __init__(self, handle: object) -> None:
        self._handle = handle
        self._names = list(handle.keys())  # type: ignore[attr-defined]

    def __getitem__(self, name: str) -> torch.Tensor:
        if name not in self._names:
            raise KeyError(name)
        return self._handle.get_tensor(name)  # type: ignore[attr-defined]

    def __iter__(self) -> Iterator[str]:
        return iter(self._names)

    def __len__(self) -> int:
        return len(self._names)


def safetensors_differences(recorded: Path, reproduced: Path) -> dict[str, float | None]:
    """tensor_differences of two safetensors files (checkpoints), one tensor a side in memory."""
    with safe_open(str(recorded), framework="pt") as a, safe_open(str(reproduced), framework="pt") as b:
        return tensor_differences(SafetensorsFile(a), SafetensorsFile(b))


def largest(differences: Mapping[str, float | None]) -> tuple[str | None, float | None]:
    """(name, value) of the largest measured (not None) difference; (None, None) when none is measured."""
    measured = [(value, name) for name, value in differences.items() if value is not None]
    if not measured:
        return None, None
    value, name = max(measured, key=lambda item: item[0])
    return name, value


def leaves(tree: object, path: str = "") -> dict[str, object]:
    """{path: value} of a JSON tree's leaves, paths like `steps[0].reward`; an empty object or list is a
    leaf of its own."""
    if isinstance(tree, dict) and tree:
        children = [(f"{path}.{key}" if path else str(key), item) for key, item in tree.items()]
    elif isinstance(tree, list) and tree:
        children = [(f"{path}[{i}]", item) for i, item in enumerate(tree)]
    else:
        return {path: tree}
    return {k: v for child, item in children for k, v in leaves(item, child).items()}


def record_differences(recorded: Sequence[object], reproduced: Sequence[object]) -> dict:
    """Line by line differences of two record files (parsed JSONL lines; a JSON file is one line):
    {"lines": [recorded, reproduced], "lines_differ": lines not equal (a line on one side only counts),
    "rel": largest relative difference over the numeric fields of lines on both sides (None: none
    measured), "where": "line N: field" of it (1-based), "unmeasured": differing fields without a
    magnitude (text, a field or line on one side only)}."""
    differ, unmeasured, worst, where = 0, 0, None, None
    for number, (a, b) in enumerate(zip_longest(recorded, reproduced, fillvalue=_ABSENT), start=1):
        if a is _ABSENT or b is _ABSENT:
            differ, unmeasured = differ + 1, unmeasured + 1
            continue
        fields = metric_differences(leaves(a), leaves(b))
        differ += bool(fields)
        unmeasured += sum(rel is None for rel in fields.values())
        field, rel = largest(fields)
        if rel is not None and (worst is None or rel > worst):
            worst, where = rel, f"line {number}: {field or '(the line)'}"
    return {"lines": [len(recorded), len(reproduced)], "lines_differ": differ, "rel": worst, "where": where,
            "unmeasured": unmeasured}
