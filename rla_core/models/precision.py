"""`models.dtype`: the arithmetic of every forward pass, one key for sampling, warm-start and updates.

Weights are stored and optimized in float32 (the master copy). With bfloat16, a training update or a
supervised warm-start runs under `torch.autocast` (matmuls in bfloat16, reductions and the optimizer in
float32) and sampling runs on the weights cast to bfloat16 (a model loaded for sampling only). `auto`
picks bfloat16 for a pretrained model on hardware with native bfloat16 arithmetic (a CUDA device that
supports it; a CPU with AVX512-BF16 or AMX) and float32 otherwise, and always float32 for the tiny models
built in-process, whose runs stay bit-identical to those from before the key.
"""
from __future__ import annotations

import contextlib
from functools import lru_cache
from pathlib import Path

import torch

DTYPES = ("auto", "float32", "bfloat16")
_NATIVE_BF16_FLAGS = ("avx512_bf16", "amx_bf16")


@lru_cache(maxsize=1)
def cpu_has_native_bf16(cpuinfo: str = "/proc/cpuinfo") -> bool:
    """Whether this CPU multiplies bfloat16 natively (AVX512-BF16 or AMX-BF16); False when unknown."""
    try:
        text = Path(cpuinfo).read_text()
    except OSError:
        return False
    flags = next((line.split(":", 1)[1].split() for line in text.splitlines() if line.startswith("flags")), [])
    return any(flag in flags for flag in _NATIVE_BF16_FLAGS)


def default_device() -> str:
    return "cuda" if torch.cuda.is_available() else "cpu"


def resolve(name: str, pretrained: bool, device: str | None = None) -> torch.dtype:
    """The compute dtype `models.dtype = name` means for a model (pretrained or tiny) on `device` (default:
    CUDA when there is one, else the CPU)."""
    device = device or default_device()
    if name not in DTYPES:
        raise ValueError(f"models.dtype must be one of {DTYPES}, got {name!r}")
    if name == "float32":
        return torch.float32
    if name == "bfloat16":
        return torch.bfloat16
    if not pretrained:
        return torch.float32
    if device.startswith("cuda"):
        return torch.bfloat16 if torch.cuda.is_available() and torch.cuda.is_bf16_supported() else torch.float32
    return torch.bfloat16 if cpu_has_native_bf16() else torch.float32


def autocast(dtype: torch.dtype, device: str | None = None) -> contextlib.AbstractContextManager:
    """Mixed precision around a whole training or warm-start loop (a no-op in float32).

    The cast cache is off: autocast otherwise keeps the first bfloat16 copy of each weight until the
    context exits, so every step after the first optimizer step would run on the initial weights (seen
    here: 40 warm-start steps of a tiny model left the loss at 5.36 against 1.64 in float32)."""
    if dtype == torch.float32:
        return contextlib.nullcontext()
    return torch.autocast((device or default_device()).split(":")[0], dtype=dtype, cache_enabled=False)


def for_sampling(model: torch.nn.Module, dtype: torch.dtype) -> torch.nn.Module:
    """The model cast to `dtype` in place, for generation only (untouched in float32)."""
    return model if dtype == torch.float32 else model.to(dtype)
