"""What each `rla` subcommand does, and the before/after summary table."""
from __future__ import annotations

import json
import signal
import subprocess
import sys
from pathlib import Path

from rla_core.config import ConfigError, load_config
from rla_core.errors import MissingFile, UserError
from tasks.paths import RunPaths, run_config
from tasks.storage.runlock import hold
from tasks.settings import setting_for
from tasks.storage.files import is_done, write_text
from tasks.summaries import read_summary

# Mistakes a user can fix print as one line; anything else is a bug and keeps its traceback.
USER_ERRORS = (UserError,)


def run_folder(cfg) -> Path:
    return Path(cfg.run.output_dir) / cfg.run.name


def _fmt(value: float | None) -> str:
    return "   n/a" if value is None else f"{value:6.3f}"


def metric_rows(rows: list[tuple[str, str]], before: dict, after: dict) -> list[str]:
    """One line per (label, metric key) of `rows` with its before and after values; a metric neither side
    has (e.g. greedy without eval.greedy_at_end, dev without eval.dev_file) is left out, not shown n/a n/a."""
    return [f"{label:28s} {_fmt(before.get(key)):>8s} {_fmt(after.get(key)):>8s}" for label, key in rows
            if before.get(key) is not None or after.get(key) is not None]


def summary_table(run_dir: str) -> str:
    """Before (warm-start) vs after (last evaluated iteration) on the held-out tasks (and the dev split),
    plus the per-iteration train success rate and task-store counts."""
    from tasks.pipeline import ITERATION  # the stages, for their timers (imports Prefect: not at --help)

    paths = RunPaths.of(run_dir)
    before = json.loads((paths.baseline / "metrics.json").read_text())
    evaluated = [k for k in paths.completed_iterations() if paths.it(k).eval_metrics.is_file()]
    after = json.loads(paths.it(evaluated[-1]).eval_metrics.read_text()) if evaluated else {}
    lines = [f"{'metric':28s} {'before':>8s} {'after':>8s}",
             f"{'episodes':28s} {before.get('heldout/episodes', 0):8.0f} {after.get('heldout/episodes', 0):8.0f}"]
    lines += metric_rows(setting_for(run_config(run_dir)).summary_rows, before, after)
    lines.append("")
    lines.append(f"{'iteration':>9s} {'train succ':>10s} {'policy n':>8s} {'judge n':>8s} {'accepted':>8s} "
                 f"{'proposed':>8s} {'seconds':>8s}")
    for k in paths.completed_iterations():
        roll, data, env = (read_summary(paths.stage(k, name)).metrics for name in ("rollout", "data", "adapt"))
        seconds = sum(read_summary(paths.stage(k, s.name)).seconds or 0.0
                      for s in ITERATION if is_done(paths.stage(k, s.name)))
        lines.append(f"{k:9d} {roll['rollout/success_rate']:10.3f} {data['data/policy/samples']:8.0f} "
                     f"{data['data/judge/samples']:8.0f} {env['adapt/accepted']:8.0f} {env['adapt/proposed']:8.0f} "
                     f"{seconds:8.1f}")
    return "\n".join(lines)


def _portable(summary: dict) -> dict:
    """The summary with a run_dir under the current directory made relative: a committed --out file
    (the root DVC pipeline's pipeline/*.json) names no path of the machine that wrote it."""
    run_dir = summary.get("run_dir")
    if isinstance(run_dir, str) and Path(run_dir).is_absolute() and Path(run_dir).is_relative_to(Path.cwd()):
        return {**summary, "run_dir": str(Path(run_dir).relative_to(Path.cwd()))}
    return summary


def _emit(summary: dict, out: str | None) -> None:
    text = json.dumps(_portable(summary), indent=2, sort_keys=True, default=str)
    if out:
        write_text(out, text + "\n")
    print(text)


def run(configs: list[str], overrides: list[str], out: str | None = None) -> int:
    from tasks.checks import preflight

    cfg = preflight.check(configs, overrides)  # bad input fails here, before any flow or server starts
    from flows.train import train

    with hold(run_folder(cfg)):  # a busy folder is refused before Prefect starts; held until the end
        result = train(configs, overrides)
    if out:
        _emit(result, out)
    print(summary_table(result["run_dir"]))
    print(f"\nrun folder: {result['run_dir']}   MLflow UI: rla ui --run {result['run_dir']}")
    return 0


def seed(configs: list[str], overrides: list[str], out: str | None = None) -> int:
    from tasks.checks import preflight

    cfg = preflight.check(configs, overrides, command="seed")
    from flows.train import seed_run as seed_flow

    with hold(run_folder(cfg)):
        _emit(seed_flow(configs, overrides), out)
    return 0


def prepare(configs: list[str], overrides: list[str], out: str | None = None) -> int:
    from tasks.checks import preflight

    cfg = preflight.check(configs, overrides, command="prepare")
    from flows.train import prepare as prepare_flow

    with hold(run_folder(cfg)):
        _emit(prepare_flow(configs, overrides), out)
    return 0


def evaluate(configs: list[str], overrides: list[str], iteration: int | None, out: str | None = None) -> int:
    from tasks.checks import preflight

    preflight.check(configs, overrides, command="eval", iteration=iteration)
    from flows.train import evaluate_run

    _emit(evaluate_run(configs, overrides, iteration), out)
    return 0


def evaluate_games(configs: list[str], overrides: list[str], iteration: int | None, games: str, episodes: int,
                   temperature: float, out: str | None = None) -> int:
    """`rla eval --games DIR`: the run's policy and judge on every TextWorld game under DIR (tasks/reports/game_eval.py)."""
    from pathlib import Path

    from tasks.checks import preflight

    cfg = preflight.check(configs, overrides, command="eval", iteration=iteration)
    from rla_core.errors import BadValue
    from tasks.reports.game_eval import evaluate_games as play_games
    from tasks.reports.game_eval import log_game_evaluation
    from tasks.paths import RunPaths

    paths = RunPaths.of(run_folder(cfg))
    done = paths.completed_iterations()
    k = iteration if iteration is not None else (done[-1] if done else 0)
    if k and k not in done:
        raise BadValue(f"iteration {k} is not complete in {paths.root}; completed: {done}")
    result = play_games(cfg, paths.root, k, Path(games), episodes, temperature)
    log_game_evaluation(str(paths.root), result)
    if out:
        _emit(result, out)
    print(result["table"])
    for item in result["skipped"]:
        print(f"skipped {item['game']}: {item['reason']}")
    print(f"{sum(int(r['games']) for t, r in result['tiers'].items() if t != 'all')} games, "
          f"{result['seconds']:.1f} s; results: {result['folder']}")
    return 0


def run_ablation(configs: list[str], overrides: list[str], seeds: int, rows: str, name: str,
                 out: str | None = None, warm_start: str | None = None) -> int:
    from tasks.checks import preflight

    preflight.check_ablation(configs, overrides, seeds, rows, name, warm_start)  # before any flow starts
    from flows.ablation import ablation

    result = ablation(configs, overrides, seeds, rows, name, warm_start)
    if out:
        _emit(result, out)
    print(result["table"])
    print(f"files: {', '.join(result['files'].values())}   MLflow UI: rla ui --run {result['root']}")
    return 0


def ablation_report(folders: list[str], into: str, rows: str | None, out: str | None = None) -> int:
    """`rla ablation-report`: one ablation table from the runs of several folders (tasks/reports/ablation_runs.py)."""
    from tasks.reports.ablation_runs import report_runs

    result = report_runs(folders, into, rows)
    if out:
        _emit(result, out)
    print(result["table"])
    for line in result["unfinished"]:
        print(f"unfinished, reported as far as it got: {line}")
    print(f"{len(result['runs'])} runs; files: {', '.join(result['files'].values())}")
    return 0


def build_data(configs: list[str], overrides: list[str], out: str | None) -> int:
    """Task files first (the warm-start must not train on them), then the warm-start of the config's
    run seed in a run of its own, then the judge benchmarks from its policy, then the manifest."""
    from pathlib import Path

    from flows.train import prepare as prepare_flow
    from rla_core.config import PROJECT_ROOT
    from tasks.stages import datasets

    cfg = load_config(configs, overrides)
    folder = Path(out) if out else PROJECT_ROOT / "data" / cfg.environment.name
    folder.mkdir(parents=True, exist_ok=True)
    files = setting_for(cfg).build_data_files(cfg, folder)
    if files is not None:  # problem files only (coding: the judge benchmark is built at seed time)
        command = "rla data build " + " ".join([f"--config {c}" for c in configs] + [f"--set {o}" for o in overrides])
        print(json.dumps(datasets.write_manifest(folder, files, command, ""), indent=2))
        return 0
    from tasks.common import bind_environment

    # TextWorld: the splits' games go to the build run's games/ (the archive is what this writes)
    bind_environment(cfg, Path(cfg.run.output_dir) / f"{cfg.run.name}-data-build", use_archive=False)
    tasks = datasets.build_task_files(cfg, folder)
    print(f"task files: {', '.join(str(p) for p in tasks.values())}")
    build = [f"run.name={cfg.run.name}-data-build", "eval.judge_benchmark=null", "eval.dev_file=null",
             "eval.dev_judge_benchmark=null",  # the files this builds: the build run scores held-out only
             f"environment.heldout_file={tasks['heldout']}", f"environment.reserved_files=[{tasks['dev']}]"]
    run_dir = prepare_flow(configs, overrides + build)["run_dir"]
    splits = {split: tasks[split] for split in datasets.BENCHMARK_FILES}
    files = {**tasks, **datasets.build_benchmarks(load_config(configs, overrides + build), run_dir, splits, folder)}
    command = "rla data build " + " ".join([f"--config {c}" for c in configs] + [f"--set {o}" for o in overrides])
    manifest = datasets.write_manifest(folder, files, command, Path(run_dir).name)
    print(json.dumps(manifest, indent=2))
    return 0


def deploy(gpu_type: str, gpu_slots: int | None, names: list[str] | None) -> int:
    """Create the work pools when missing, then deploy prefect.yaml to the configured Prefect server."""
    from flows import deploy as ops

    ops.deploy(gpu_type, gpu_slots, names)
    print(f"deployed; start workers: rla worker --pool {ops.CPU_POOL}   (GPU hosts: infra/README.md)")
    return 0


def worker(pool: str, limit: int | None, name: str | None) -> int:
    """Become `prefect worker start --pool POOL` (never returns unless the API is not configured)."""
    from flows import deploy as ops

    ops.worker(pool, limit, name)
    return 0


def _ui_link(paths: RunPaths, port: int) -> str:
    """The run's experiment on its runs table: MLflow 3's UI opens experiments on its GenAI pages unless
    the link asks for the machine-learning workflow."""
    from tasks.tracking.tracker import Tracker, experiment_ui_url

    base = f"http://127.0.0.1:{port}"
    try:
        experiment = Tracker(paths.root, run_config(paths.root).tracking).experiment_id
    except (FileNotFoundError, ConfigError):  # a store without its run config: the UI's home page
        return base
    return experiment_ui_url(base, experiment)


def ui(run_dir: str, port: int) -> int:
    """Start `mlflow ui` on 127.0.0.1 for the run's sqlite store; Ctrl-C stops it (by its PID)."""
    paths = RunPaths.of(run_dir)
    db = paths.root / "mlflow.db"
    if not db.is_file():
        raise MissingFile(f"no MLflow store at {db}; run `rla quickstart` or `rla run` first")
    cmd = [sys.executable, "-m", "mlflow", "ui", "--backend-store-uri", f"sqlite:///{db}",
           "--host", "127.0.0.1", "--port", str(port)]
    print(f"MLflow UI on {_ui_link(paths, port)}  (Ctrl-C to stop)")
    process = subprocess.Popen(cmd)
    try:
        return process.wait()
    except KeyboardInterrupt:
        process.send_signal(signal.SIGINT)
        process.wait(timeout=30)
        return 0


def restore(run_dir: str, iteration: int, remote: str | None, into: str | None) -> int:
    """Check out iteration K's files (its inputs and outputs) from the DVC remote into a folder."""
    from pathlib import Path

    from tasks.storage.reproduce import read_record, restore_from_record
    from tasks.storage.versioning import default_remote

    remote = remote or default_remote(run_dir)
    record = read_record(remote, iteration)
    target = Path(into or run_dir)
    pulled = restore_from_record(record, target, remote)
    print(f"restored iteration {iteration} of {record['run']} into {target} from {remote}:")
    for rel in pulled:
        print(f"  {rel}")
    return 0


def reproduce(run_dir: str, iteration: int, remote: str | None, into: str | None) -> int:
    """Re-run iteration K from its inputs in the DVC remote and compare every output with the record: per
    differing metric and file, how much it differs (relative), a summary line, the report in
    <scratch>/reproduce.json."""
    from pathlib import Path

    from tasks.storage.reproduce import report_lines
    from tasks.storage.rerun import reproduce as redo

    result = redo(Path(run_dir), iteration, remote, Path(into) if into else None)
    diffs = result["diffs"]
    print(f"reproduced iteration {iteration} in {result['scratch']} in {result['seconds']:.1f} s "
          f"(inputs restored from the remote in {result['restore_seconds']:.1f} s)")
    print(f"compared {result['files']} output files and {result['metrics']} metrics with {result['record']}: "
          + ("all identical" if not diffs else f"{len(diffs)} differ"))
    for line in report_lines(result["report"]):
        print(line)
    print(f"report: {result['report_file']}")
    return 0 if not diffs else 1
