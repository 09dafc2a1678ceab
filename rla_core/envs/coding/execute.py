"""Run programs against tests in the sandbox: every program × every test of its problem, in one pooled
batch per stage (Sandbox.run_matrix), and fold the verdicts into ProgramRun / UnitTest records.

A program whose answer did not parse (None) is never run: it fails every test ("blocked").
Function-call tests (call_tests) run the program followed by the test code, with an empty stdin; they
pass when that exits 0.
"""
from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import replace

from rla_core.envs.coding.sandbox import Limits, Sandbox, TestCase, Verdict
from rla_core.schemas import ProgramRun, Task, Trajectory, UnitTest

DETAIL_CHARS = 80


def _limits(base: Limits, spec: dict) -> Limits:
    seconds = float(spec.get("time_limit_s", base.wall_s))
    return replace(base, wall_s=seconds, cpu_s=seconds)


def detail(verdict: Verdict) -> str:
    """What went wrong, in one short line ('' when the test passed)."""
    if verdict.passed:
        return ""
    if verdict.status == "wrong":
        return f"printed {verdict.stdout.strip()[:DETAIL_CHARS]!r}"
    if verdict.status == "crash":
        lines = [line for line in verdict.stderr.strip().splitlines() if line.strip()]
        return (lines[-1] if lines else f"exit code {verdict.exit_code}")[:DETAIL_CHARS]
    return verdict.status


def _jobs(program: str | None, spec: dict, extra: Sequence[tuple[str, str]] = ()) -> list[tuple[str, list[TestCase]]]:
    """Sandbox jobs of one program: its stdin tests in one job, each call test as its own program."""
    if program is None:
        return []
    tests = [TestCase(t["stdin"], t["stdout"]) for t in spec.get("tests", [])]
    tests += [TestCase(stdin, stdout) for stdin, stdout in extra]
    jobs = [(program, tests)] if tests else []
    jobs += [(program + "\n" + t["code"] + "\n", [TestCase("", None)]) for t in spec.get("call_tests", [])]
    return jobs


def _blocked(count: int) -> list[Verdict]:
    return [Verdict(status="blocked", exit_code=None, stdout="", stderr="no program", wall_s=0.0)] * count


def run_ground_truth(sandbox: Sandbox, base: Limits, tasks: dict[str, Task], trajectories: Sequence[Trajectory],
                     progress: Callable[[int], None] | None = None) -> list[ProgramRun]:
    """Every program (a trajectory's one step; its `action` is the program) on its problem's GT tests."""
    jobs, owners = [], []
    for index, trajectory in enumerate(trajectories):
        spec = tasks[trajectory.task_id].spec
        for job in _jobs(trajectory.steps[0].action if trajectory.steps else None, spec):
            jobs.append((job, _limits(base, spec)))
            owners.append(index)
    verdicts = _run(sandbox, jobs, progress)
    per_program: dict[int, list[Verdict]] = {}
    for owner, result in zip(owners, verdicts):
        per_program.setdefault(owner, []).extend(result)
    runs = []
    for index, trajectory in enumerate(trajectories):
        spec = tasks[trajectory.task_id].spec
        count = len(spec.get("tests", [])) + len(spec.get("call_tests", []))
        results = per_program.get(index) or _blocked(count)
        passed = sum(v.passed for v in results)
        runs.append(ProgramRun(task_id=trajectory.task_id, sample_index=trajectory.sample_index,
                               statuses=[v.status for v in results], details=[detail(v) for v in results],
                               pass_ratio=passed / count if count else 0.0, pass_all=bool(count) and passed == count))
    return runs


def run_unit_tests(sandbox: Sandbox, base: Limits, tasks: dict[str, Task], trajectories: Sequence[Trajectory],
                   tests: Sequence[UnitTest], progress: Callable[[int], None] | None = None) -> list[UnitTest]:
    """Fill `passes` of every parsed judge test: which of its problem's programs pass it (by sample index)."""
    by_task: dict[str, list[UnitTest]] = {}
    for test in tests:
        by_task.setdefault(test.task_id, []).append(test)
    programs: dict[str, list[Trajectory]] = {}
    for trajectory in trajectories:
        programs.setdefault(trajectory.task_id, []).append(trajectory)
    jobs, owners = [], []
    for task_id, group in by_task.items():
        parsed = [t for t in group if t.stdin is not None]
        if not parsed:
            continue
        cases = [TestCase(t.stdin, t.stdout) for t in parsed]
        spec = tasks[task_id].spec
        for trajectory in programs.get(task_id, []):
            program = trajectory.steps[0].action if trajectory.steps else None
            if program is not None:
                jobs.append(((program, cases), _limits(base, spec)))
                owners.append((task_id, trajectory.sample_index))
    verdicts = _run(sandbox, jobs, progress)
    passed = {owner: [v.passed for v in result] for owner, result in zip(owners, verdicts)}
    # where each parsed test sits in its task's job (the order the cases were sent in)
    position = {(task_id, t.index): i for task_id, group in by_task.items()
                for i, t in enumerate(t for t in group if t.stdin is not None)}
    order = {task_id: sorted(group, key=lambda t: t.sample_index) for task_id, group in programs.items()}
    out = []
    for test in tests:
        programs_here = order.get(test.task_id, [])
        if test.stdin is None:
            out.append(test.model_copy(update={"passes": [False] * len(programs_here)}))
            continue
        at = position[(test.task_id, test.index)]
        row = [bool((results := passed.get((test.task_id, t.sample_index))) and results[at]) for t in programs_here]
        out.append(test.model_copy(update={"passes": row}))
    return out


def _run(sandbox: Sandbox, jobs: list, progress: Callable[[int], None] | None) -> list[list[Verdict]]:
    """Jobs grouped by their limits (one matrix call per distinct limit), results in job order."""
    results: list[list[Verdict] | None] = [None] * len(jobs)
    by_limits: dict[Limits, list[int]] = {}
    for index, (_, limits) in enumerate(jobs):
        by_limits.setdefault(limits, []).append(index)
    for limits, indices in by_limits.items():
        out = sandbox.run_matrix([jobs[i][0] for i in indices], limits=limits, progress=progress)
        for i, verdicts in zip(indices, out):
            results[i] = verdicts
    return results  # type: ignore[return-value]
