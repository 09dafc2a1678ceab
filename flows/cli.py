"""The `rla` command line: quickstart, run, eval, config, ui (and seed/bootstrap for the DVC pipeline); deploy
and worker for a Prefect server with work pools (prefect.yaml, infra/README.md)."""
from __future__ import annotations

import argparse
import json
import os
import signal
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from flows.sandbox_cmd import EXIT_CODES as SANDBOX_EXIT_CODES
from rla_core.errors import BadValue, MissingFile

QUICKSTART = Path(__file__).resolve().parent.parent / "configs" / "quickstart.yaml"
# `rla bench` parts that parse their own arguments (rla_bench/<module>.py: main(argv))
SCRIPT_PARTS = {
    "env": "household environment: steps/s, oracle-label calls/s, specs generated/s",
    "sandbox": "the program sandbox: batched vs one sandbox per test vs bare subprocess",
    "textworld": "TextWorld: games built/s, episodes played/s",
    "random-policy": "success of a uniformly random policy on a TextWorld task file (the floor of a warm start)",
    "slot-games": "how often a finished run's policy wins each of its seed slots' TextWorld games",
    "train-options": "step time, peak memory and loss of each train.trainable option (and bf16) on a real model",
    "learning-check": "household on SmolLM2: full loop vs outcome only, held-out and judge before/after (GPU)",
    "judge-warmstart": "judge warm-start length (coding: and test form), scored on the dev judge benchmark",
    "policy-warmstart": "policy warm-start length, scored on the dev tasks as an evaluation scores them",
}
SET_HELP = "override one config key, e.g. --set rollout.n=8 (repeatable; `rla config` lists the keys)"


def embedded_environment() -> None:
    """Embedded defaults, set before prefect/mlflow are imported; a user's own settings win."""
    os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")  # else 'database is locked' per run
    os.environ.setdefault("PREFECT_LOGGING_LEVEL", "WARNING")
    os.environ.setdefault("PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS", "120")
    os.environ.setdefault("DO_NOT_TRACK", "1")
    os.environ.setdefault("MLFLOW_ENABLE_TELEMETRY", "false")
    # a tracking server that is down: 4 retries with back-off (~15 s), not MLflow's 7 (~2 min), then one line
    os.environ.setdefault("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "4")
    os.environ.setdefault("MLFLOW_HTTP_REQUEST_BACKOFF_FACTOR", "1")
    # a failed task or flow run raises into `main`, which prints a user error as one line and a bug with its
    # traceback: Prefect's own ERROR-level copies of the same traceback are noise on the command line
    os.environ.setdefault("PREFECT_LOGGING_LOGGERS_PREFECT_TASK_RUNS_LEVEL", "CRITICAL")
    os.environ.setdefault("PREFECT_LOGGING_LOGGERS_PREFECT_FLOW_RUNS_LEVEL", "CRITICAL")
    os.environ.setdefault("PREFECT_LOGGING_LOGGERS_PREFECT_FLOW_ENGINE_LEVEL", "CRITICAL")
    os.environ.setdefault("PREFECT_LOGGING_LOGGERS_PREFECT_TASK_ENGINE_LEVEL", "CRITICAL")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


# Over 60 lines: the whole argument table of `rla`, one add_argument after another.
def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="rla", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)

    def config_args(cmd: argparse.ArgumentParser, default: list[str] | None = None) -> argparse.ArgumentParser:
        cmd.add_argument("--config", action="append", default=default,
                         help="YAML override file (repeatable, applied in order)")
        cmd.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                         help=SET_HELP)
        return cmd

    def with_config(name: str, help_text: str, default: list[str] | None = None) -> argparse.ArgumentParser:
        cmd = config_args(sub.add_parser(name, help=help_text), default)
        cmd.add_argument("--out", default=None, help="also write the command's JSON summary to this file")
        return cmd

    with_config("quickstart", "seed → bootstrap → a few iterations on CPU, then a before/after table")
    with_config("run", "run (or continue) the training flow of a config")
    with_config("seed", "seed tasks, held-out tasks, tokenizer and tiny models (DVC stage)")
    with_config("bootstrap", "supervised warm-start of policy and judge + baseline evaluation (DVC stage)")
    evaluate = with_config("eval", "evaluate a run's latest (or given) policy and judge on held-out tasks")
    evaluate.add_argument("--run", default=None, metavar="DIR", help="run folder to evaluate, with its own "
                          "config (DIR/config.yaml); instead of --config")
    evaluate.add_argument("--iteration", type=int, default=None, help="default: the latest completed")
    evaluate.add_argument("--games", default=None, metavar="DIR",
                          help="TextWorld runs: play every game file (*.z8) under DIR instead of the held-out "
                          "tasks; sub-folders are tiers")
    evaluate.add_argument("--episodes", type=int, default=1, help="--games: episodes per game (default 1)")
    evaluate.add_argument("--temperature", type=float, default=0.0,
                          help="--games: policy sampling temperature (default 0: greedy)")
    abl = with_config("ablation", "the paper's ablation rows (a) outcome only … (d) full loop, over several seeds")
    abl.add_argument("--seeds", type=int, default=3, help="seeds run.seed, run.seed+1, … (default 3)")
    abl.add_argument("--rows", default="abcd", help="rows to run, e.g. abcd or ad (default abcd)")
    abl.add_argument("--name", default="ablation", help="folder under run.output_dir (default ablation)")
    abl.add_argument("--warm-start", default=None, metavar="DIR",
                     help="copy each seed's warm start (seed store, models, baseline) from the earlier ablation "
                          "folder DIR instead of computing it, e.g. for a dev sweep of λ; DIR's runs must have "
                          "this config apart from λ and the rows' switches")
    report = sub.add_parser("ablation-report", help="one ablation table from the <row>-seed<s> runs of several "
                            "folders, e.g. rows (a), (e) of one ablation and row (d) of a λ sweep")
    report.add_argument("folders", nargs="+", metavar="DIR", help="an ablation folder (its <row>-seed<s> runs) or "
                        "one such run folder; the runs must differ only in their rows' switches, λ and seed")
    report.add_argument("--into", required=True, metavar="DIR",
                        help="folder for ablation.csv, ablation.md and ablation.png (created)")
    report.add_argument("--rows", default=None, help="rows to report, e.g. ade (default: every row found)")
    report.add_argument("--out", default=None, help="also write the command's JSON summary to this file")
    for name, text in (("restore", "check out one iteration's files (inputs and outputs) from the DVC remote"),
                       ("reproduce", "re-run one iteration from its inputs in the DVC remote in a scratch folder "
                                     "and compare every output file and metric with what was recorded: how much "
                                     "each differing one differs (relative), in <scratch>/reproduce.json")):
        cmd = sub.add_parser(name, help=text)
        cmd.add_argument("--run", required=True, help="run folder (it need not exist: its DVC remote is enough)")
        cmd.add_argument("--iteration", type=int, required=True, help="0 = the start (seed, warm-start, baseline)")
        cmd.add_argument("--remote", default=None, help="DVC remote (default: runs/.dvc-remote/<run name>)")
        cmd.add_argument("--into", default=None, help="target folder (restore: the run folder; reproduce: "
                                                      "<run>.reproduce-iter_K beside it)")
    data = sub.add_parser("data", help="build the fixed held-out/dev task files and judge benchmarks (data/)")
    data.add_argument("action", choices=["build"], help="build: write the task files, the warm-start run's judge "
                      "benchmarks and a manifest")
    data.add_argument("--config", action="append", default=None, help="YAML override file (default: quickstart)")
    data.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE", help=SET_HELP)
    data.add_argument("--out", default=None, help="output folder (default: data/<environment name>)")
    config_args(sub.add_parser("config", help="print the resolved config: every key's value, default (* when it "
                               "differs) and description; defaults alone without --config"))
    ui = sub.add_parser("ui", help="start the MLflow UI for a run on 127.0.0.1")
    ui.add_argument("--run", default="runs/quickstart", help="run folder (holds mlflow.db)")
    ui.add_argument("--port", type=int, default=5000, help="port on 127.0.0.1 (default 5000)")
    deploy = sub.add_parser("deploy", help="create the rla-cpu/rla-gpu work pools if missing, then deploy prefect.yaml")
    deploy.add_argument("--gpu-pool-type", default="docker", choices=["docker", "kubernetes", "process"],
                        help="type of rla-gpu when it is created (process: a stand-in on one machine)")
    deploy.add_argument("--gpu-slots", type=int, default=None,
                        help="rla-gpu concurrency limit: GPU flow runs at once (default 1 on creation)")
    deploy.add_argument("--name", dest="names", action="append", default=None, metavar="FLOW/DEPLOYMENT",
                        help="deploy only this deployment (repeatable), e.g. rla-stage/gpu; default: all")
    worker = sub.add_parser("worker", help="start a Prefect worker on a work pool (needs PREFECT_API_URL)")
    worker.add_argument("--pool", default="rla-cpu", help="work pool to poll (rla-cpu or rla-gpu)")
    worker.add_argument("--limit", type=int, default=None, help="max flow runs at once on this worker")
    worker.add_argument("--name", default=None, help="worker name")
    sandbox = sub.add_parser("sandbox", help="run a program in the program sandbox of the coding setting")
    sandbox_run = sandbox.add_subparsers(dest="sandbox_command", required=True).add_parser(
        "run", help="run PROGRAM on one input; print the verdict as one JSON line", epilog=SANDBOX_EXIT_CODES,
        description="Run PROGRAM on one input in the sandbox; print the verdict as one JSON line.")
    sandbox_run.add_argument("program", help="Python program file")
    sandbox_run.add_argument("--stdin", default=None, help="file fed to the program's stdin (default: empty input)")
    sandbox_run.add_argument("--expect", default=None, help="expected stdout (default: ok when it exits 0)")
    sandbox_run.add_argument("--timeout", type=float, default=None, help="wall and CPU seconds (default 2)")
    _bench_parser(sub)
    return parser


def _bench_parser(sub: argparse._SubParsersAction) -> None:
    bench = sub.add_parser("bench", help="speed against the peers and the machine's limit (docs/performance.md): "
                                         "engine, step, iteration, scaling; each prints a table and writes JSON")
    parts = bench.add_subparsers(dest="part", required=True)

    def part(name: str, text: str) -> argparse.ArgumentParser:
        cmd = parts.add_parser(name, help=text)
        cmd.add_argument("--out", default=None, help=f"JSON result (default bench/results/{name}.json)")
        cmd.add_argument("--threads", type=int, default=None, help="torch CPU threads (default: torch's)")
        return cmd

    for name, text in (("engine", "our engine vs model.generate (vs vLLM where installed): tokens/s, n = 1 and 8"),
                       ("step", "generate + score + one update: ours vs TRL GRPOTrainer on the same work")):
        cmd = part(name, text)
        cmd.add_argument("--run", default="runs/quickstart", help="run folder with a warm-started policy "
                         "(default runs/quickstart)")
        cmd.add_argument("--prompts", type=int, default=32, help="real policy prompts (default 32)")
        cmd.add_argument("--new-tokens", type=int, default=6, help="tokens per completion (default 6)")
    parts.choices["engine"].add_argument("--repeats", type=int, default=5, help="timed calls (median; default 5)")
    parts.choices["engine"].add_argument("--decode-attention", choices=("model", "matmul"), default=None,
                                         help="our engine's attention for each new token (default: the run's "
                                         "rollout.decode_attention; model = sdpa, matmul = rla_core's with the "
                                         "prompt shared by its n samples)")
    step = parts.choices["step"]
    step.add_argument("--n", type=int, default=8, help="completions per prompt (default 8)")
    step.add_argument("--steps", type=int, default=4, help="steps per side; the first warms up (default 4)")
    step.add_argument("--skip-trl-defaults", action="store_true",
                      help="leave out TRL with its CPU defaults (bf16 autocast: about a minute a step)")
    for name, text in (("iteration", "one iteration stage by stage: orchestration share, FLOPs and FLOP/s against "
                                     "the machine's matmul peak (a scratch run; default config: the quickstart)"),
                       ("scaling", "iteration time as episodes (K×N), m, turns and model width grow")):
        cmd = part(name, text)
        cmd.add_argument("--config", action="append", default=None, help="YAML override file (default: quickstart)")
        cmd.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE", help=SET_HELP)
        cmd.add_argument("--workdir", default=None, help="scratch folder (default: a new temporary one)")
        cmd.add_argument("--keep", action="store_true", help="keep the scratch runs")
    parts.choices["iteration"].add_argument("--iteration", type=int, default=2,
                                            help="the iteration timed (default 2: iteration 1 also pays one-time "
                                            "imports, e.g. Great Expectations' 3 s)")
    parts.choices["iteration"].add_argument("--no-flops", action="store_true", help="skip the FLOP-counting re-run")
    for name in ("iteration", "scaling"):
        parts.choices[name].add_argument("--warm-start", default=None, metavar="RUN",
                                         help="copy the seed, warm-start and baseline of RUN (same config) "
                                         "instead of computing them")
    parts.choices["scaling"].add_argument("--axes", default=None,
                                          help="comma-separated subset of episodes,m,turns,width (default: all)")
    parts.choices["scaling"].add_argument("--base-tasks", type=int, default=16,
                                          help="K of every point off the episodes axis (default 16)")
    for name, text in SCRIPT_PARTS.items():  # parts with their own arguments: `rla bench NAME --help`
        cmd = parts.add_parser(name, help=text, add_help=False)
        cmd.add_argument("args", nargs="*", help=f"the arguments of {name} (rla bench {name} --help)")


def _bench(args: argparse.Namespace) -> int:
    if args.part in SCRIPT_PARTS:
        import importlib

        return importlib.import_module(f"rla_bench.{args.part.replace('-', '_')}").main(args.args)
    if args.part == "engine":
        from rla_bench import engine

        engine.run(args.run, args.prompts, new_tokens=args.new_tokens, repeats=args.repeats, threads=args.threads,
                   out=args.out, attention=args.decode_attention)
    elif args.part == "step":
        from rla_bench import step

        step.run(args.run, args.prompts, args.n, args.new_tokens, args.steps, threads=args.threads,
                 trl_defaults=not args.skip_trl_defaults, out=args.out)
    elif args.part == "iteration":
        from rla_bench import iteration

        iteration.run(args.config or [str(QUICKSTART)], args.overrides, args.iteration, not args.no_flops,
                      args.threads, args.workdir, args.keep, args.out, args.warm_start)
    elif args.part == "scaling":
        from rla_bench import scaling

        scaling.run(args.config or [str(QUICKSTART)], args.overrides,
                    args.axes.split(",") if args.axes else None, args.base_tasks, args.threads, args.workdir,
                    args.keep, args.out, warm_start=args.warm_start)
    return 0


def _eval_sources(args: argparse.Namespace) -> tuple[list[str], list[str]]:
    """Config files and overrides of `rla eval`: --config FILE as for `rla run`, or --run DIR: the run's own
    config.yaml, pointed at DIR wherever the folder is now (run.output_dir and run.name from its path)."""
    if args.run is None:
        if not args.config:
            raise BadValue("rla eval needs --config FILE (the run's config) or --run DIR (its folder)")
        return args.config, args.overrides
    if args.config:
        raise BadValue("rla eval takes --run DIR or --config FILE, not both")
    from tasks.paths import CONFIG_FILE  # pydantic and the config: not at --help

    root = Path(args.run).resolve()
    if not (root / CONFIG_FILE).exists():
        raise MissingFile(f"no run at {args.run} (no config.yaml there); give a run folder `rla run` wrote")
    where = [f"run.output_dir={json.dumps(str(root.parent))}", f"run.name={json.dumps(root.name)}"]
    return [str(root / CONFIG_FILE)], [*args.overrides, *where]


def _eval(args: argparse.Namespace) -> int:
    """`rla eval`: held-out tasks (or --games) with the run's latest (or --iteration's) policy and judge."""
    from flows import commands

    configs, overrides = _eval_sources(args)
    if args.games is not None:
        return commands.evaluate_games(configs, overrides, args.iteration, args.games, args.episodes,
                                       args.temperature, args.out)
    return commands.evaluate(configs, overrides, args.iteration, args.out)


def _commands():
    from flows import commands  # imported after the environment is set

    return commands


def _configs(args: argparse.Namespace, default: bool = False) -> list[str]:
    """--config files; the quickstart's config when the command has it as its default."""
    configs = args.config or ([str(QUICKSTART)] if default else [])
    if not configs:
        raise BadValue(f"rla {args.command} needs --config FILE")
    return configs


def _config(args: argparse.Namespace) -> int:
    from flows import config_cmd

    return config_cmd.show_config(args.config or [], args.overrides)


def _sandbox(args: argparse.Namespace) -> int:
    from flows.sandbox_cmd import sandbox_run

    return sandbox_run(args.program, args.stdin, args.expect, args.timeout)


@dataclass(frozen=True)
class Command:
    run: Callable[[argparse.Namespace], int]
    flow: bool = False  # runs Prefect flows: the reaper stops their server should this process die


# The one table of commands: `rla <name>` runs COMMANDS[name] (its arguments: _parser).
COMMANDS: dict[str, Command] = {
    "quickstart": Command(lambda a: _commands().run(_configs(a, default=True), a.overrides, a.out), flow=True),
    "run": Command(lambda a: _commands().run(_configs(a), a.overrides, a.out), flow=True),
    "seed": Command(lambda a: _commands().seed(_configs(a), a.overrides, a.out), flow=True),
    "bootstrap": Command(lambda a: _commands().prepare(_configs(a), a.overrides, a.out), flow=True),
    "ablation": Command(lambda a: _commands().run_ablation(_configs(a, default=True), a.overrides, a.seeds, a.rows,
                                                           a.name, a.out, a.warm_start), flow=True),
    "ablation-report": Command(lambda a: _commands().ablation_report(a.folders, a.into, a.rows, a.out)),
    "eval": Command(_eval, flow=True),
    "data": Command(lambda a: _commands().build_data(_configs(a, default=True), a.overrides, a.out), flow=True),
    "reproduce": Command(lambda a: _commands().reproduce(a.run, a.iteration, a.remote, a.into), flow=True),
    "bench": Command(_bench, flow=True),
    "restore": Command(lambda a: _commands().restore(a.run, a.iteration, a.remote, a.into)),
    "config": Command(_config),
    "ui": Command(lambda a: _commands().ui(a.run, a.port)),
    "deploy": Command(lambda a: _commands().deploy(a.gpu_pool_type, a.gpu_slots, a.names)),
    "worker": Command(lambda a: _commands().worker(a.pool, a.limit, a.name)),
    "sandbox": Command(_sandbox),
}


def _dispatch(args: argparse.Namespace) -> int:
    return COMMANDS[args.command].run(args)


def _terminate(signum: int, frame: object) -> None:
    # SIGTERM stops like Ctrl-C: flows unwind, and Prefect's ephemeral API server (a child process)
    # is shut down instead of being left running as an orphan.
    raise KeyboardInterrupt


def main(argv: list[str] | None = None) -> int:
    embedded_environment()
    import logging

    logging.getLogger("urllib3.connectionpool").setLevel(logging.ERROR)  # MLflow's retry chatter
    signal.signal(signal.SIGTERM, _terminate)
    parser = _parser()
    words = list(sys.argv[1:] if argv is None else argv)
    args, unknown = parser.parse_known_args(words)
    if getattr(args, "part", None) in SCRIPT_PARTS:  # its own arguments, in order: rla_bench/<part>.py parses them
        args.args = words[words.index(args.part) + 1:]
    elif unknown:
        parser.error(f"unrecognized arguments: {' '.join(unknown)}")
    from flows.commands import USER_ERRORS

    if COMMANDS[args.command].flow:
        from flows import reaper

        reaper.start()  # stops the Prefect server & co. should this process die without unwinding
    try:
        return _dispatch(args)
    except USER_ERRORS as err:
        print(f"rla: error: {err}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("rla: interrupted; re-run the same command to continue from the last completed stage",
              file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
