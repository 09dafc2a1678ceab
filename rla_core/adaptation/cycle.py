"""One iteration of environment adaptation (DESIGN §2.2 steps 4–5) over the task store.

Validate last iteration's pending candidates against their rollouts, then propose new candidates for
active tasks outside the band, from the critic feedback of the judge. Pure: store in, store out.
"""
from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import Callable

from rla_core.adaptation.acceptance import accept_candidate, needs_rewrite
from rla_core.adaptation.critic import critic_feedback
from rla_core.adaptation.store import TaskStore
from rla_core.schemas import JudgedStep, PendingCandidate, Task, Trajectory

# (task, direction, feedback, rng) -> candidate task or None, plus a log of attempts
Rewrite = Callable[[Task, str, str, random.Random], tuple[Task | None, list[str]]]


@dataclass
class AdaptReport:
    accepted: list[str] = field(default_factory=list)  # candidate task ids that became active
    rejected: list[str] = field(default_factory=list)  # candidate task ids discarded (rollouts excluded)
    proposed: list[str] = field(default_factory=list)  # new pending candidate task ids
    failed_proposals: list[str] = field(default_factory=list)  # task ids whose rewrites all failed
    notes: list[str] = field(default_factory=list)


def _by_task(trajectories: list[Trajectory]) -> dict[str, list[Trajectory]]:
    groups: dict[str, list[Trajectory]] = {}
    for trajectory in trajectories:
        groups.setdefault(trajectory.task_id, []).append(trajectory)
    return groups


def validate_pending(store: TaskStore, accuracy: dict[str, float], iteration: int,
                     alpha_low: float, alpha_high: float, report: AdaptReport) -> TaskStore:
    """Accept or reject every pending candidate; one that was not rolled out is rejected as stale."""
    for candidate in store.pending():
        slot_id, task_id = candidate.task.slot_id, candidate.task.task_id
        acc_new = accuracy.get(task_id)
        ok = acc_new is not None and accept_candidate(acc_new, candidate.prev_acc, candidate.direction,
                                                      alpha_low, alpha_high)
        if ok:
            store = store.accept(slot_id, iteration, candidate.prev_acc, acc_new)
            report.accepted.append(task_id)
        else:
            store = store.reject(slot_id)
            report.rejected.append(task_id)
            if acc_new is None:
                report.notes.append(f"{task_id}: stale candidate (not rolled out), rejected")
    return store


def propose(store: TaskStore, trajectories: list[Trajectory], judged: list[JudgedStep], iteration: int,
            alpha_low: float, alpha_high: float, rewrite: Rewrite, source: str, rng: random.Random,
            report: AdaptReport) -> TaskStore:
    """A pending candidate for each rolled-out active task whose accuracy is outside the band."""
    groups = _by_task(trajectories)
    for slot in store.slots():
        group = groups.get(slot.active.task_id)
        if not group or slot.pending is not None:
            continue
        acc = sum(t.success for t in group) / len(group)
        direction = needs_rewrite(acc, alpha_low, alpha_high)
        if direction is None:
            continue
        feedback = critic_feedback(group, [j for j in judged if j.task_id == slot.active.task_id])
        candidate, log = rewrite(slot.active, direction, feedback, rng)
        report.notes.extend(log)
        if candidate is None:
            report.failed_proposals.append(slot.active.task_id)
            continue
        pending = PendingCandidate(task=candidate, direction=direction, created_iteration=iteration,
                                   prev_acc=acc, source=source, feedback=feedback)
        store = store.set_pending(slot.slot_id, pending)
        report.proposed.append(candidate.task_id)
    return store


def adapt(store: TaskStore, trajectories: list[Trajectory], judged: list[JudgedStep], iteration: int,
          alpha_low: float, alpha_high: float, rewrite: Rewrite | None, source: str, rng: random.Random
          ) -> tuple[TaskStore, AdaptReport, dict[str, float]]:
    """Steps 4–5 of an iteration. `rewrite=None` (adaptation off) only resolves pending candidates."""
    report = AdaptReport()
    accuracy = {tid: sum(t.success for t in g) / len(g) for tid, g in _by_task(trajectories).items()}
    store = validate_pending(store, accuracy, iteration, alpha_low, alpha_high, report)
    if rewrite is not None:
        store = propose(store, trajectories, judged, iteration, alpha_low, alpha_high, rewrite, source, rng,
                        report)
    metrics = {
        "env/accepted": float(len(report.accepted)),
        "env/rejected": float(len(report.rejected)),
        "env/proposed": float(len(report.proposed)),
        "env/proposal_failed": float(len(report.failed_proposals)),
    }
    return store, report, metrics
