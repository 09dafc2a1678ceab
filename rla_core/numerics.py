"""One float path for BLAS on every x86 CPU, so that CPU runs can agree across machines.

Measured (docs/design.md, "What is deterministic"): on an AMD EPYC (Zen 4, AVX-512) MKL runs its AVX2 sgemm kernels
whatever MKL_ENABLE_INSTRUCTIONS says, while on an Intel Xeon it runs its AVX-512 kernels: the same matmul
rounds differently, training drifts apart and sampling then picks other tokens. MKL's conditional numerical
reproducibility mode `MKL_CBWR=AVX2` pins the AVX2 kernels on every CPU that has them; on the EPYC it leaves
every result bit-identical (it is the path MKL took there already). ATen's own element-wise kernels dispatch
on `torch.backends.cpu.get_cpu_capability()` (AVX512 on both), which runs record beside their numbers.

MKL reads the variable at its first call, so this must run before any matmul: `rla_core/__init__.py` calls
it. A user's own MKL_CBWR wins (`MKL_CBWR=AUTO` lets MKL take the fastest kernels of the CPU).
"""
from __future__ import annotations

import os

BLAS_PATH = "AVX2"


def pin_blas_path() -> str:
    """Set MKL_CBWR to AVX2 unless the environment already sets it; returns the value in force."""
    return os.environ.setdefault("MKL_CBWR", BLAS_PATH)


def cpu_model() -> str:
    """The CPU's model name (/proc/cpuinfo), else platform.processor()."""
    import platform

    try:
        with open("/proc/cpuinfo") as info:
            for line in info:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def numerics_tags() -> dict[str, str]:
    """What decides the float path of a CPU run, to record beside its numbers: CPU model, ATen kernel
    capability, MKL_CBWR, torch threads and version (bit-identical runs need all five equal)."""
    import torch

    return {"cpu.model": cpu_model(), "cpu.aten_capability": torch.backends.cpu.get_cpu_capability(),
            "cpu.mkl_cbwr": os.environ.get("MKL_CBWR", ""), "cpu.torch_threads": str(torch.get_num_threads()),
            "torch.version": torch.__version__}
