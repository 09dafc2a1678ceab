"""Peak resident memory per stage: the kernel's VmHWM, reset before each stage."""
import numpy as np
import pytest

from tasks import resources


def test_the_peak_follows_an_allocation_and_a_reset_forgets_it():
    if not resources.reset_peak_rss():
        pytest.skip("this kernel cannot reset the peak RSS (/proc/self/clear_refs)")
    before = resources.peak_rss_gib()
    block = np.ones(2 ** 28 // 8)  # 256 MiB, touched
    during = resources.peak_rss_gib()
    assert during - before >= 0.24
    del block
    assert resources.reset_peak_rss()
    assert resources.peak_rss_gib() < during - 0.2


def test_without_proc_files_nothing_is_reported(tmp_path, monkeypatch):
    monkeypatch.setattr(resources, "STATUS", tmp_path / "missing")
    monkeypatch.setattr(resources, "CLEAR_REFS", tmp_path / "nodir" / "clear_refs")
    assert resources.peak_rss_gib() is None and resources.reset_peak_rss() is False
