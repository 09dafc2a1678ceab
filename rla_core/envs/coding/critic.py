"""Critic feedback of the coding setting: which ground-truth tests the failed programs of a problem
failed, and how — the same typed CriticFeedback the household critic writes, read by the procedural
rewriter (`CodingFamily.adjust` reads the failure kind that starts each rationale) and by an LLM
rewriter (`render()`)."""
from __future__ import annotations

from collections import Counter
from collections.abc import Sequence

from rla_core.schemas import CriticFeedback, ProgramRun, RejectedAction, Task

MAX_ITEMS = 8
IO_CHARS = 40


def _io(text: str) -> str:
    text = text.rstrip("\n")
    return repr(text if len(text) <= IO_CHARS else text[:IO_CHARS] + "...")


def gt_test_label(spec: dict, index: int) -> str:
    tests = spec.get("tests", [])
    if index < len(tests):
        return f"test {index + 1}: input {_io(tests[index]['stdin'])}, expected {_io(tests[index]['stdout'])}"
    return f"test {index + 1}: function-call test {index - len(tests) + 1}"


def coding_feedback(task: Task, runs: Sequence[ProgramRun]) -> CriticFeedback:
    """One RejectedAction per failed GT test: count = failed programs that failed it; rationale =
    '<most common failure kind>: <its most common detail>' (e.g. "wrong: printed '12'")."""
    failed = [r for r in runs if not r.pass_all]
    items = []
    for index in range(max((len(r.statuses) for r in runs), default=0)):
        kinds = Counter(r.statuses[index] for r in failed if index < len(r.statuses) and r.statuses[index] != "ok")
        if not kinds:
            continue
        kind = kinds.most_common(1)[0][0]
        details = Counter(r.details[index] for r in failed if index < len(r.details) and r.statuses[index] == kind)
        detail = details.most_common(1)[0][0] if details else ""
        count = sum(kinds.values())
        items.append(RejectedAction(action=gt_test_label(task.spec, index), count=count, runs=count,
                                    rationale=f"{kind}: {detail}" if detail else kind))
    items.sort(key=lambda a: (-a.count, a.action))
    return CriticFeedback(trajectories=len(runs), failed=len(failed), rejected_steps=sum(a.count for a in items),
                          actions=items[:MAX_ITEMS], omitted=max(len(items) - MAX_ITEMS, 0), unit="test")
