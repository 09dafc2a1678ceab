#!/usr/bin/env bash
# The learning check on one GPU: the household game on SmolLM2-135M-Instruct, full loop vs outcome only,
# one seed, printed as held-out success and judge benchmark before/after per row (rla_bench/learning_check.py).
# Needs `make install` (SmolLM2 converted into .models/); uses vLLM and DeepSpeed when they are installed.
# Sized for <= 10 minutes on one H200 (configs/gpu_check.yaml). `--micro` runs it on a CPU in a few
# minutes (what the CI checks). Extra arguments go to `rla bench learning-check` (e.g. --set run.seed=1).
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PY:-.venv/bin/python}
OUT=${OUT:-runs}
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader 2>/dev/null || echo "no GPU visible"
exec timeout "${LIMIT_S:-900}" "$PY" -m flows.cli bench learning-check --out "$OUT" "$@"
