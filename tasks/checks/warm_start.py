"""A seed's warm start in an ablation folder, for `rla ablation --warm-start DIR` (checked by
tasks/checks/preflight.py:check_warm_start, copied by flows/ablation.py).

A seed's warm start (seed store and task files, initial and warm-started models, baseline evaluation) is
the same in every row of an ablation (flows/ablation.py). A dev sweep of λ, or a row added later, can
therefore reuse the warm start of an earlier ablation folder of the same config, and costs only its RL
iterations (on SmolLM2 coding the warm start is about 25 minutes a seed). The earlier run must have been
made with the same config apart from what rows and ablations change (λ, the rows' switches and the
run's name and folder) and what changes no result (rla_core.ablation.UNMEASURED_KEYS: anything under
`tracking` or `versioning`, how often the run is evaluated on the way; and its length); anything else
(another warm-start length, another code version's defaults) is refused with the keys that differ, since
its warm start would not be this config's.
"""
from __future__ import annotations

from pathlib import Path

from rla_core.ablation import ROWS
from tasks.paths import CONFIG_FILE
from tasks.storage.files import is_done

WARM_START = ("seed", "models/init", "models/bootstrap", "baseline")  # a seed's warm start, the same in every row


def warm_start_source(root: Path, seed: int) -> Path | None:
    """The first `<row>-seed<seed>` run folder under the ablation folder `root` (rows in order) whose
    config and whole warm start are there; None when no row of that seed has one."""
    for key in ROWS:
        folder = root / f"{key}-seed{seed}"
        if (folder / CONFIG_FILE).is_file() and all(is_done(folder / rel) for rel in WARM_START):
            return folder
    return None
