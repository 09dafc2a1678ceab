"""`rla ablation --warm-start DIR`: each seed's warm start taken from an earlier ablation instead of computed.

A seed's warm start (seed store and task files, initial and warm-started models, baseline evaluation) is
the same in every row of an ablation (flows/ablation.py). A dev sweep of λ, or a row added later, can
therefore reuse the warm start of an earlier ablation folder of the same config, and costs only its RL
iterations (on SmolLM2 coding the warm start is about 25 minutes a seed). The earlier run must have been
made with the same config apart from what rows and ablations change: λ, the rows' switches and the run's
name, folder and MLflow store; anything else (another warm-start length, another code version's defaults)
is refused with the keys that differ, since its warm start would not be this config's.
"""
from __future__ import annotations

from pathlib import Path

from rla_core.ablation import ROWS, JudgeWeight, Row, row_overrides
from rla_core.config import ConfigError, config_differences, load_config, load_run_config
from rla_core.errors import BadValue, MissingFile
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


def _shown(path: Path) -> Path:
    path = path.absolute()
    try:
        return path.relative_to(Path.cwd())
    except ValueError:
        return path


def check_warm_start(source: str, root: Path, configs: list[str] | None, overrides: list[str], row: Row,
                     weight: JudgeWeight, experiment: str, seeds: range) -> None:
    """Every seed's warm start exists under the ablation folder `source` and was made with this config
    (the config of `row` at that seed, apart from the keys rows and ablations set); else one UserError."""
    folder = Path(source).resolve()
    if not folder.is_dir():
        raise MissingFile(f"--warm-start {source}: no such ablation folder")
    if folder == root:
        raise BadValue(f"--warm-start {source} is this ablation's own folder; its rows share their warm start already")
    allowed = {"run.name", "tracking.mlflow_uri", "tracking.experiment", "judge.train",
               "environment.adapt", weight.key}
    for seed in seeds:
        found = warm_start_source(folder, seed)
        if found is None:
            raise MissingFile(f"{_shown(folder)}: no finished warm start of seed {seed} (a <row>-seed{seed} run "
                              f"with config.yaml and {', '.join(WARM_START)} done); run that seed there first")
        mine = load_config(configs, [*overrides, *row_overrides(weight, experiment, str(root), row, seed)])
        theirs = load_run_config(found / CONFIG_FILE)
        differ = [key for key in config_differences(theirs, mine) if key not in allowed]
        if differ:
            shown = "; ".join(f"{key}: {_value(theirs, key)} there, {_value(mine, key)} here" for key in differ[:3])
            more = f"; and {len(differ) - 3} more keys" if len(differ) > 3 else ""
            raise ConfigError(f"{_shown(found)} was warm-started with another config ({shown}{more}); --warm-start "
                              "reuses a warm start only where the config differs in λ and the rows' switches: set "
                              "those keys as that run had them")


def _value(cfg: object, key: str) -> str:
    for part in key.split("."):
        cfg = getattr(cfg, part, None)
    text = str(cfg).lower() if isinstance(cfg, bool) else str(cfg)
    return text if len(text) <= 40 else text[:37] + "..."
