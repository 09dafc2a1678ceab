"""Pre-flight: every check of a command's input that needs neither Prefect nor a model, run before any
flow or server starts and before anything is written. A failure is one UserError line that names the
file and line (or the config key) and what is wrong; the CLI prints it and exits 2, and the run folder
and its MLflow store are left as they were.

Checked, where it exists and the command will read it:
  the config        YAML syntax, keys and values (rla_core.config.load_config); run.name a folder name;
                    the registered names (environment, rewriter, rollout and trainer backends)
  the run folder    a folder; its config.yaml parses and differs from this config only where a run may
                    change (rla_core.config.run_mismatch, the check prepare_run_dir repeats); folders
                    where the run keeps folders, files where it keeps files; iteration folders named
                    iter_NNNN; every _DONE marker a JSON object
  records           of finished stages, line by line: the seed and adapted task stores, held-out and dev
                    tasks, the judge benchmarks, an unfinished iteration's tasks, trajectories, verdicts, batches
                    and adapt report; metrics files the summary table reads
  model folders     of finished stages (models/init/*, models/bootstrap/*, iterations/*/train_*/model)
                    and models.*.path: config.json, tokenizer, weights; safetensors headers against the
                    file size; optimizer.pt readable as a zip archive
  ablations         the rows and seeds, every (row, seed) run folder that exists, and with --warm-start
                    each seed's warm start in the earlier ablation folder and its config (check_warm_start)
  task files        the ones a run seeds from: environment.heldout_file, reserved_files and eval.dev_file
                    (each task for this environment, with a valid spec), eval.judge_benchmark and
                    eval.dev_judge_benchmark
"""
# Over 400 lines: every check of a run folder and of the inputs of every command, in the order they run.
from __future__ import annotations

import functools
import json
import struct
import zipfile
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ValidationError

from rla_core.adaptation.cycle import AdaptReport
from rla_core.adaptation.store import META_FILE, SLOTS_FILE, TaskStore
from rla_core.ablation import ITERATION_ONLY_KEYS, JudgeWeight, Row, experiment_differences, row_overrides
from rla_core.config import (Config, ConfigError, config_differences, key_under, load_config, load_run_config,
                             resolve_data_path, run_mismatch, shown_value)
from rla_core.envs.base import check_task_lines, get_environment
from rla_core.errors import BadValue, DataError, MissingFile
from rla_core.judge.benchmark import BenchmarkStep
from rla_core.models.pretrained import resolve as resolve_model
from rla_core.records import explain_record_error, load_json_file, read_numbered
from rla_core.schemas import Task
from tasks.common import bind_environment
from tasks.checks.warm_start import WARM_START, warm_start_source
from tasks.paths import COMPLETE, CONFIG_FILE, ITERATIONS, ROLES, RUN_ID_FILE, RunPaths, parse_iteration
from tasks.storage.files import DONE_MARKER
from tasks.storage.retention import is_pruned

Command = Literal["run", "seed", "prepare", "eval"]

RUN_ENTRIES = ("seed", "models", ITERATIONS, "baseline", "eval", "mlflow.db", RUN_ID_FILE)
FOLDERS = ("seed", "seed/store", "models", "models/init", "models/bootstrap", "baseline", ITERATIONS, "eval")
FILES = (CONFIG_FILE, RUN_ID_FILE, "seed/heldout.jsonl", "seed/reserved.json", "seed/dev.jsonl",
         "seed/judge_benchmark.jsonl", "seed/judge_benchmark_dev.jsonl", "baseline/metrics.json")
WEIGHTS = ("model.safetensors", "model.safetensors.index.json", "pytorch_model.bin", "pytorch_model.bin.index.json")
MAX_HEADER = 100 * 2**20  # a safetensors header larger than this is corrupt


def _rel(path: Path) -> Path:
    """`path` relative to the working directory when it is under it (shorter messages), else absolute."""
    path = Path(path).absolute()
    try:
        return path.relative_to(Path.cwd())
    except ValueError:
        return path


def _kind(path: Path) -> str:
    return "folder" if path.is_dir() else "file"


def _records(path: Path, record_type: type[BaseModel], required: bool, why: str = "") -> int:
    """Every line of a JSONL file parses as `record_type`; `required`: at least one record."""
    path = _rel(path)
    if not path.is_file():
        raise (DataError if path.exists() else MissingFile)(
            f"{path}: {'is a folder, expected' if path.exists() else 'missing; expected'} a JSONL file of "
            f"{record_type.__name__} records{why}")
    count = _cached_records(str(path.absolute()), *_stamp(path), record_type)
    if required and not count:
        raise DataError(f"{path}: no {record_type.__name__} records (empty file){why}")
    return count


def _stamp(path: Path) -> tuple[int, int]:
    stat = path.stat()
    return stat.st_mtime_ns, stat.st_size


@functools.lru_cache(maxsize=256)
def _cached_records(path: str, mtime_ns: int, size: int, record_type: type[BaseModel]) -> int:
    return len(read_numbered(_rel(Path(path)), record_type))


def _json_object(path: Path, what: str) -> dict:
    path = _rel(path)
    value = load_json_file(path)
    if not isinstance(value, dict):
        raise DataError(f"{path}: {what} must be a JSON object, got a {type(value).__name__}")
    return value


def _store(folder: Path, why: str = "") -> None:
    """A task store folder: store.json of this format and at least one valid slot per line."""
    folder = _rel(folder)
    if not folder.is_dir():
        raise (DataError if folder.exists() else MissingFile)(
            f"{folder}: {'is a file, expected' if folder.exists() else 'missing; expected'} a task store "
            f"folder{why}")
    meta = _json_object(folder / META_FILE, "a task store's store.json")
    if "format_version" not in meta:
        raise DataError(f"{folder / META_FILE}: no format_version; not a task store's store.json")
    if not (folder / SLOTS_FILE).is_file():
        raise MissingFile(f"{folder / SLOTS_FILE}: missing; expected a JSONL file of Slot records{why}")
    if not len(TaskStore.load(folder)):  # every line a Slot, unique ids, this format: errors name the line
        raise DataError(f"{folder / SLOTS_FILE}: no Slot records (empty file){why}")


# --------------------------------------------------------------------------- models and checkpoints
def check_safetensors(path: Path) -> None:
    """The header of a safetensors file reads and describes exactly the bytes that follow it."""
    path = _rel(path)
    size = path.stat().st_size
    with open(path, "rb") as f:
        head = f.read(8)
        if len(head) < 8:
            raise DataError(f"{path}: truncated checkpoint ({size} bytes, no safetensors header)")
        length = struct.unpack("<Q", head)[0]
        if length > min(size - 8, MAX_HEADER):
            raise DataError(f"{path}: truncated or corrupt checkpoint (its header claims {length} bytes, the "
                            f"file has {size})")
        raw = f.read(length)
    try:
        header = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError, RecursionError):
        raise DataError(f"{path}: corrupt checkpoint (the safetensors header is not JSON)") from None
    if not isinstance(header, dict):
        raise DataError(f"{path}: corrupt checkpoint (the safetensors header is not a JSON object)")
    end = 0
    for name, info in header.items():
        if name == "__metadata__":
            continue
        offsets = info.get("data_offsets") if isinstance(info, dict) else None
        if not (isinstance(offsets, list) and len(offsets) == 2 and all(isinstance(o, int) for o in offsets)):
            raise DataError(f"{path}: corrupt checkpoint (tensor '{name}' has no data_offsets)")
        end = max(end, offsets[1])
    data = size - 8 - length
    if end != data:
        raise DataError(f"{path}: truncated or corrupt checkpoint (its header describes {end} bytes of tensors, "
                        f"the file holds {data})")


def check_optimizer_state(path: Path) -> None:
    """optimizer.pt as torch.save writes it: a zip archive whose directory reads (a cut file has none)."""
    path = _rel(path)
    try:
        with zipfile.ZipFile(path) as archive:
            archive.namelist()
    except (zipfile.BadZipFile, OSError, EOFError) as err:
        raise DataError(f"{path}: truncated or corrupt optimizer state ({err})") from None


def check_model_dir(folder: Path, why: str = "") -> None:
    """A local Hugging Face causal-LM folder as save_pretrained writes it: config.json, a tokenizer,
    readable weights (and, beside a trained model, a readable optimizer.pt). `why` ends the messages
    that a folder is missing or is not a model folder (who expects one there)."""
    folder = _rel(folder)
    if not folder.is_dir():
        raise (DataError if folder.exists() else MissingFile)(
            f"{folder}: {'is a file, expected' if folder.exists() else 'missing; expected'} a model folder{why}")
    if not (folder / "config.json").is_file():
        raise DataError(f"{folder}: no config.json, so not a Hugging Face model folder{why}")
    _json_object(folder / "config.json", "a model's config.json")
    if not any((folder / name).is_file() for name in ("tokenizer.json", "tokenizer_config.json")):
        raise DataError(f"{folder}: no tokenizer (tokenizer.json or tokenizer_config.json)")
    for name in ("tokenizer.json", "tokenizer_config.json", "generation_config.json"):
        if (folder / name).is_file():
            load_json_file(folder / name)
    if not any((folder / name).is_file() for name in WEIGHTS):
        raise DataError(f"{folder}: no weights ({WEIGHTS[0]})")
    for index_name in WEIGHTS[1::2]:
        if (folder / index_name).is_file():
            weight_map = _json_object(folder / index_name, "a weights index").get("weight_map", {})
            for shard in sorted(set(weight_map.values()) if isinstance(weight_map, dict) else []):
                if not (folder / str(shard)).is_file():
                    raise DataError(f"{folder / index_name}: names the shard {shard}, which is missing")
    for weights in sorted(folder.glob("*.safetensors")):
        check_safetensors(weights)
    if (folder / "optimizer.pt").exists():
        check_optimizer_state(folder / "optimizer.pt")


# --------------------------------------------------------------------------- the config and its files
def _check_names(cfg: Config) -> None:
    """Registered names fail here, not in the stage that first needs them (minutes into a run)."""
    from rla_core.adaptation.rewriters import REWRITERS
    from rla_core.rollout.base import ENGINES
    from rla_core.training.base import TRAINERS

    get_environment(cfg.environment.name)
    for registry, name in ((REWRITERS, cfg.environment.rewriter), (ENGINES, cfg.rollout.backend),
                           (TRAINERS, cfg.train.backend)):
        if name not in registry:
            registry.get(name)  # raises UnknownName naming the key and the valid names


def _check_run_name(cfg: Config) -> None:
    name = cfg.run.name
    parts = Path(name).parts
    if not name.strip() or Path(name).is_absolute() or any(p in (".", "..") for p in parts) or "\\" in name:
        raise ConfigError(f"config key 'run.name': {name!r} is not a run folder name (a name under "
                          "run.output_dir, e.g. quickstart)")
    output_dir = _rel(Path(cfg.run.output_dir))
    for parent in (output_dir, *output_dir.parents):
        if parent.exists() and not parent.is_dir():
            raise ConfigError(f"config key 'run.output_dir': {parent} is a file, not a folder")


def _looked_at(name: str, resolved: Path) -> str:
    return "" if Path(name).absolute() == resolved.absolute() else f" (looked at {_rel(resolved)})"


def _task_file(name: str, key: str, cfg: Config) -> None:
    resolved = resolve_data_path(name)
    if not resolved.is_file():
        raise MissingFile(f"{key}: task file not found: {name}{_looked_at(name, resolved)}")
    family, horizon = get_environment(cfg.environment.name), cfg.rollout.max_steps
    _checked_task_file(str(resolved), *_stamp(resolved), family.name, horizon, key)


@functools.lru_cache(maxsize=64)
def _checked_task_file(path: str, mtime_ns: int, size: int, env: str, horizon: int, key: str) -> None:
    shown = _rel(Path(path))
    numbered = read_numbered(shown, Task)
    if not numbered:
        raise DataError(f"{shown}: no tasks (empty file); {key} names it")
    check_task_lines(numbered, get_environment(env), horizon, str(shown))


def _benchmark_file(name: str, key: str = "eval.judge_benchmark") -> None:
    resolved = resolve_data_path(name)
    if not resolved.is_file():
        raise MissingFile(f"{key}: file not found: {name}{_looked_at(name, resolved)}")
    _records(resolved, BenchmarkStep, True, f"; {key} names it")


def _check_inputs(cfg: Config, paths: RunPaths | None) -> None:
    """The files a run seeds from (when the seed stage is still to run) and the models it starts from
    (when models/init is still to be built); `paths` None: a run yet to start."""
    env = cfg.environment
    if paths is None or not (paths.seed_store.parent / DONE_MARKER).is_file():
        if env.heldout_file:
            _task_file(env.heldout_file, "environment.heldout_file", cfg)
        for name in env.reserved_files:
            _task_file(name, "environment.reserved_files", cfg)
        if cfg.eval.dev_file:
            _task_file(cfg.eval.dev_file, "eval.dev_file", cfg)
        if cfg.eval.judge_benchmark:
            _benchmark_file(cfg.eval.judge_benchmark)
        if cfg.eval.dev_judge_benchmark:
            _benchmark_file(cfg.eval.dev_judge_benchmark, "eval.dev_judge_benchmark")
    if paths is None or not (paths.init_models / DONE_MARKER).is_file():
        for role in ("policy", "judge", "environment"):
            spec = getattr(cfg.models, role)
            if spec.path is not None:
                folder = Path(resolve_model(spec.path))  # a known name: converted (once) here
                if not folder.exists():
                    raise MissingFile(f"models.{role}.path: model folder not found: {spec.path}")
                check_model_dir(folder, f" (models.{role}.path)")


# --------------------------------------------------------------------------- the run folder
def _run_config(paths: RunPaths) -> Config:
    shown = _rel(paths.config)
    try:
        return load_run_config(shown)
    except ConfigError as err:
        message = str(err)
        raise DataError(message if message.startswith(str(shown)) else f"{shown}: not a config of this version "
                        f"({message})") from None


def _check_layout(paths: RunPaths) -> list[tuple[int, Path]]:
    """Folders where the run keeps folders, files where it keeps files; returns (k, folder) of every
    iteration folder."""
    root = paths.root
    for rel in FOLDERS:
        if (root / rel).exists() and not (root / rel).is_dir():
            raise DataError(f"{_rel(root / rel)}: is a file where a run keeps a folder")
    for rel in FILES:
        if (root / rel).is_dir():
            raise DataError(f"{_rel(root / rel)}: is a folder where a run keeps a file")
    iterations = []
    if (root / ITERATIONS).is_dir():
        for child in sorted((root / ITERATIONS).iterdir()):
            if not child.name.startswith("iter_"):
                continue
            k = parse_iteration(child.name)
            if k is None:
                if child.is_dir():
                    raise DataError(f"{_rel(child)}: not an iteration folder name (iter_0001, iter_0002, ...); "
                                    f"move it out of {_rel(child.parent)}")
                continue
            if not child.is_dir():
                raise DataError(f"{_rel(child)}: is a file where a run keeps iteration {k}")
            if (child / COMPLETE).is_dir():
                raise DataError(f"{_rel(child / COMPLETE)}: is a folder where a run keeps a marker file")
            iterations.append((k, child))
    return iterations


def _done(folder: Path) -> dict | None:
    """The summary in `folder`'s _DONE marker (None when the stage has not finished)."""
    marker = folder / DONE_MARKER
    if not marker.exists():
        return None
    if marker.is_dir():
        raise DataError(f"{_rel(marker)}: is a folder where a stage keeps its completion marker")
    return _json_object(marker, "a stage's completion marker (_DONE)")


def _finished(folder: Path, rel: str) -> str:
    return f" ({_rel(folder / DONE_MARKER)} marks {rel} finished)"


def _check_run_level(paths: RunPaths) -> None:
    root = paths.root
    seed = root / "seed"
    if _done(seed) is not None:
        why = _finished(seed, "the seed stage")
        _store(paths.seed_store, why)
        _records(paths.heldout, Task, True, why)
        if paths.reserved.exists():
            if not isinstance(load_json_file(_rel(paths.reserved)), list):
                raise DataError(f"{_rel(paths.reserved)}: must be a JSON list of game hashes")
        for benchmark in (paths.judge_benchmark, paths.judge_benchmark_dev):
            if benchmark.exists():
                _records(benchmark, BenchmarkStep, True, why)
        if paths.dev.exists():
            _records(paths.dev, Task, True, why)
    for folder, what in ((paths.init_models, "models/init"), (paths.bootstrap, "the warm-start")):
        if _done(folder) is not None:
            for role in ROLES:  # and the environment model where there is one (older runs have none)
                check_model_dir(folder / role, _finished(folder, what))
            if (folder / "environment").exists():
                check_model_dir(folder / "environment")
    if _done(paths.baseline) is not None:
        _json_object(paths.baseline / "metrics.json", "the baseline's metrics.json")
    if (root / "eval").is_dir():
        for folder in sorted((root / "eval").iterdir()):
            if folder.is_dir():
                _done(folder)


def _records_of(name: str) -> tuple[tuple[str, type, bool], ...]:
    """What the iteration stage `name` leaves for the stages after it (its @stage(records=...))."""
    from tasks.pipeline import ITERATION  # the stages import Prefect: only when a run folder is checked

    return next((s.records for s in ITERATION if s.name == name), ())


def _check_iterations(paths: RunPaths, iterations: list[tuple[int, Path]]) -> None:
    """Markers of every iteration; the outputs of finished stages of unfinished iterations (the next run
    reads them); the models every finished training stage points to; the store the next iteration
    starts from; the metrics of evaluated iterations (the summary table reads them)."""
    for k, folder in iterations:
        complete = (folder / COMPLETE).is_file()
        for stage in sorted(p for p in folder.iterdir() if p.is_dir() and not p.name.startswith(".")):
            summary = _done(stage)
            if summary is None:
                continue  # an unfinished stage is redone from scratch
            why = _finished(stage, f"iteration {k}'s {stage.name} stage")
            if stage.name in ("train_policy", "train_judge"):
                model_dir = summary.get("model_dir")
                if isinstance(model_dir, str) and is_pruned(paths.root / model_dir):
                    continue  # deleted by run.keep_checkpoints; a newer checkpoint is what the run goes on from
                if not isinstance(model_dir, str) or not (paths.root / model_dir).is_dir():
                    raise DataError(f"{_rel(stage / DONE_MARKER)}: model_dir {model_dir!r} is not a model folder "
                                    "of this run")
                check_model_dir(paths.root / model_dir, why)
            elif stage.name == "evaluate" and (stage / "metrics.json").exists():  # absent: not evaluated
                _json_object(stage / "metrics.json", "an evaluation's metrics.json")
            if complete:
                continue
            for name, record_type, required in _records_of(stage.name):
                _records(stage / name, record_type, required, why)
            if stage.name == "adapt":
                _store(stage / "store", why)
                report = _rel(stage / "report.json")
                if not report.is_file():
                    raise MissingFile(f"{report}: missing{why}")
                try:
                    AdaptReport.model_validate_json(report.read_bytes())
                except ValidationError as err:
                    raise DataError(f"{report}: {explain_record_error(err, AdaptReport)}") from None
    done = [k for k, folder in iterations if (folder / COMPLETE).is_file()]
    store = paths.store_dir((max(done) if done else 0) + 1)
    if store != paths.seed_store:
        _store(store, " (the task store the next iteration starts from)")


def _check_run_folder(paths: RunPaths, cfg: Config, command: Command) -> bool:
    """False when there is no run yet; else every check of the module doc on the run folder."""
    root = paths.root
    if not root.exists():
        return False
    if not root.is_dir():
        raise DataError(f"{_rel(root)}: is a file, not a run folder; choose another run.name")
    if not paths.config.exists():
        outputs = [name + "/" * (root / name).is_dir() for name in RUN_ENTRIES if (root / name).exists()]
        if outputs and cfg.storage.backend == "local":
            raise DataError(f"{_rel(root)}: holds {outputs[0]} but no config.yaml, so it is not a run folder "
                            "this command can continue; choose another run.name")
        return False
    if paths.config.is_dir():
        raise DataError(f"{_rel(paths.config)}: is a folder where a run keeps its config")
    old = _run_config(paths)
    if command != "eval" and (refusal := run_mismatch(str(_rel(root)), old, cfg)):
        raise ConfigError(refusal)
    iterations = _check_layout(paths)
    _check_run_level(paths)
    if command in ("run", "eval"):
        _check_iterations(paths, iterations)
    return True


def _check_eval(paths: RunPaths, iteration: int | None) -> None:
    """`rla eval`: a run with the warm-start done, and the iteration asked for complete."""
    done = paths.completed_iterations()
    if iteration is not None and iteration < 0:
        raise BadValue(f"--iteration must be >= 0, got {iteration}")
    if iteration is None:
        iteration = done[-1] if done else 0
    if iteration and iteration not in done:
        raise BadValue(f"iteration {iteration} is not complete in {_rel(paths.root)}; completed: {done}")
    if not (paths.bootstrap / DONE_MARKER).is_file():
        raise MissingFile(f"{_rel(paths.root)}: the warm-start has not finished (no {_rel(paths.bootstrap)}/"
                          "_DONE); run `rla run` or `rla bootstrap` first")
    if not paths.heldout.is_file():
        raise MissingFile(f"{_rel(paths.heldout)}: missing; the run was never seeded")


def check(configs: list[str] | None, overrides: list[str] | None, *, command: Command = "run",
          iteration: int | None = None, run_folder: bool = True) -> Config:
    """The config of `configs` + `overrides` once every pre-flight check passed (module doc); else the
    first problem as one UserError. `command` is what will read the run: run (the default: every
    stage), seed and prepare (the run-level stages only), eval (an existing run's models, `iteration`
    by default the latest complete). `run_folder` False checks the config and its files only."""
    cfg = load_config(configs, overrides)
    _check_run_name(cfg)
    _check_names(cfg)
    paths = RunPaths.of(Path(cfg.run.output_dir) / cfg.run.name)
    bind_environment(cfg, paths.root)  # TextWorld: the task files' games are built into the run's games/
    exists = run_folder and _check_run_folder(paths, cfg, command)
    if command == "eval":
        if not exists:
            raise MissingFile(f"no run at {_rel(paths.root)}; run `rla run` with this config first")
        _check_eval(paths, iteration)
        return cfg
    _check_inputs(cfg, paths if exists else None)
    return cfg


def check_ablation(configs: list[str] | None, overrides: list[str] | None, seeds: int, rows: str,
                   name: str, warm_start: str | None = None) -> Config:
    """`rla ablation`: the base config and its files, the rows and seeds, the run folder of every
    (row, seed) that exists already (each is checked like `rla run`, before the first row starts), and
    with `warm_start` every seed's warm start there (tasks/checks/warm_start.py)."""
    from rla_core.ablation import check_base, parse_rows
    from tasks.settings import setting_for

    base = check(configs, overrides, run_folder=False)
    chosen = parse_rows(rows)
    if seeds < 1:
        raise BadValue(f"--seeds must be >= 1, got {seeds}")
    weight = setting_for(base).judge_weight(base)
    check_base(base, chosen, weight)
    if not name.strip() or Path(name).is_absolute() or any(p in (".", "..") for p in Path(name).parts):
        raise BadValue(f"--name {name!r} is not a folder name under run.output_dir")
    root = (Path(base.run.output_dir) / name).resolve()
    if root.exists() and not root.is_dir():
        raise DataError(f"{_rel(root)}: is a file, not an ablation folder; choose another --name")
    if (root / CONFIG_FILE).is_file():
        raise DataError(f"{_rel(root)}: holds a training run, not an ablation; choose another --name")
    if warm_start is not None:
        check_warm_start(warm_start, root, configs, list(overrides or []), chosen[0], weight,
                         base.tracking.experiment, range(base.run.seed, base.run.seed + seeds))
    for seed in range(base.run.seed, base.run.seed + seeds):
        for row in chosen:
            check(configs, [*(overrides or []), *row_overrides(weight, base.tracking.experiment,
                                                                str(root), row, seed)])
    return base


def check_warm_start(source: str, root: Path, configs: list[str] | None, overrides: list[str], row: Row,
                     weight: JudgeWeight, experiment: str, seeds: range) -> None:
    """Every seed's warm start exists under the ablation folder `source` and was made with this config
    (the config of `row` at that seed, apart from the keys rows and ablations set); else one UserError."""
    folder = Path(source).resolve()
    if not folder.is_dir():
        raise MissingFile(f"--warm-start {source}: no such ablation folder")
    if folder == root:
        raise BadValue(f"--warm-start {source} is this ablation's own folder; its rows share their warm start already")
    for seed in seeds:
        found = warm_start_source(folder, seed)
        if found is None:
            raise MissingFile(f"{_rel(folder)}: no finished warm start of seed {seed} (a <row>-seed{seed} run "
                              f"with config.yaml and {', '.join(WARM_START)} done); run that seed there first")
        mine = load_config(configs, [*overrides, *row_overrides(weight, experiment, str(root), row, seed)])
        theirs = load_run_config(found / CONFIG_FILE)
        # where a run is logged, versioned and evaluated on the way does not change its warm start
        # nor do the keys only the iterations read (the lr of either model, the judge's band)
        differ = [key for key in experiment_differences(config_differences(theirs, mine), weight.key)
                  if not key_under(key, ITERATION_ONLY_KEYS)]
        if differ:
            shown = "; ".join(f"{key}: {shown_value(theirs, key)} there, {shown_value(mine, key)} here" for key in differ[:3])
            more = f"; and {len(differ) - 3} more keys" if len(differ) > 3 else ""
            raise ConfigError(f"{_rel(found)} was warm-started with another config ({shown}{more}); --warm-start "
                              "reuses a warm start only where the config differs in λ and the rows' switches: set "
                              "those keys as that run had them")
