"""One ablation table from runs of several folders (`rla ablation-report`).

An ablation's rows are often not all in one folder: a dev sweep of λ puts row (d) at each λ in an
ablation folder of its own (`rla ablation --warm-start`), and a row added later may run elsewhere.
`collect_runs` gathers the `<row>-seed<s>` run folders of the given folders (an ablation folder, or one
such run folder) and refuses, before anything is written, whatever would make the table compare unlike
runs:
- two run folders for the same (row, seed);
- a run whose config does not have its row's switches (λ > 0 or = 0, judge.train, environment.adapt);
- one row at two values of λ;
- a config that differs from the first run's beyond what rows and seeds change (λ, the switches, the
  seed, the run's name and folder, the MLflow store) and what changes no result
  (rla_core.ablation.UNMEASURED_KEYS: how often a run is evaluated on the way, DVC, checkpoints kept):
  another length (run.iterations), warm-start length, budget or code version's defaults would not be the
  same experiment.
The table itself is tasks/reports/ablation.py's, read from the run folders alone.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from rla_core.ablation import ROWS, experiment_differences, parse_rows
from rla_core.config import Config, ConfigError, config_differences, load_run_config, shown_value
from rla_core.errors import BadValue, MissingFile
from tasks.paths import CONFIG_FILE
from tasks.reports.ablation import read_run, summary_markdown, write_report
from tasks.settings import setting_for

RUN_NAME = re.compile(r"^([a-z])-seed(\d+)$")


@dataclass(frozen=True)
class AblationRun:
    row: str
    seed: int
    folder: Path
    config: Config
    weight: float  # λ (the setting's judge_weight_key)


def _runs_in(folder: Path) -> list[Path]:
    """`folder` itself when it is a `<row>-seed<s>` run, else its `<row>-seed<s>` sub-folders with a config."""
    if (folder / CONFIG_FILE).is_file():
        if not RUN_NAME.match(folder.name):
            raise BadValue(f"{folder}: a run folder, but not named <row>-seed<s> as ablation runs are "
                           "(e.g. d-seed1); give the ablation folder or one of its runs")
        return [folder]
    found = sorted(p for p in folder.iterdir() if p.is_dir() and RUN_NAME.match(p.name) and (p / CONFIG_FILE).is_file())
    if not found:
        raise MissingFile(f"{folder}: no ablation runs there (no <row>-seed<s> folder with {CONFIG_FILE})")
    return found


def _row_switches(run: AblationRun) -> list[str]:
    """How `run`'s config differs from the switches of the row its folder names; [] when it has them."""
    row = ROWS[run.row]
    wrong = []
    if (run.weight > 0) != row.step_rewards:
        wrong.append(f"λ = {run.weight:g}, the row has λ {'> 0' if row.step_rewards else '= 0'}")
    if run.config.judge.train != row.judge_train:
        wrong.append(f"judge.train {str(run.config.judge.train).lower()}")
    if run.config.environment.adapt != row.adapt:
        wrong.append(f"environment.adapt {str(run.config.environment.adapt).lower()}")
    return wrong


def collect_runs(folders: list[str]) -> list[AblationRun]:
    """Every `<row>-seed<s>` run of `folders`, ordered by row (a…e) then seed; one UserError for the first
    thing that would make the table compare unlike runs (module docstring)."""
    runs: dict[tuple[str, int], AblationRun] = {}
    seen: set[Path] = set()
    for given in folders:
        folder = Path(given).resolve()
        if not folder.is_dir():
            raise MissingFile(f"{given}: no such folder")
        for path in _runs_in(folder):
            if path in seen:
                continue
            seen.add(path)
            match = RUN_NAME.match(path.name)
            assert match is not None
            key, seed = match.group(1), int(match.group(2))
            if key not in ROWS:
                raise BadValue(f"{path}: row '{key}' is not an ablation row ({', '.join(ROWS)})")
            config = load_run_config(path / CONFIG_FILE)
            run = AblationRun(key, seed, path, config, setting_for(config).judge_weight(config).value)
            if (key, seed) in runs:
                raise BadValue(f"row ({key}), seed {seed} twice: {runs[key, seed].folder} and {path}; give the "
                               "one to report (its run folder) instead of both ablation folders")
            wrong = _row_switches(run)
            if wrong:
                raise ConfigError(f"{path}: named row ({key}) {ROWS[key].label}, but its config has "
                                  f"{'; '.join(wrong)}")
            runs[key, seed] = run
    ordered = [runs[k] for k in sorted(runs, key=lambda k: (list(ROWS).index(k[0]), k[1]))]
    _check_same_experiment(ordered)
    return ordered


def _check_same_experiment(runs: list[AblationRun]) -> None:
    first = runs[0]
    weight_key = setting_for(first.config).judge_weight_key
    trainer = next((r for r in runs if r.config.judge.train), None)  # the first run that trains its judge
    for run in runs[1:]:
        same_row = [r for r in runs if r.row == run.row]
        if run.weight != same_row[0].weight:
            raise ConfigError(f"row ({run.row}) at two values of λ ({weight_key}): {same_row[0].weight:g} in "
                              f"{same_row[0].folder}, {run.weight:g} in {run.folder}; report one λ per row")
        # the judge's training keys matter between runs that train their judge only
        other = first
        differ = experiment_differences(config_differences(first.config, run.config), weight_key, judge_trained=False)
        if run.config.run.iterations != first.config.run.iterations:  # free to continue a run, not to compare
            differ.insert(0, "run.iterations")
        if not differ and run.config.judge.train and trainer is not run:
            other = trainer
            differ = experiment_differences(config_differences(trainer.config, run.config), weight_key)
        if differ:
            shown = "; ".join(f"{k}: {shown_value(other.config, k)} in {other.folder.name}, {shown_value(run.config, k)}"
                              for k in differ[:3])
            more = f"; and {len(differ) - 3} more keys" if len(differ) > 3 else ""
            raise ConfigError(f"{run.folder} is not the same experiment as {other.folder} ({shown}{more}); an "
                              "ablation table compares runs that differ only in their row's switches, λ and seed")


def report_runs(folders: list[str], into: str, rows: str | None = None) -> dict:
    """The ablation table of the runs of `folders` (`rows`, e.g. "ade"; default every row found, a…e),
    written to `into` as ablation.csv/.md/.png; returns the table, the files and the runs.
    Unfinished runs are reported as far as they got, each named in `unfinished`."""
    runs = collect_runs(folders)
    found = list(dict.fromkeys(r.row for r in runs))
    keys = [row.key for row in parse_rows(rows)] if rows else found
    missing = [k for k in keys if k not in found]
    if missing:
        raise BadValue(f"--rows {rows}: no runs of row {', '.join(f'({k})' for k in missing)} in the given folders "
                       f"(found {', '.join(f'({k})' for k in found)})")
    target = Path(into).resolve()
    if target.is_dir() and any(RUN_NAME.match(p.name) and (p / CONFIG_FILE).is_file() for p in target.iterdir()):
        raise BadValue(f"--into {into} is an ablation folder; its own report would be overwritten: give a new folder")
    chosen = [r for r in runs if r.row in keys]
    results = [read_run(r.folder, r.row, r.seed) for r in chosen]
    unfinished = [f"{r.folder} ({res.iterations} of {r.config.run.iterations} iterations)"
                  for r, res in zip(chosen, results) if res.iterations < r.config.run.iterations]
    target.mkdir(parents=True, exist_ok=True)
    files = write_report(target, results, keys)
    return {"table": summary_markdown(results, keys), "files": {k: str(v) for k, v in files.items()},
            "runs": [str(r.folder) for r in chosen], "unfinished": unfinished}
