"""Importing rla_core pins MKL's float path before any matmul; a user's own MKL_CBWR wins."""
from __future__ import annotations

import os
import subprocess
import sys

PROBE = "import os, rla_core, torch; torch.ones(8, 8) @ torch.ones(8, 8); print(os.environ['MKL_CBWR'])"


def _run(env_extra: dict[str, str]) -> str:
    env = {k: v for k, v in os.environ.items() if k != "MKL_CBWR"} | env_extra
    return subprocess.run([sys.executable, "-c", PROBE], env=env, capture_output=True, text=True,
                          check=True).stdout.strip()


def test_import_pins_mkl_to_its_avx2_path():
    assert _run({}) == "AVX2"


def test_user_setting_wins():
    assert _run({"MKL_CBWR": "AUTO"}) == "AUTO"
