"""A full disk while a checkpoint is written leaves the previous checkpoint intact and no debris: once on a
real, tiny tmpfs (when this machine lets us mount one), once with ENOSPC injected half-way through the
weights file (always)."""
from __future__ import annotations

import errno
import subprocess

import pytest
import torch

from rla_core.errors import DiskFull
from rla_core.models.factory import build_model, load_pretrained, save_pretrained
from tests.rla_core.models.test_factory import TEXTS, tiny_spec
from rla_core.models.tokenizer import train_tokenizer


@pytest.fixture(scope="module")
def tokenizer():
    return train_tokenizer(TEXTS, vocab_size=400)


def _weights(model) -> torch.Tensor:
    return torch.cat([p.detach().flatten() for p in model.parameters()])


def _assert_old_checkpoint_intact(target, old, parent):
    loaded, _ = load_pretrained(target)
    assert torch.equal(_weights(loaded), _weights(old))
    assert sorted(p.name for p in parent.iterdir()) == [target.name], "staging debris left behind"


def test_injected_enospc_mid_weights_keeps_the_previous_checkpoint(tokenizer, tmp_path, monkeypatch):
    import safetensors.torch
    import transformers.modeling_utils as modeling

    target = tmp_path / "ckpt"
    old = build_model(tiny_spec(), tokenizer, seed=0)
    save_pretrained(old, tokenizer, target)

    def half_then_full(tensors, filename, metadata=None):
        safetensors.torch.save_file(tensors, filename, metadata=metadata)
        with open(filename, "r+b") as f:  # what a full disk leaves: a truncated file, then ENOSPC
            f.truncate(f.seek(0, 2) // 2)
        raise OSError(errno.ENOSPC, "No space left on device", str(filename))

    monkeypatch.setattr(modeling, "safe_save_file", half_then_full)
    with pytest.raises(OSError) as error:
        save_pretrained(build_model(tiny_spec(), tokenizer, seed=1), tokenizer, target)
    assert isinstance(error.value, DiskFull) and error.value.errno == errno.ENOSPC
    _assert_old_checkpoint_intact(target, old, tmp_path)


@pytest.fixture
def tiny_disk(tmp_path):
    """A tmpfs of 640 KiB mounted at tmp_path/disk (skipped where mounting is not allowed)."""
    disk = tmp_path / "disk"
    disk.mkdir()
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=640k", "tmpfs", str(disk)],
                             capture_output=True).returncode == 0
    if not mounted:
        pytest.skip("cannot mount a tmpfs here (not root or no mount namespace)")
    try:
        yield disk
    finally:
        subprocess.run(["umount", str(disk)], check=True)


def test_real_full_disk_keeps_the_previous_checkpoint(tokenizer, tiny_disk):
    # ~415 KiB per checkpoint: one fits in 640 KiB, the staging copy of a second does not
    spec = tiny_spec(hidden_size=64, intermediate_size=128)
    old = build_model(spec, tokenizer, seed=0)
    target = tiny_disk / "ckpt"
    save_pretrained(old, tokenizer, target)
    size = sum(p.stat().st_size for p in target.iterdir())
    assert 320 * 1024 < size < 640 * 1024, size  # the premise of the test
    with pytest.raises(OSError) as error:
        save_pretrained(build_model(spec, tokenizer, seed=1), tokenizer, target)
    assert isinstance(error.value, DiskFull) and error.value.errno == errno.ENOSPC and str(target) in str(error.value)
    _assert_old_checkpoint_intact(target, old, tiny_disk)
