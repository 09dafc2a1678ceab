"""One iteration of environment adaptation over the task store: the adapt stage of docs/design.md,
"The loop", with the rules of "The formulas", Environment adaptation.

Validate last iteration's pending candidates against their rollouts, then propose new candidates for
active tasks outside the band, from the critic feedback of the judge. Pure: store in, store out; the
typed `AdaptReport` says what happened and is the adapt stage's output file.
"""
from __future__ import annotations

import random
from typing import Callable

from pydantic import BaseModel, ConfigDict, Field

from rla_core.adaptation.acceptance import accept_candidate, needs_rewrite
from rla_core.adaptation.critic import critic_feedback
from rla_core.adaptation.rewriters import RewriteResult
from rla_core.adaptation.store import TaskStore
from rla_core.rewards import group_by_task, task_accuracy
from rla_core.schemas import CriticFeedback, Direction, JudgedStep, PendingCandidate, Task, Trajectory

# (task, direction, feedback, rng) -> (candidate or None, attempts log)
Rewrite = Callable[[Task, Direction, CriticFeedback, random.Random], RewriteResult]
# (active task, its trajectories) -> the critic feedback its rewrite is made from
FeedbackOf = Callable[[Task, list[Trajectory]], CriticFeedback]


class Proposal(BaseModel):
    """One rewrite asked of the environment model for one task outside the band."""

    model_config = ConfigDict(extra="forbid")

    task_id: str
    direction: Direction
    acc: float
    candidate_id: str | None  # None when every attempt failed
    attempts: int
    valid_attempts: int  # attempts that passed structural validation and changed the spec
    reserved_refused: int = 0  # valid attempts refused because they play a reserved (held-out/dev) task
    knob: str = ""  # procedural rewriter: the knob turned
    from_feedback: bool | None = None  # procedural rewriter: the knob came from the critic feedback
    difficulty_before: float
    difficulty_after: float | None = None
    attempt_errors: list[str] = Field(default_factory=list)


class Resolution(BaseModel):
    """A pending candidate accepted or rejected on its rollouts."""

    model_config = ConfigDict(extra="forbid")

    task_id: str
    direction: Direction
    accepted: bool
    prev_acc: float
    acc: float | None  # None: not rolled out (stale)
    difficulty_delta: float  # candidate difficulty − the version it was derived from


class AdaptReport(BaseModel):
    model_config = ConfigDict(extra="forbid")

    accepted: list[str] = Field(default_factory=list)  # candidate task ids that became active
    rejected: list[str] = Field(default_factory=list)  # candidate task ids discarded (rollouts excluded)
    proposed: list[str] = Field(default_factory=list)  # new pending candidate task ids
    failed_proposals: list[str] = Field(default_factory=list)  # task ids whose rewrites all failed
    resolutions: list[Resolution] = Field(default_factory=list)
    proposals: list[Proposal] = Field(default_factory=list)
    notes: list[str] = Field(default_factory=list)


def validate_pending(store: TaskStore, accuracy: dict[str, float], iteration: int,
                     alpha_low: float, alpha_high: float, report: AdaptReport) -> TaskStore:
    """Accept or reject every pending candidate; one that was not rolled out is rejected as stale."""
    for candidate in store.pending():
        slot_id, task_id = candidate.task.slot_id, candidate.task.task_id
        acc_new = accuracy.get(task_id)
        ok = acc_new is not None and accept_candidate(acc_new, candidate.prev_acc, candidate.direction,
                                                      alpha_low, alpha_high)
        delta = candidate.task.difficulty - store.slot(slot_id).active.difficulty
        report.resolutions.append(Resolution(task_id=task_id, direction=candidate.direction, accepted=ok,
                                             prev_acc=candidate.prev_acc, acc=acc_new, difficulty_delta=delta))
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
            report: AdaptReport, feedback_of: FeedbackOf | None = None) -> TaskStore:
    """A pending candidate for each rolled-out active task whose accuracy is outside the band.

    A task that became active in this iteration's validation is not rewritten again until its next
    roll-out as the active version: its accuracy here was measured as a candidate.
    """
    groups = group_by_task(trajectories)
    just_accepted = set(report.accepted)
    for slot in store.slots():
        group = groups.get(slot.active.task_id)
        if not group or slot.pending is not None or slot.active.task_id in just_accepted:
            continue
        acc = sum(t.success for t in group) / len(group)
        direction = needs_rewrite(acc, alpha_low, alpha_high)
        if direction is None:
            continue
        if feedback_of is not None:
            feedback = feedback_of(slot.active, group)
        else:
            feedback = critic_feedback(group, [j for j in judged if j.task_id == slot.active.task_id])
        candidate, attempts = rewrite(slot.active, direction, feedback, rng)
        last = attempts[-1] if attempts else None
        report.proposals.append(Proposal(
            task_id=slot.active.task_id, direction=direction, acc=acc,
            candidate_id=candidate.task_id if candidate else None, attempts=len(attempts),
            valid_attempts=sum(a.ok for a in attempts), reserved_refused=sum(a.reserved for a in attempts),
            knob=last.knob if candidate and last else "",
            from_feedback=last.from_feedback if candidate and last else None,
            difficulty_before=slot.active.difficulty,
            difficulty_after=candidate.difficulty if candidate else None,
            attempt_errors=[a.error for a in attempts if not a.ok],
        ))
        if candidate is None:
            report.failed_proposals.append(slot.active.task_id)
            continue
        pending = PendingCandidate(task=candidate, direction=direction, created_iteration=iteration,
                                   prev_acc=acc, source=source, reason=last.reason if last else "",
                                   feedback=feedback)
        store = store.set_pending(slot.slot_id, pending)
        report.proposed.append(candidate.task_id)
    return store


def _mean(values: list[float]) -> float:
    return sum(values) / len(values) if values else 0.0


def adapt_metrics(report: AdaptReport) -> dict[str, float]:
    """Counts, rates and the difficulty moves of proposals and of accepted candidates."""
    proposals = report.proposals
    made = [p for p in proposals if p.candidate_id]
    graded = [p for p in made if p.from_feedback is not None]
    attempts = sum(p.attempts for p in proposals)
    metrics = {
        "accepted": float(len(report.accepted)),
        "rejected": float(len(report.rejected)),
        "proposed": float(len(report.proposed)),
        "proposal_failed": float(len(report.failed_proposals)),
        "valid_attempt_rate": sum(p.valid_attempts for p in proposals) / attempts if attempts else 0.0,
        "reserved_refused": float(sum(p.reserved_refused for p in proposals)),
    }
    if graded:
        metrics["knob_from_feedback_rate"] = sum(bool(p.from_feedback) for p in graded) / len(graded)
    for direction in ("harder", "easier"):
        resolved = [r for r in report.resolutions if r.direction == direction]
        accepted = [r.difficulty_delta for r in resolved if r.accepted]
        metrics[f"{direction}_accepted"] = float(len(accepted))
        metrics[f"{direction}_acceptance_rate"] = len(accepted) / len(resolved) if resolved else 0.0
        if accepted:
            metrics[f"{direction}_accepted_difficulty_delta"] = _mean(accepted)
    return metrics


def adapt(store: TaskStore, trajectories: list[Trajectory], judged: list[JudgedStep], iteration: int,
          alpha_low: float, alpha_high: float, rewrite: Rewrite | None, source: str, rng: random.Random,
          feedback_of: FeedbackOf | None = None) -> tuple[TaskStore, AdaptReport, dict[str, float]]:
    """The adapt stage of an iteration. `rewrite=None` (adaptation off) only resolves pending candidates.
    `feedback_of(task, its trajectories)` replaces the step critic (the coding setting's test critic)."""
    report = AdaptReport()
    accuracy = task_accuracy(trajectories)
    store = validate_pending(store, accuracy, iteration, alpha_low, alpha_high, report)
    if rewrite is not None:
        store = propose(store, trajectories, judged, iteration, alpha_low, alpha_high, rewrite, source, rng,
                        report, feedback_of)
    return store, report, adapt_metrics(report)


def trainable(report: AdaptReport, trajectories: list[Trajectory],
              judged: list[JudgedStep]) -> tuple[list[Trajectory], list[JudgedStep]]:
    """The rollouts and verdicts that may enter training: a rejected candidate's never do."""
    rejected = set(report.rejected)
    return ([t for t in trajectories if t.task_id not in rejected],
            [j for j in judged if j.task_id not in rejected])
