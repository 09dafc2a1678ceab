"""`models.dtype`: the arithmetic of every forward pass, one key for sampling, warm-start and updates.

Weights are stored and optimized in float32 (the master copy). With bfloat16, a training update or a
supervised warm-start runs under `torch.autocast` (matmuls in bfloat16, reductions and the optimizer in
float32) and sampling runs on the weights cast to bfloat16 (a model loaded for sampling only). `auto`
picks bfloat16 for a pretrained model on hardware with native bfloat16 arithmetic (a CUDA device that
supports it; a CPU with AVX512-BF16 or AMX) and float32 otherwise, and always float32 for the tiny models
built in-process, whose runs stay bit-identical to those from before the key.

Under autocast without its cast cache every forward pass casts every linear weight again, the frozen ones
too (with `train.trainable: last_layers:6` of SmolLM2, 24 of 30 blocks). `FrozenLinearsCast` casts those
once for a whole update and puts the float32 masters back after it: the same bfloat16 numbers reach the
same matmuls, so results are identical to the bit (bench/frozen_cast.py measures the time and checks it).
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


class FrozenLinearsCast:
    """For the duration of the context, every `nn.Linear` whose weight does not train computes from a
    `dtype` copy of it made once, instead of the copy autocast makes at each forward pass; the float32
    master weights (the same Parameter objects) are back in place on exit, also after an error, and inside
    `masters()` (e.g. to save a checkpoint half-way).

    A no-op in float32. Only linear weights are cast: autocast casts them anyway, while weights that
    autocast leaves in float32 (norms, the embedding lookup) would change the arithmetic. A bias, if any,
    stays a float32 master (autocast casts it as before). A frozen head tied to the embedding computes from
    the copy while the lookup reads the master: the same numbers as before, and the tie is back on exit.
    """

    def __init__(self, model: torch.nn.Module, dtype: torch.dtype) -> None:
        self.model, self.dtype = model, dtype
        self.swapped: list[tuple[torch.nn.Linear, torch.nn.Parameter, torch.nn.Parameter]] = []

    def __enter__(self) -> "FrozenLinearsCast":
        if self.dtype != torch.float32:
            for module in self.model.modules():
                weight = module.weight if isinstance(module, torch.nn.Linear) else None
                if weight is not None and not weight.requires_grad and weight.dtype == torch.float32:
                    copy = torch.nn.Parameter(weight.detach().to(self.dtype), requires_grad=False)
                    self.swapped.append((module, weight, copy))
        self._use(copies=True)
        return self

    def __exit__(self, *exc) -> None:
        self._use(copies=False)
        self.swapped = []

    @property
    def count(self) -> int:
        return len(self.swapped)

    def _use(self, copies: bool) -> None:
        for module, master, copy in self.swapped:
            module.weight = copy if copies else master

    @contextlib.contextmanager
    def masters(self):
        self._use(copies=False)
        try:
            yield
        finally:
            self._use(copies=True)


def for_sampling(model: torch.nn.Module, dtype: torch.dtype) -> torch.nn.Module:
    """The model cast to `dtype` in place, for generation only (untouched in float32)."""
    return model if dtype == torch.float32 else model.to(dtype)
