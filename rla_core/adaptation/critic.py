"""Critic feedback for the environment model (docs/design.md, "The formulas", Environment adaptation).

From the failed trajectories of one task, collect the steps that ALL m judge samples rejected
(verdict −1), with the action taken and the judge's rationale (its text before `\\boxed`), and
summarise them as a `CriticFeedback` record: repeated actions are counted, the most frequent ones are
listed first. The output is deterministic for the same input; `CriticFeedback.render()` is its prose.
"""
from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from rla_core.judge.judge import judge_rationale
from rla_core.schemas import NO_ACTION, CriticFeedback, JudgedStep, RejectedAction, Trajectory


@dataclass
class _ActionSummary:
    count: int = 0
    runs: set[int] = field(default_factory=set)
    rationales: Counter[str] = field(default_factory=Counter)


def _rejected_steps(
    failed: Sequence[Trajectory], judged: dict[tuple[int, int], JudgedStep], max_rationale_chars: int
) -> dict[str, _ActionSummary]:
    """action -> summary over the steps of failed runs that every judge sample rejected (input order)."""
    summaries: dict[str, _ActionSummary] = {}
    for trajectory in failed:
        for step in sorted(trajectory.steps, key=lambda s: s.index):
            verdicts = judged.get((trajectory.sample_index, step.index))
            if verdicts is None or not verdicts.samples:
                continue
            if any(sample.verdict != -1 for sample in verdicts.samples):
                continue
            summary = summaries.setdefault(step.action or NO_ACTION, _ActionSummary())
            summary.count += 1
            summary.runs.add(trajectory.sample_index)
            for sample in verdicts.samples:
                rationale = judge_rationale(sample.text, max_rationale_chars)
                if rationale:
                    summary.rationales[rationale] += 1
    return summaries


def critic_feedback(
    trajectories: Iterable[Trajectory],
    judged: Iterable[JudgedStep],
    max_lines: int = 8,
    max_rationale_chars: int = 160,
) -> CriticFeedback:
    """What went wrong in the failed trajectories of ONE task, as a typed record.

    One entry per distinct action that every judge sample rejected in some failed run, ordered by how
    often it was rejected (ties: first occurrence by sample_index, step_index), at most `max_lines`
    entries, each with the judge's most frequent rationale for it. Judged steps of other tasks are
    ignored; trajectories of several tasks raise.
    """
    trajectories = sorted(trajectories, key=lambda t: t.sample_index)
    task_ids = {t.task_id for t in trajectories}
    if len(task_ids) > 1:
        raise ValueError(f"critic_feedback takes the trajectories of one task, got {sorted(task_ids)}")
    failed = [t for t in trajectories if not t.success]
    if not failed:
        return CriticFeedback(trajectories=len(trajectories))
    task_id = next(iter(task_ids))
    table = {(j.sample_index, j.step_index): j for j in judged if j.task_id == task_id}
    summaries = _rejected_steps(failed, table, max_rationale_chars)
    ranked = sorted(summaries.items(), key=lambda item: -item[1].count)  # stable: ties keep first occurrence
    actions = [
        RejectedAction(action=action, count=summary.count, runs=len(summary.runs),
                       rationale=summary.rationales.most_common(1)[0][0] if summary.rationales else "")
        for action, summary in ranked[:max_lines]
    ]
    return CriticFeedback(trajectories=len(trajectories), failed=len(failed),
                          rejected_steps=sum(s.count for s in summaries.values()), actions=actions,
                          omitted=max(len(ranked) - max_lines, 0))
