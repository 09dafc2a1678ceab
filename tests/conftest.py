"""Test-session settings: the CLI's embedded defaults (no telemetry, quiet Prefect), one torch thread
(tiny models are far slower with two on a shared 2-core box)."""
from flows.cli import embedded_environment

embedded_environment()

import torch  # noqa: E402

torch.set_num_threads(1)
