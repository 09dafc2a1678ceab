"""The method, pure: no orchestration, tracking or storage imports (docs/design.md)."""
from rla_core.numerics import pin_blas_path

pin_blas_path()  # before any matmul: one BLAS float path on every x86 CPU (rla_core/numerics.py)
