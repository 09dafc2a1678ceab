"""Throughput of the program sandbox (rla_core/envs/coding/sandbox.py): program × test executions per second.

Usage: rla bench sandbox [--programs 48] [--tests 6] [--out bench/results/sandbox.json]

One run measures, on the same P programs × T tests (a mix: correct, wrong, slow-ish, crashing; the
default shape is the RL loop's: many programs with a handful of short tests each):
  batched    Sandbox.run_matrix as configured by default: up to 8 programs one after another per sandbox
             (a forked child per test), `workers` sandboxes at a time (1 worker and the CPU count)
  matrix     Sandbox.run_matrix with batch_programs=1: one sandbox per program (the previous default)
  naive      Sandbox.run per (program, test), one after another: one sandbox start per execution
  bare       subprocess.run([/usr/bin/python3, -I, -S, program], input=...) per test: no isolation at all
The isolation overhead is bare/naive; the per-program batching speed-up is matrix/naive, the
multi-program one batched/matrix. Every mode must give the same statuses (statuses_agree_across_modes).
The load average (and `uptime`) before and after is recorded: on a shared 2-core machine the numbers
mean little if something else was running.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import tempfile
import time
from pathlib import Path

from rla_core.envs.coding.sandbox import PYTHON, Limits, Sandbox, TestCase, normalise_output

PROGRAMS = {
    "correct": "n = int(input())\nprint(sum(range(n + 1)))\n",
    "wrong": "n = int(input())\nprint(sum(range(n)))\n",
    "slow": "n = int(input())\ntotal = 0\nfor i in range(300_000):\n    total += i % 7\nprint(n * (n + 1) // 2)\n",
    "crash": "n = int(input())\nif n % 3 == 0:\n    raise ValueError(n)\nprint(n * (n + 1) // 2)\n",
}


def workload(programs: int, tests: int) -> list[tuple[str, list[TestCase]]]:
    kinds = list(PROGRAMS)
    cases = [TestCase(f"{n}\n", str(n * (n + 1) // 2)) for n in range(1, tests + 1)]
    return [(PROGRAMS[kinds[k % len(kinds)]] + f"# program {k}\n", cases) for k in range(programs)]


def bare(jobs: list[tuple[str, list[TestCase]]], limits: Limits) -> list[list[str]]:
    """No isolation: the system Python on a temporary file, one process per test."""
    statuses = []
    with tempfile.TemporaryDirectory() as folder:
        for index, (program, tests) in enumerate(jobs):
            path = Path(folder) / f"p{index}.py"
            path.write_text(program)
            row = []
            for test in tests:
                done = subprocess.run([PYTHON, "-I", "-S", str(path)], input=test.stdin, capture_output=True,
                                      text=True, timeout=limits.wall_s)
                ok = done.returncode == 0 and normalise_output(done.stdout) == normalise_output(test.expected)
                row.append("ok" if ok else "crash" if done.returncode else "wrong")
            statuses.append(row)
    return statuses


def timed(label: str, programs: int, executions: int, run) -> dict:
    start = time.perf_counter()
    statuses = run()
    seconds = time.perf_counter() - start
    print(f"{label:<30} {executions / seconds:>9.1f} exec/s {programs / seconds:>8.1f} programs/s {seconds:7.2f} s")
    return {"seconds": round(seconds, 3), "executions_per_s": round(executions / seconds, 2),
            "programs_per_s": round(programs / seconds, 2), "statuses": statuses}


def uptime() -> str:
    try:
        return subprocess.run(["uptime"], capture_output=True, text=True, timeout=5).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return ""


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="rla bench sandbox", description=__doc__.splitlines()[0])
    parser.add_argument("--programs", type=int, default=48)
    parser.add_argument("--tests", type=int, default=6)
    parser.add_argument("--out", default="bench/results/sandbox.json")
    args = parser.parse_args(argv)
    limits = Limits()
    jobs = workload(args.programs, args.tests)
    executions = args.programs * args.tests
    cpus = os.cpu_count() or 1
    Sandbox.check()
    load_before, uptime_before = os.getloadavg(), uptime()
    print(f"{args.programs} programs x {args.tests} tests = {executions} executions; {uptime_before}")
    batch = Sandbox().batch_programs

    def mode(label: str, run) -> dict:
        return timed(label, args.programs, executions, run)

    results = {
        "batched_1_worker": mode(f"batched ({batch}/sandbox, 1 worker)", lambda: _statuses(
            Sandbox(limits, workers=1).run_matrix(jobs))),
        f"batched_{cpus}_workers": mode(f"batched ({batch}/sandbox, {cpus} workers)", lambda: _statuses(
            Sandbox(limits, workers=cpus).run_matrix(jobs))),
        "matrix_1_worker": mode("matrix (1/sandbox, 1 worker)", lambda: _statuses(
            Sandbox(limits, workers=1, batch_programs=1).run_matrix(jobs))),
        f"matrix_{cpus}_workers": mode(f"matrix (1/sandbox, {cpus} workers)", lambda: _statuses(
            Sandbox(limits, workers=cpus, batch_programs=1).run_matrix(jobs))),
        "naive": mode("naive (a sandbox per exec)", lambda: [
            [Sandbox(limits, workers=1).run(program, t.stdin, t.expected).status for t in tests]
            for program, tests in jobs]),
        "bare": mode("bare (no isolation)", lambda: bare(jobs, limits)),
    }
    load_after, uptime_after = os.getloadavg(), uptime()
    reference = results["naive"]["statuses"]
    agree = all(r["statuses"] == reference for r in results.values())
    rate = {name: r["executions_per_s"] for name, r in results.items()}
    summary = {
        "isolation_overhead_bare_over_naive": round(rate["bare"] / rate["naive"], 2),
        "batching_speedup_matrix_1_worker_over_naive": round(rate["matrix_1_worker"] / rate["naive"], 2),
        f"speedup_matrix_{cpus}_workers_over_naive": round(rate[f"matrix_{cpus}_workers"] / rate["naive"], 2),
        "batched_1_worker_over_matrix_1_worker": round(rate["batched_1_worker"] / rate["matrix_1_worker"], 2),
        f"batched_{cpus}_workers_over_matrix_{cpus}_workers": round(
            rate[f"batched_{cpus}_workers"] / rate[f"matrix_{cpus}_workers"], 2),
        "matrix_1_worker_over_bare": round(rate["matrix_1_worker"] / rate["bare"], 2),
        "batched_1_worker_over_bare": round(rate["batched_1_worker"] / rate["bare"], 2),
        "statuses_agree_across_modes": agree,
    }
    for key, value in summary.items():
        print(f"{key:<46} {value}")
    print(f"after: {uptime_after}")
    report = {"programs": args.programs, "tests": args.tests, "cpus": cpus, "batch_programs": batch,
              "limits": limits.__dict__, "load_before": load_before, "load_after": load_after,
              "uptime_before": uptime_before, "uptime_after": uptime_after, "summary": summary,
              "modes": {name: {k: v for k, v in r.items() if k != "statuses"} for name, r in results.items()}}
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(report, indent=2) + "\n")
    print(f"wrote {args.out}")
    return 0


def _statuses(rows) -> list[list[str]]:
    return [[v.status for v in row] for row in rows]


