"""The one atomic-write helper: files and directories replace their old version whole, or not at all."""
from __future__ import annotations

import pytest

from rla_core.fileio import atomic_directory, atomic_file, atomic_write_text


def test_atomic_write_text_replaces_and_leaves_no_temp_file(tmp_path):
    path = tmp_path / "deep" / "a.json"
    atomic_write_text(path, "1")
    atomic_write_text(path, "2")
    assert path.read_text() == "2" and sorted(p.name for p in path.parent.iterdir()) == ["a.json"]


def test_atomic_file_keeps_the_old_version_when_the_writer_fails(tmp_path):
    path = tmp_path / "model.bin"
    path.write_text("old")
    with pytest.raises(RuntimeError):
        with atomic_file(path) as temp:
            temp.write_text("half")
            raise RuntimeError("disk full")
    assert path.read_text() == "old" and sorted(p.name for p in tmp_path.iterdir()) == ["model.bin"]


def test_atomic_directory_swaps_a_whole_directory(tmp_path):
    target = tmp_path / "out" / "store"
    with atomic_directory(target) as staging:
        (staging / "a.txt").write_text("1")
    with atomic_directory(target) as staging:
        (staging / "b.txt").write_text("2")
    assert sorted(p.name for p in target.iterdir()) == ["b.txt"]
    assert sorted(p.name for p in target.parent.iterdir()) == ["store"]  # no staging or old folder left
