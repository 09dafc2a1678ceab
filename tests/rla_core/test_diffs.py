"""Relative differences of a re-run against its record (rla_core/diffs.py), on hand-computed cases."""
from __future__ import annotations

import math

import pytest
import torch
from safetensors.torch import save_file

from rla_core import diffs
from rla_core.diffs import (as_number, largest, leaves, metric_differences, record_differences, relative_difference,
                            safetensors_differences, tensor_differences, tensor_relative_difference)


def test_relative_difference_of_numbers():
    assert relative_difference(2.0, 2.0) == 0.0
    assert relative_difference(4.0, 5.0) == pytest.approx(0.2)  # |4-5| / 5
    assert relative_difference(-1.0, 1.0) == pytest.approx(2.0)
    assert relative_difference(0.0, 1e-13) == pytest.approx(0.1)  # denominator floored at 1e-12
    assert relative_difference(math.nan, math.nan) == 0.0 and relative_difference(math.inf, math.inf) == 0.0
    assert relative_difference(math.nan, 1.0) == math.inf and relative_difference(math.inf, 1.0) == math.inf


def test_metric_differences_name_only_what_differs():
    recorded = {"loss": 0.5, "kl": 0.1, "steps": 4, "nan": math.nan, "gone": 1.0, "mode": "a", "safe": "nan"}
    reproduced = {"loss": 0.55, "kl": 0.1, "steps": 4.0, "nan": math.nan, "new": 2.0, "mode": "b", "safe": math.nan}
    got = metric_differences(recorded, reproduced)
    assert set(got) == {"loss", "gone", "new", "mode"}
    assert got["loss"] == pytest.approx(0.05 / 0.55)
    assert got["gone"] is None and got["new"] is None and got["mode"] is None
    assert metric_differences(recorded, dict(recorded)) == {}
    assert as_number(True) is None and as_number("-inf") == -math.inf and as_number("x") is None


def test_identical_tensors_differ_by_zero():
    a = {"w": torch.randn(3, 4), "b": torch.zeros(4)}
    assert tensor_differences(a, {k: v.clone() for k, v in a.items()}) == {"b": 0.0, "w": 0.0}


def test_one_perturbed_tensor_differs_by_the_known_amount():
    w = torch.tensor([[1.0, -2.0], [0.5, 0.0]])  # max |w| = 2
    b = torch.tensor([3.0, 4.0])
    w2 = w.clone()
    w2[1, 1] += 0.25  # 0.25 / 2
    got = tensor_differences({"w": w, "b": b}, {"w": w2, "b": b.clone()})
    assert got == {"b": 0.0, "w": pytest.approx(0.125)}
    assert largest(got) == ("w", pytest.approx(0.125))


def test_tensor_edge_cases():
    assert tensor_relative_difference(torch.zeros(2, 3), torch.zeros(3, 2)) is None  # shapes differ
    assert tensor_differences({"a": torch.ones(1)}, {"b": torch.ones(1)}) == {"a": None, "b": None}
    nan = torch.tensor([math.nan, 1.0])
    assert tensor_relative_difference(nan, nan.clone()) == 0.0
    assert tensor_relative_difference(nan, torch.tensor([0.0, 1.0])) == math.inf
    assert tensor_relative_difference(torch.zeros(3), torch.tensor([0.0, 1e-13, 0.0])) == pytest.approx(0.1)
    half = torch.tensor([1.0, 2.0], dtype=torch.bfloat16)
    assert tensor_relative_difference(half, torch.tensor([1.0, 2.5], dtype=torch.bfloat16)) == pytest.approx(0.25)
    assert tensor_relative_difference(torch.tensor([1, 4]), torch.tensor([1, 5])) == pytest.approx(0.25)


def test_chunked_comparison_gives_the_same_value(monkeypatch):
    a = torch.linspace(-3.0, 3.0, 23)
    b = a.clone()
    b[17] += 0.3  # 0.3 / 3
    whole = tensor_relative_difference(a, b)
    monkeypatch.setattr(diffs, "CHUNK", 5)
    assert tensor_relative_difference(a, b) == pytest.approx(whole) == pytest.approx(0.1)


def test_safetensors_files_are_compared_tensor_by_tensor(tmp_path):
    a = {"w": torch.tensor([[1.0, 4.0]]), "b": torch.tensor([2.0]), "only_a": torch.ones(1)}
    b = {"w": torch.tensor([[1.0, 3.0]]), "b": torch.tensor([2.0])}
    save_file(a, str(tmp_path / "a.safetensors"))
    save_file(b, str(tmp_path / "b.safetensors"))
    got = safetensors_differences(tmp_path / "a.safetensors", tmp_path / "b.safetensors")
    assert got == {"b": 0.0, "only_a": None, "w": pytest.approx(0.25)}
    assert largest(got) == ("w", pytest.approx(0.25)) and largest({"x": None}) == (None, None)


def test_record_differences_line_by_line():
    assert leaves({"a": [1, {"b": 2}], "c": {}}) == {"a[0]": 1, "a[1].b": 2, "c": {}}
    recorded = [{"id": "t1", "reward": 1.0, "steps": [0.5, 0.5]}, {"id": "t2", "reward": 2.0}, {"id": "t3"}]
    reproduced = [{"id": "t1", "reward": 1.0, "steps": [0.5, 0.4]}, {"id": "t2", "reward": 2.0}, {"id": "t3x"}, {}]
    got = record_differences(recorded, reproduced)
    # line 1: steps[1] 0.5 vs 0.4 -> 0.2; line 3: text; line 4: only reproduced
    assert got == {"lines": [3, 4], "lines_differ": 3, "rel": pytest.approx(0.2), "where": "line 1: steps[1]",
                   "unmeasured": 2}
    same = record_differences(recorded, [dict(r) for r in recorded])
    assert same == {"lines": [3, 3], "lines_differ": 0, "rel": None, "where": None, "unmeasured": 0}
