"""Throughput of the program sandbox (rla_core/coding/sandbox.py): program × test executions per second.

Usage: python bench/bench_sandbox.py [--programs 32] [--tests 10] [--out bench/results/sandbox.json]

One run measures, on the same P programs × T tests (a mix: correct, wrong, slow-ish, crashing):
  matrix     Sandbox.run_matrix: one sandbox per program, a forked child per test, `workers` sandboxes at
             a time (reported for 1 worker and for the CPU count)
  naive      Sandbox.run per (program, test), one after another: one sandbox start per execution
  bare       subprocess.run([/usr/bin/python3, -I, -S, program], input=...) per test: no isolation at all
The isolation overhead is bare/naive; the batching speed-up is matrix/naive. The load average before and
after is recorded: on a shared 2-core machine the numbers mean little if something else was running.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import tempfile
import time
from pathlib import Path

from rla_core.coding.sandbox import PYTHON, Limits, Sandbox, TestCase, normalise_output

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


def timed(label: str, executions: int, run) -> dict:
    start = time.perf_counter()
    statuses = run()
    seconds = time.perf_counter() - start
    print(f"{label:<28} {executions / seconds:>9.1f} exec/s   {seconds:7.2f} s")
    return {"seconds": round(seconds, 3), "executions_per_s": round(executions / seconds, 2), "statuses": statuses}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--programs", type=int, default=32)
    parser.add_argument("--tests", type=int, default=10)
    parser.add_argument("--out", default="bench/results/sandbox.json")
    args = parser.parse_args()
    limits = Limits()
    jobs = workload(args.programs, args.tests)
    executions = args.programs * args.tests
    cpus = os.cpu_count() or 1
    Sandbox.check()
    load_before = os.getloadavg()
    print(f"{args.programs} programs x {args.tests} tests = {executions} executions; load before {load_before}")
    results = {
        "matrix_1_worker": timed("matrix (1 worker)", executions, lambda: _statuses(
            Sandbox(limits, workers=1).run_matrix(jobs))),
        f"matrix_{cpus}_workers": timed(f"matrix ({cpus} workers)", executions, lambda: _statuses(
            Sandbox(limits, workers=cpus).run_matrix(jobs))),
        "naive": timed("naive (a sandbox per exec)", executions, lambda: [
            [Sandbox(limits, workers=1).run(program, t.stdin, t.expected).status for t in tests]
            for program, tests in jobs]),
        "bare": timed("bare (no isolation)", executions, lambda: bare(jobs, limits)),
    }
    load_after = os.getloadavg()
    reference = results["naive"]["statuses"]
    agree = all(r["statuses"] == reference for r in results.values())
    rate = {name: r["executions_per_s"] for name, r in results.items()}
    summary = {
        "isolation_overhead_bare_over_naive": round(rate["bare"] / rate["naive"], 2),
        "batching_speedup_matrix_1_worker_over_naive": round(rate["matrix_1_worker"] / rate["naive"], 2),
        f"speedup_matrix_{cpus}_workers_over_naive": round(rate[f"matrix_{cpus}_workers"] / rate["naive"], 2),
        "matrix_1_worker_over_bare": round(rate["matrix_1_worker"] / rate["bare"], 2),
        "statuses_agree_across_modes": agree,
    }
    for key, value in summary.items():
        print(f"{key:<46} {value}")
    print(f"load after {load_after}")
    report = {"programs": args.programs, "tests": args.tests, "cpus": cpus, "limits": limits.__dict__,
              "load_before": load_before, "load_after": load_after, "summary": summary,
              "modes": {name: {k: v for k, v in r.items() if k != "statuses"} for name, r in results.items()}}
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(report, indent=2) + "\n")
    print(f"wrote {args.out}")


def _statuses(rows) -> list[list[str]]:
    return [[v.status for v in row] for row in rows]


if __name__ == "__main__":
    main()
