"""One adaptation cycle (docs/design.md, "The formulas", Environment adaptation): validate last
iteration's candidates, then propose rewrites for rolled-out active tasks outside the band, from the
judge's critic feedback.

Real records, the real TaskStore, and a fake rewriter that records its calls. Band: α_low 0.2, α_high 0.8.
"""
from __future__ import annotations

import random

import pytest

from rla_core.adaptation.critic import critic_feedback
from rla_core.adaptation.cycle import AdaptReport, adapt, propose, validate_pending
from rla_core.adaptation.rewriters import RewriteAttempt
from rla_core.adaptation.store import TaskStore
from rla_core.schemas import CriticFeedback, JudgedStep, JudgeSample, PendingCandidate, Step, Task, Trajectory

LOW, HIGH = 0.2, 0.8
ITERATION = 5
NO = "\\boxed{-1}"


def task(slot: str, version: int = 0, suffix: str = "", difficulty: float = 4.0) -> Task:
    return Task(task_id=f"{slot}-v{version}{suffix}", slot_id=slot, spec={"slot": slot, "v": version}, version=version,
                difficulty=difficulty)


def rollouts(t: Task, successes: int, total: int, action: str = "go to shelf 1") -> list[Trajectory]:
    """`total` one-step trajectories of `t`, the first `successes` of them successful."""
    return [
        Trajectory(task_id=t.task_id, slot_id=t.slot_id, sample_index=j, goal="g", initial_observation="o",
                   steps=[Step(index=0, prompt_ids=[1], response_ids=[2], response_text=" \\boxed{1}",
                               action=action, observation="nothing")],
                   success=j < successes)
        for j in range(total)
    ]


def verdicts(t: Trajectory, step: int, votes: list[tuple[int, str]]) -> JudgedStep:
    samples = [JudgeSample(prompt_ids=[1], response_ids=[2], text=text, verdict=v) for v, text in votes]
    return JudgedStep(task_id=t.task_id, sample_index=t.sample_index, step_index=step, samples=samples)


def pending(parent: Task, direction: str, prev_acc: float, created: int = ITERATION - 1) -> PendingCandidate:
    child = task(parent.slot_id, parent.version + 1, suffix="-cand",
                 difficulty=parent.difficulty + (1.0 if direction == "harder" else -1.0))
    return PendingCandidate(task=child, direction=direction, created_iteration=created, prev_acc=prev_acc,
                            source="fake", reason="why it was rewritten")


class FakeRewrite:
    """(task, direction, feedback, rng) -> (candidate | None, attempts); records every call."""

    def __init__(self, fail: bool = False):
        self.fail = fail
        self.calls: list[tuple[str, str, CriticFeedback, random.Random]] = []

    def __call__(self, t: Task, direction: str, feedback: CriticFeedback, rng: random.Random):
        self.calls.append((t.task_id, direction, feedback, rng))
        if self.fail:
            return None, [RewriteAttempt(attempt=0, ok=False, error="attempt 1 failed")]
        child = Task(task_id=f"{t.slot_id}-v{t.version + 1}-{direction}", slot_id=t.slot_id, spec={"d": direction},
                     version=t.version + 1, difficulty=t.difficulty + 1)
        attempt = RewriteAttempt(attempt=0, ok=True, reason=f"rewritten {direction}", knob="rooms",
                                 from_feedback=bool(feedback.actions))
        return child, [attempt]


COUNTS = ("accepted", "rejected", "proposed", "proposal_failed")


def counts(metrics: dict[str, float]) -> dict[str, float]:
    return {key: metrics[key] for key in COUNTS}


def run_adapt(store, trajectories, judged=(), rewrite=None, rng=None):
    return adapt(store, list(trajectories), list(judged), ITERATION, LOW, HIGH, rewrite, "fake",
                 rng or random.Random(0))


# ---------------------------------------------------------------- step 4: validation
@pytest.mark.parametrize(
    "successes, total, accepted",
    [
        (5, 10, True),  # acc' 0.5: 0.2 ≤ 0.5 < 1.0
        (2, 10, True),  # acc' 0.2 = α_low: the lower bound is inclusive
        (1, 10, False),  # acc' 0.1 < α_low: too hard
        (0, 10, False),  # acc' 0: never accepted
        (10, 10, False),  # acc' 1.0 is not < prev_acc 1.0: not harder
    ],
)
def test_harder_candidate_is_accepted_only_inside_its_window(successes, total, accepted):
    parent = task("a")
    store = TaskStore.from_seed([parent]).set_pending("a", pending(parent, "harder", prev_acc=1.0))
    candidate = store.slot("a").pending.task
    new, report, metrics = run_adapt(store, rollouts(candidate, successes, total))
    slot = new.slot("a")
    assert slot.pending is None
    if accepted:
        assert report.accepted == ["a-v1-cand"] and report.rejected == []
        assert slot.active == candidate and slot.root == parent
        event = slot.history[-1]
        assert len(slot.history) == 2
        assert (event.version, event.task_id, event.iteration, event.source) == (1, "a-v1-cand", ITERATION, "fake")
        assert (event.direction, event.reason) == ("harder", "why it was rewritten")
        assert metrics["harder_accepted_difficulty_delta"] == 1.0  # the plan-length move that was accepted
        assert event.acc_before == 1.0 and event.acc_after == successes / total
    else:
        assert report.accepted == [] and report.rejected == ["a-v1-cand"]
        assert slot.active == parent and len(slot.history) == 1
    assert metrics["accepted"] == float(accepted) and metrics["rejected"] == float(not accepted)
    assert store.slot("a").pending is not None  # the input store is never edited in place


@pytest.mark.parametrize(
    "prev_acc, successes, total, accepted",
    [
        (0.0, 5, 10, True),  # 0 < 0.5 ≤ 0.8
        (0.0, 8, 10, True),  # acc' 0.8 = α_high: the upper bound is inclusive
        (0.0, 9, 10, False),  # acc' 0.9 > α_high: too easy
        (0.0, 0, 10, False),  # acc' 0: never accepted
        (0.1, 1, 10, False),  # acc' 0.1 is not > prev_acc 0.1: not easier
        (0.1, 2, 10, True),  # 0.1 < 0.2 ≤ 0.8
    ],
)
def test_easier_candidate_is_accepted_only_inside_its_window(prev_acc, successes, total, accepted):
    parent = task("b")
    store = TaskStore.from_seed([parent]).set_pending("b", pending(parent, "easier", prev_acc=prev_acc))
    candidate = store.slot("b").pending.task
    new, report, _ = run_adapt(store, rollouts(candidate, successes, total))
    slot = new.slot("b")
    assert slot.pending is None
    assert (report.accepted, report.rejected) == ((["b-v1-cand"], []) if accepted else ([], ["b-v1-cand"]))
    assert slot.active.task_id == ("b-v1-cand" if accepted else "b-v0")
    if accepted:
        event = slot.history[-1]
        assert (event.direction, event.acc_before, event.acc_after) == ("easier", prev_acc, successes / total)


def test_candidate_without_rollouts_is_rejected_as_stale():
    parent = task("c")
    store = TaskStore.from_seed([parent]).set_pending("c", pending(parent, "harder", prev_acc=1.0))
    report = AdaptReport()
    new = validate_pending(store, {"c-v0": 1.0}, ITERATION, LOW, HIGH, report)  # only the parent has an accuracy
    assert report.rejected == ["c-v1-cand"] and report.accepted == []
    assert report.notes == ["c-v1-cand: stale candidate (not rolled out), rejected"]
    assert new.slot("c").pending is None and new.slot("c").active == parent


def test_validate_pending_resolves_every_slot_independently():
    a, b, c = task("a"), task("b"), task("c")
    store = (TaskStore.from_seed([a, b, c])
             .set_pending("a", pending(a, "harder", prev_acc=0.9))
             .set_pending("b", pending(b, "easier", prev_acc=0.1)))
    accuracy = {"a-v1-cand": 0.5, "b-v1-cand": 0.0}
    report = AdaptReport()
    new = validate_pending(store, accuracy, ITERATION, LOW, HIGH, report)
    assert report.accepted == ["a-v1-cand"] and report.rejected == ["b-v1-cand"] and report.notes == []
    assert [s.active.task_id for s in new.slots()] == ["a-v1-cand", "b-v0", "c-v0"]
    assert new.counts() == {"slots": 3, "pending": 0, "accepted_rewrites": 1, "max_version": 1}


# ---------------------------------------------------------------- step 5: proposals
def test_proposals_only_for_rolled_out_active_tasks_outside_the_band():
    tasks = {s: task(s) for s in "abcdef"}
    # accuracies: a 1.0, b 0.8 (= α_high), c 0.5 (in band), d 0.2 (= α_low), e 0.0; f is not rolled out
    trajectories = [*rollouts(tasks["a"], 5, 5), *rollouts(tasks["b"], 4, 5), *rollouts(tasks["c"], 2, 4),
                    *rollouts(tasks["d"], 1, 5), *rollouts(tasks["e"], 0, 3)]
    rewrite, rng = FakeRewrite(), random.Random(3)
    new, report, metrics = run_adapt(TaskStore.from_seed(tasks.values()), trajectories, rewrite=rewrite, rng=rng)
    assert [(tid, d) for tid, d, _, _ in rewrite.calls] == [
        ("a-v0", "harder"), ("b-v0", "harder"), ("d-v0", "easier"), ("e-v0", "easier")]
    assert all(r is rng for _, _, _, r in rewrite.calls)
    assert report.proposed == ["a-v1-harder", "b-v1-harder", "d-v1-easier", "e-v1-easier"]
    assert report.accepted == report.rejected == report.failed_proposals == []
    assert [(p.task_id, p.candidate_id, p.attempts, p.valid_attempts) for p in report.proposals] == [
        ("a-v0", "a-v1-harder", 1, 1), ("b-v0", "b-v1-harder", 1, 1), ("d-v0", "d-v1-easier", 1, 1),
        ("e-v0", "e-v1-easier", 1, 1)]
    expected_prev = {"a": 1.0, "b": 0.8, "d": 0.2, "e": 0.0}
    for slot in new.slots():
        if slot.slot_id not in expected_prev:
            assert slot.pending is None
            continue
        p = slot.pending
        assert (p.created_iteration, p.source, p.prev_acc) == (ITERATION, "fake", expected_prev[slot.slot_id])
        assert p.reason == f"rewritten {p.direction}"
        assert p.direction == ("harder" if slot.slot_id in "ab" else "easier")
        assert slot.active == tasks[slot.slot_id]  # a proposal does not change the active task
    assert new.slot("e").pending.feedback.render() == (
        "Failed trajectories: 3 of 3. No step was rejected by every judge sample.")
    assert new.slot("a").pending.feedback.render() == "No failed trajectories."
    assert counts(metrics) == {"accepted": 0.0, "rejected": 0.0, "proposed": 4.0, "proposal_failed": 0.0}
    assert metrics["knob_from_feedback_rate"] == 0.0  # no step was rejected: no knob can come from feedback


def test_propose_skips_a_slot_that_still_has_a_pending_candidate():
    a, b = task("a"), task("b")
    store = TaskStore.from_seed([a, b]).set_pending("a", pending(a, "harder", prev_acc=1.0))
    rewrite, report = FakeRewrite(), AdaptReport()
    new = propose(store, [*rollouts(a, 4, 4), *rollouts(b, 4, 4)], [], ITERATION, LOW, HIGH, rewrite, "fake",
                  random.Random(0), report)
    assert [c[0] for c in rewrite.calls] == ["b-v0"]
    assert new.slot("a").pending.task.task_id == "a-v1-cand"  # untouched
    assert report.proposed == ["b-v1-harder"]


def test_a_candidate_accepted_in_this_iteration_is_not_rewritten_again_in_it():
    """Validation clears every pending candidate; a slot whose candidate was rejected gets a new proposal
    from its active task's rollouts, but a candidate accepted just now waits for its next roll-out as
    the active version (its accuracy here was measured as a candidate)."""
    a, b, c = task("a"), task("b"), task("c")
    store = (TaskStore.from_seed([a, b, c])
             .set_pending("a", pending(a, "harder", prev_acc=1.0))  # rejected (acc' 0.1), parent a at 1.0
             .set_pending("b", pending(b, "harder", prev_acc=1.0))  # accepted at acc' 0.5: in band
             .set_pending("c", pending(c, "harder", prev_acc=1.0)))  # accepted at acc' 0.2 = α_low
    cand = {s: store.slot(s).pending.task for s in "abc"}
    trajectories = [*rollouts(a, 5, 5), *rollouts(cand["a"], 1, 10), *rollouts(cand["b"], 5, 10),
                    *rollouts(cand["c"], 2, 10)]
    rewrite = FakeRewrite()
    new, report, metrics = run_adapt(store, trajectories, rewrite=rewrite)
    assert report.rejected == ["a-v1-cand"] and report.accepted == ["b-v1-cand", "c-v1-cand"]
    assert [(tid, d) for tid, d, _, _ in rewrite.calls] == [("a-v0", "harder")]
    assert new.slot("a").pending.task.task_id == "a-v1-harder" and new.slot("a").pending.prev_acc == 1.0
    assert new.slot("b").pending is None and new.slot("c").pending is None
    assert new.slot("c").active.task_id == "c-v1-cand"
    assert counts(metrics) == {"accepted": 2.0, "rejected": 1.0, "proposed": 1.0, "proposal_failed": 0.0}
    assert (metrics["harder_accepted"], metrics["harder_acceptance_rate"]) == (2.0, 2 / 3)


def test_adaptation_off_resolves_pending_but_proposes_nothing():
    a, b = task("a"), task("b")
    store = TaskStore.from_seed([a, b]).set_pending("a", pending(a, "harder", prev_acc=1.0))
    trajectories = [*rollouts(store.slot("a").pending.task, 5, 10), *rollouts(b, 0, 4)]  # b at 0.0: out of band
    new, report, metrics = run_adapt(store, trajectories, rewrite=None)
    assert report.accepted == ["a-v1-cand"] and report.proposed == [] and report.failed_proposals == []
    assert new.counts() == {"slots": 2, "pending": 0, "accepted_rewrites": 1, "max_version": 1}
    assert counts(metrics) == {"accepted": 1.0, "rejected": 0.0, "proposed": 0.0, "proposal_failed": 0.0}


def test_failed_rewrite_is_listed_and_leaves_the_slot_without_candidate():
    a, b = task("a"), task("b")
    rewrite = FakeRewrite(fail=True)
    new, report, metrics = run_adapt(TaskStore.from_seed([a, b]), [*rollouts(a, 3, 3), *rollouts(b, 0, 3)],
                                     rewrite=rewrite)
    assert report.failed_proposals == ["a-v0", "b-v0"] and report.proposed == []
    assert [(p.task_id, p.candidate_id, p.attempt_errors) for p in report.proposals] == [
        ("a-v0", None, ["attempt 1 failed"]), ("b-v0", None, ["attempt 1 failed"])]
    assert new.counts()["pending"] == 0 and new == TaskStore.from_seed([a, b])
    assert metrics["proposal_failed"] == 2.0 and metrics["proposed"] == 0.0


def test_metrics_match_the_report_counts():
    a, b, c, d = task("a"), task("b"), task("c"), task("d")
    store = (TaskStore.from_seed([a, b, c, d])
             .set_pending("a", pending(a, "easier", prev_acc=0.0))  # accepted at 0.5
             .set_pending("b", pending(b, "easier", prev_acc=0.0)))  # stale: rejected
    trajectories = [*rollouts(store.slot("a").pending.task, 1, 2), *rollouts(b, 0, 2), *rollouts(c, 2, 2),
                    *rollouts(d, 1, 2)]
    for rewrite, proposed in ((FakeRewrite(), 2), (FakeRewrite(fail=True), 0)):
        _, report, metrics = run_adapt(store, trajectories, rewrite=rewrite)
        assert (len(report.accepted), len(report.rejected), len(report.proposed)) == (1, 1, proposed)
        assert counts(metrics) == {
            "accepted": float(len(report.accepted)),
            "rejected": float(len(report.rejected)),
            "proposed": float(len(report.proposed)),
            "proposal_failed": float(len(report.failed_proposals)),
        }
        assert len(report.failed_proposals) == 2 - proposed  # b (0.0) and c (1.0); d at 0.5 is in band


def test_rewrite_receives_the_critic_feedback_of_rejected_steps():
    a, other = task("a"), task("z")
    ok = rollouts(a, 1, 1)  # one success
    failed = [t.model_copy(update={"sample_index": j, "success": False}) for j, t in
              enumerate(rollouts(a, 0, 4), start=1)]
    runs = ok + failed  # acc 1/5 = 0.2 ≤ α_low: "easier"
    judged = [verdicts(t, 0, [(-1, "The shelf is empty. " + NO), (-1, "The shelf is empty. " + NO)]) for t in runs]
    judged[1] = verdicts(runs[1], 0, [(-1, "Bad. " + NO), (1, "Fine. \\boxed{1}")])  # not unanimous: left out
    judged.append(verdicts(rollouts(other, 0, 1)[0], 0, [(-1, "Other task. " + NO)]))  # another task: ignored
    rewrite = FakeRewrite()
    new, _, _ = run_adapt(TaskStore.from_seed([a, other]), runs, judged, rewrite=rewrite)
    expected = ("Failed trajectories: 4 of 5. Steps rejected by every judge sample: 3 (1 distinct actions).\n"
                '- "go to shelf 1" rejected 3x in 3 failed runs; judge: "The shelf is empty."')
    assert [(c[0], c[1], c[2].render()) for c in rewrite.calls] == [("a-v0", "easier", expected)]
    assert rewrite.calls[0][2] == critic_feedback(runs, judged)
    assert new.slot("a").pending.feedback.render() == expected
