"""`rla bench iteration`: one training iteration of a config (default: the quickstart), stage by stage.

1. A scratch run is prepared (seed, warm-start, baseline) and iterations 1..K-1 run untimed, in this
   process (K = 2 by default: the first iteration of a process also pays one-time imports). With
   `--warm-start RUN` the seed, warm-start and baseline folders are copied from RUN instead of computed
   (a SmolLM2 warm start takes half an hour on CPU); RUN's config must equal the bench's but for the
   run's name, place, length, evaluation cadence, tracking and versioning.
2. The run folder is copied; iteration K runs in the original with nothing else measured: its wall time
   (the rl-iteration flow call) and each stage's own seconds (recorded by the stage, `_DONE`).
3. Iteration K runs again in the copy with every stage body under torch's FlopCounterMode, which counts
   the FLOPs of every matmul, convolution and attention kernel actually executed (forward and backward,
   padding included). The CPU run is deterministic, so the copy does exactly the work that was timed.

Compute stages are those that run models or environments; the gate (validate: Great Expectations), the
commit (DVC) and everything between stage bodies (Prefect task and flow runs, the run-store pushes,
MLflow logging) are orchestration: overhead = wall − Σ compute-stage seconds.
"""
from __future__ import annotations

import shutil
import tempfile
import time
from pathlib import Path
from typing import Any, Callable

from rla_bench.common import counted_call, machine, matmul_peak, print_table, torch_threads, write_result


def _counted(body: Callable, name: str, flops: dict[str, int]) -> Callable:
    def run(*args: Any, **kwargs: Any) -> Any:
        result, flops[name] = counted_call(lambda: body(*args, **kwargs))
        return result

    return run


# may differ from --warm-start's run: naming, logging, rollout.drop_finished, which only decides whether
# ended rows keep being decoded, and rollout.prefix_reuse, which only decides whether a turn's prompt prefix
# is computed again (the bench compares an iteration with each on and off on one warm start; with prefix_reuse
# the copied baseline evaluation is the one played without it)
WARM_START_FREE = ("run.name", "run.eval_every", "tracking", "versioning", "rollout.drop_finished",
                   "rollout.prefix_reuse")


def copy_warm_start(source: str | Path, configs: list[str], sets: list[str]) -> list[str]:
    """Copy the seed, warm-start and baseline of the run at `source` into the run folder that `configs` +
    `sets` name; returns the folders copied. Refused (BadValue, nothing copied) when `source` is not a
    run with a finished warm start, or when its config differs from this one beyond WARM_START_FREE and
    the keys any run may change."""
    from flows.ablation import share_warm_start
    from rla_core.config import config_differences, load_config
    from rla_core.errors import BadValue
    from tasks.checks.warm_start import WARM_START
    from tasks.paths import run_config
    from tasks.storage.files import is_done

    root = Path(source)
    if not (root / "config.yaml").is_file():
        raise BadValue(f"--warm-start {source}: not a run folder (no config.yaml)")
    missing = [rel for rel in WARM_START if not is_done(root / rel)]
    if missing:
        raise BadValue(f"--warm-start {source}: its warm start is not finished ({', '.join(missing)} not done)")
    cfg = load_config(configs, sets)
    differ = [k for k in config_differences(run_config(root), cfg)
              if not any(k == free or k.startswith(free + ".") for free in WARM_START_FREE)]
    if differ:
        raise BadValue(f"--warm-start {source}: its config differs from this one in {', '.join(differ[:5])}"
                       + (f" and {len(differ) - 5} more" if len(differ) > 5 else "")
                       + ": its warm start is not this config's")
    target = Path(cfg.run.output_dir) / cfg.run.name
    target.mkdir(parents=True, exist_ok=True)
    return share_warm_start(root, target)


def prepare_scratch(configs: list[str], overrides: list[str], scratch: Path, iteration: int,
                    warm_start: str | None = None) -> tuple[str, Any]:
    """A run under `scratch` with iterations 1..iteration-1 complete; returns (run folder, config).
    `warm_start`: a run whose seed, warm-start and baseline are copied in (`copy_warm_start`)."""
    from flows.train import prepare
    from flows.rl_iteration import rl_iteration
    from tasks.paths import run_config

    # not the run's last iteration, so the held-out evaluation runs only where eval_every puts it
    sets = [*overrides, f"run.output_dir={scratch}", f"run.iterations={iteration + 1}"]
    if warm_start is not None:
        print(f"copying the warm start of {warm_start}: {', '.join(copy_warm_start(warm_start, configs, sets))}")
    print(f"preparing a scratch run in {scratch} (seed, warm-start, baseline; iterations before {iteration})")
    run_dir = prepare(configs, sets)["run_dir"]
    for k in range(1, iteration):
        rl_iteration(run_dir, k)
    return run_dir, run_config(run_dir)


def stage_seconds(run_dir: str, iteration: int) -> dict[str, float]:
    from flows.rl_iteration import ITERATION
    from tasks.paths import RunPaths

    paths = RunPaths.of(run_dir)
    return {s.name: float(s.read(paths, iteration).seconds or 0.0) for s in ITERATION}


def run(configs: list[str], overrides: list[str], iteration: int = 2, flops: bool = True, threads: int | None = None,
        workdir: str | None = None, keep: bool = False, out: str | None = None, warm_start: str | None = None) -> dict:
    from flows.rl_iteration import ITERATION, rl_iteration

    torch_threads(threads)
    base = Path(workdir) if workdir else Path(tempfile.mkdtemp(prefix="rla-bench-iteration-"))
    timed_root, counted_root = base / "timed", base / "counted"
    try:
        run_dir, cfg = prepare_scratch(configs, overrides, timed_root, iteration, warm_start)
        if flops:
            shutil.copytree(timed_root, counted_root, symlinks=True)
        print(f"iteration {iteration}: timed run")
        start = time.perf_counter()
        rl_iteration(run_dir, iteration)
        wall = time.perf_counter() - start
        seconds = stage_seconds(run_dir, iteration)
        counts: dict[str, int] = {}
        if not keep:  # a SmolLM2 run folder holds ~15 GB of checkpoints and their DVC copies: one at a time
            shutil.rmtree(timed_root, ignore_errors=True)
        if flops:
            print(f"iteration {iteration}: the same iteration again, counting FLOPs")
            originals = {s.name: s.body for s in ITERATION}
            try:
                for s in ITERATION:
                    object.__setattr__(s, "body", _counted(s.body, s.name, counts))
                rl_iteration(str(counted_root / Path(run_dir).name), iteration)
            finally:
                for s in ITERATION:
                    object.__setattr__(s, "body", originals[s.name])
        peak = matmul_peak(bf16=True)
    finally:
        if not keep:
            shutil.rmtree(base, ignore_errors=True)
    result = _report(configs, overrides, iteration, cfg, wall, seconds, counts, peak)
    result["warm_start"] = warm_start
    write_result(out, Path("bench/results/iteration.json"), result)
    return result


def _report(configs: list[str], overrides: list[str], iteration: int, cfg: Any, wall: float,
            seconds: dict[str, float], counts: dict[str, int], peak: dict[str, float]) -> dict:
    """Print the stage table (seconds, FLOPs, rates against the fp32 and bf16 peaks); return the result."""
    from tasks.pipeline import ITERATION

    bookkeeping = {s.name for s in ITERATION if s.bookkeeping}
    compute = sum(v for k, v in seconds.items() if k not in bookkeeping)
    overhead = wall - compute
    dtype = str(cfg.models.compute_dtype("policy")).removeprefix("torch.")
    fp32, bf16 = peak["large_gemm_2048"], peak["large_gemm_2048_bf16"]
    rows, stages = [], {}
    for name, secs in seconds.items():
        flop = counts.get(name)
        rate = flop / secs / 1e9 if flop and secs > 0 else None
        stages[name] = {"seconds": secs, "share": secs / wall, "flops": flop, "gflops_per_s": rate,
                        "share_of_large_gemm_peak": rate / fp32 if rate else None,
                        "share_of_bf16_peak": rate / bf16 if rate else None,
                        "kind": "orchestration" if name in bookkeeping else "compute"}
        rows.append([name, stages[name]["kind"], secs, f"{100 * secs / wall:.1f} %",
                     f"{flop / 1e9:,.1f}" if flop is not None else "-", f"{rate:.1f}" if rate else "-",
                     f"{100 * rate / fp32:.1f} %" if rate else "-", f"{100 * rate / bf16:.1f} %" if rate else "-"])
    rows.append(["(between stages)", "orchestration", wall - sum(seconds.values()),
                 f"{100 * (wall - sum(seconds.values())) / wall:.1f} %", "-", "-", "-", "-"])
    print_table(f"iteration {iteration} of {cfg.run.name} (policy computes in {dtype}): {wall:.1f} s wall; "
                f"orchestration {overhead:.1f} s ({100 * overhead / wall:.1f} %); matmul peak (2048² GEMM) "
                f"{fp32:.0f} GFLOP/s fp32, {bf16:.0f} bf16; {peak['tiny_model_38400x96x256']:.0f} fp32 on the "
                "tiny model's shape",
                ["stage", "kind", "seconds", "share", "GFLOP", "GFLOP/s", "of fp32 peak", "of bf16 peak"], rows)
    result = {"part": "iteration", "config": configs, "overrides": overrides, "iteration": iteration,
              "machine": machine(), "wall_seconds": wall, "compute_seconds": compute,
              "orchestration_seconds": overhead, "orchestration_share": overhead / wall, "stages": stages,
              "dtype": dtype,
              "matmul_peak_gflops": peak}
    return result
