"""The trajectory report: which trajectories are shown, and that text and HTML show every step's
response, judge verdicts with rationales, oracle label, reward and training advantage."""
from __future__ import annotations

import re
from pathlib import Path

import pytest

from rla_core.config import Config, config_to_yaml
from rla_core.rewards import StepKey, policy_samples
from rla_core.schemas import JudgedStep, JudgeSample, Step, TrainingSample, Trajectory
from tasks.paths import RunPaths
from tasks.reports.trajectories import (
    EXCLUDED,
    NOT_TRAINED,
    ReportSelection,
    iteration_report,
    render_html,
    render_text,
    report_rewards,
    sample_advantages,
    select_trajectories,
    trajectory_report,
)
from tasks.storage.files import write_json, write_records

GOOD = " moves toward the goal \\boxed{1}"
BAD = " does not help the goal \\boxed{-1}"


def _trajectory(task_id: str, sample: int, success: bool, steps: int = 2, observation: str = "you see a door",
                actions: tuple[str | None, ...] = ()) -> Trajectory:
    return Trajectory(
        task_id=task_id, slot_id=f"slot-{task_id}", sample_index=sample, goal=f"goal of {task_id}",
        initial_observation="You are in a kitchen.", success=success,
        steps=[Step(index=i, prompt_ids=[1, i], response_ids=[2, i, sample],
                    response_text=f" \\boxed{{{i + 1}}}\n",
                    action=actions[i] if i < len(actions) else f"go {i}",
                    observation=observation, oracle_good=[True, False, None][i % 3])
               for i in range(steps)],
    )


def _judged(trajectory: Trajectory, texts: tuple[str, ...] = (BAD, BAD, GOOD)) -> list[JudgedStep]:
    def sample(text: str) -> JudgeSample:
        verdict = 1 if "{1}" in text else (-1 if "{-1}" in text else 0)
        return JudgeSample(prompt_ids=[1], response_ids=[2], text=text, verdict=verdict)

    return [JudgedStep(task_id=trajectory.task_id, sample_index=trajectory.sample_index, step_index=s.index,
                       samples=[sample(t) for t in texts], oracle_good=s.oracle_good)
            for s in trajectory.steps]


def _report(trajectories, judged, samples=(), step_weight=1.0, **kw):
    return trajectory_report(trajectories, judged, report_rewards(trajectories, judged, step_weight),
                             sample_advantages(samples), **kw)


def test_selection_prefers_mixed_tasks_with_a_success_and_a_failure():
    trajectories = (
        [_trajectory("a", j, False) for j in range(3)]  # all fail
        + [_trajectory("c", j, True) for j in range(3)]  # all succeed
        + [_trajectory("d", j, j == 2) for j in range(3)]  # mixed
        + [_trajectory("b", j, j == 1) for j in range(3)]  # mixed
    )
    shown = [(t.task_id, t.sample_index, t.success) for t in select_trajectories(trajectories, max_tasks=3)]
    assert shown == [("b", 1, True), ("b", 0, False), ("d", 2, True), ("d", 0, False),
                     ("a", 0, False), ("a", 1, False)]
    every = select_trajectories(trajectories, max_tasks=4, per_task=1)
    assert [t.task_id for t in every] == ["b", "d", "a", "c"]
    # input order does not matter
    assert select_trajectories(reversed(trajectories), max_tasks=3) == select_trajectories(trajectories, max_tasks=3)


def test_text_shows_steps_verdicts_rationales_rewards_and_advantages():
    failed, won = _trajectory("t", 0, False), _trajectory("t", 1, True)
    judged = _judged(failed) + _judged(won, (GOOD, GOOD, " no box here"))
    trained = TrainingSample(prompt_ids=[1], response_ids=[2], advantage=-0.75, task_id="t", sample_index=0,
                             step_index=0)
    selection = _report([failed, won], judged, [trained])
    text = render_text(selection)

    assert "' \\boxed" not in text and "\\\\boxed" not in text and "[1, -1" not in text
    assert "=== task t  sample 1  success" in text and "=== task t  sample 0  failure" in text
    assert "goal: goal of t" in text and "initial observation: You are in a kitchen." in text
    assert "    response: \\boxed{1}\n" in text and "    command: go 0" in text
    assert "next observation: you see a door" in text
    assert "oracle: good" in text and "oracle: bad" in text
    assert "judge 1: -1  does not help the goal" in text and "judge 3: +1  moves toward the goal" in text
    assert "judge 3: unparsed  no box here" in text
    # failure: R = -1 + 1 * (-1 - 1 + 1) / 3; success: R = 1 + (1 + 1 + 0) / 3
    assert "reward R: -1.333    advantage: -0.750" in text
    assert "reward R: -1.333    advantage: not trained" in text  # its step 1 has no training sample
    assert "reward R: 1.667    advantage: not trained" in text
    assert "1 of 1 tasks shown, 2 of 2 trajectories" in text
    assert "success rate of the shown: 0.50 (1/2)" in text


def test_invalid_answer_unknown_oracle_and_unscored_steps():
    trajectory = _trajectory("t", 0, False, steps=3, actions=("go 0", None, "go 2"))
    judged = _judged(trajectory)[:2]  # step 2 was never judged: no reward with λ > 0
    text = render_text(_report([trajectory], judged))
    assert "command: (invalid answer)" in text and "oracle: unknown" in text
    assert "judge: (no verdicts)" in text
    assert "reward R: n/a" in text and "-1.333" not in text
    outcome_only = render_text(_report([trajectory], judged, step_weight=0.0))
    assert outcome_only.count("reward R: -1.000") == 3


def test_rejected_candidates_are_shown_but_marked_excluded():
    trajectories = [_trajectory("cand", 0, True), _trajectory("cand", 1, False)]
    judged = [j for t in trajectories for j in _judged(t)]
    selection = _report(trajectories, judged, rejected={"cand"})
    assert all(view.excluded for view in selection.trajectories)
    assert f"=== task cand  sample 0  success  [{EXCLUDED}]" in render_text(selection)
    assert EXCLUDED in render_html(selection)


def test_html_escapes_everything_and_is_self_contained():
    evil = "<script>alert('x')</script> & <b>bold</b>"
    won = _trajectory("t<1>", 0, True, observation=evil)
    lost = _trajectory("t<1>", 1, False, observation=evil)
    judged = _judged(won, (" a<b & c \\boxed{1}",) * 3) + _judged(lost)
    page = render_html(_report([won, lost], judged))

    assert "<script" not in page.lower() and "<b>bold" not in page
    assert "&lt;script&gt;alert(&#x27;x&#x27;)&lt;/script&gt; &amp; &lt;b&gt;bold&lt;/b&gt;" in page
    assert "task t&lt;1&gt;" in page and "a&lt;b &amp; c" in page
    assert page.startswith("<!DOCTYPE html>") and page.count("<html") == 1 and page.rstrip().endswith("</html>")
    assert "<style>" in page and not re.search(r"(src|href)\s*=|https?://|@import", page)
    assert page.count("<table>") == 2
    assert '<section class="success">' in page and '<section class="failure">' in page
    assert "2 trajectories" in page and "0.50 (1/2)" in page
    assert "-1.333" in page and NOT_TRAINED in page


def _write_iteration(paths: RunPaths, k: int, trajectories, judged, policy, rejected=()) -> None:
    write_records(paths.stage(k, "rollout") / "trajectories.jsonl", trajectories)
    write_records(paths.stage(k, "judge") / "judged.jsonl", judged)
    write_json(paths.stage(k, "adapt") / "report.json", {"rejected": list(rejected)})
    write_json(paths.stage(k, "adapt") / "diff.json", {})
    write_records(paths.stage(k, "data") / "policy.jsonl", policy)


def _seam_data():
    """Two mixed tasks with different verdicts per step, one all-fail task (never trained)."""
    trajectories, judged = [], []
    for task_id, wins in (("m1", (0, 2)), ("m2", (1,)), ("z", ())):
        for j in range(3):
            trajectory = _trajectory(task_id, j, j in wins, steps=2 + j % 2)
            trajectories.append(trajectory)
            texts = (GOOD, BAD, GOOD) if j % 2 else (BAD, BAD, GOOD)
            judged += _judged(trajectory, texts)
    return trajectories, judged


def test_report_shows_exactly_the_advantages_policy_samples_trained_with(tmp_path):
    trajectories, judged = _seam_data()
    samples, _ = policy_samples(trajectories, judged, 1.0)
    assert samples  # the seam is only tested if something trained
    paths = RunPaths.of(tmp_path)
    _write_iteration(paths, 1, trajectories, judged, samples)

    selection = iteration_report(paths, 1, step_weight=1.0, max_tasks=3, per_task=3)
    expected = sample_advantages(samples)
    shown = {StepKey(v.task_id, v.sample_index, s.index): s.advantage
             for v in selection.trajectories for s in v.steps}
    assert len(shown) == sum(len(t.steps) for t in trajectories)  # everything is shown here
    assert {k: a for k, a in shown.items() if a is not None} == expected
    assert all(shown[k] is None for k in shown if k.task_id == "z")
    text = render_text(selection)
    for advantage in expected.values():
        assert f"advantage: {advantage:.3f}" in text
    assert text.count(f"advantage: {NOT_TRAINED}") == len(shown) - len(expected)


def test_log_artifacts_logs_text_and_html_to_the_iteration_run(tmp_path):
    from tasks.stages.commit import log_artifacts
    from tasks.tracking.run_log import tracker_for

    run_dir = tmp_path / "run"
    (run_dir).mkdir()
    (run_dir / "config.yaml").write_text(config_to_yaml(Config()))
    trajectories, judged = _seam_data()
    samples, _ = policy_samples(trajectories, judged, Config().reward.step_weight)
    paths = RunPaths.of(run_dir)
    _write_iteration(paths, 1, trajectories, judged, samples, rejected=["z"])

    log_artifacts(paths, 1)
    tracker = tracker_for(str(run_dir))
    child = tracker.iteration_run(1)
    assert {a.path for a in tracker.client.list_artifacts(child, "samples")} == {
        "samples/trajectories.txt", "samples/trajectories.html"}
    page = Path(tracker.client.download_artifacts(child, "samples/trajectories.html", str(tmp_path / "dl")))
    assert page.read_text().startswith("<!DOCTYPE html>") and EXCLUDED in page.read_text()


@pytest.mark.parametrize("per_task", [1, 2, 5])
def test_per_task_limit(per_task):
    trajectories = [_trajectory("t", j, j % 2 == 0) for j in range(4)]
    assert len(select_trajectories(trajectories, per_task=per_task)) == min(per_task, 4)


def test_accepted_rewrites_are_shown_beside_the_task_they_came_from(tmp_path):
    """The seam adapt → viewer: the real acceptance (validate_pending) writes the report and the store that
    the viewer reads; an accepted candidate is shown with its parent, a rejected one is not."""
    from rla_core.adaptation.cycle import AdaptReport, validate_pending
    from rla_core.adaptation.store import TaskStore
    from rla_core.schemas import PendingCandidate, Task
    from tasks.reports.trajectories import accepted_rewrites
    from tasks.storage.files import mark_done, write_text

    paths = RunPaths.of(tmp_path)
    seed = [Task(task_id=f"{s}-v0", slot_id=s, spec={"rooms": 1, "slot": s}) for s in ("s1", "s2")]
    TaskStore.from_seed(seed).save(paths.seed_store)
    started = TaskStore.from_seed(seed)
    for slot, direction, prev in (("s1", "harder", 0.9), ("s2", "easier", 0.1)):
        rewrite = Task(task_id=f"{slot}-v1", slot_id=slot, spec={"rooms": 2, "slot": slot}, version=1)
        started = started.set_pending(slot, PendingCandidate(task=rewrite, direction=direction, created_iteration=1,
                                                             prev_acc=prev, source="llm"))
    started.save(paths.it(1).store)
    mark_done(paths.stage(1, "adapt"), {"metrics": {}})
    report = AdaptReport()
    # s1's rewrite is harder than its parent and inside the band: accepted; s2's never won: rejected
    store = validate_pending(started, {"s1-v1": 0.5, "s2-v1": 0.0}, 2, 0.2, 0.8, report)
    store.save(paths.it(2).store)
    write_text(paths.it(2).adapt_report, report.model_dump_json())
    assert report.accepted == ["s1-v1"] and report.rejected == ["s2-v1"]

    (view,) = accepted_rewrites(paths, 2)
    assert (view.slot_id, view.task_id, view.direction, view.prev_acc, view.acc) == ("s1", "s1-v1", "harder", 0.9, 0.5)
    assert view.parent == '{"rooms": 1, "slot": "s1"}' and view.rewrite == '{"rooms": 2, "slot": "s1"}'
    selection = ReportSelection((), 0, 0, (view,))
    text = render_text(selection)
    assert 'was: {"rooms": 1, "slot": "s1"}' in text and 'now: {"rooms": 2, "slot": "s1"}' in text
    assert "success 0.90 -> 0.50" in text
    page = render_html(selection)
    assert "Accepted rewrites" in page and "&quot;rooms&quot;: 2" in page
    assert "Accepted rewrites" not in render_text(ReportSelection((), 0, 0))
