"""Great Expectations gates: good data passes; each kind of bad data fails with a named expectation."""
from __future__ import annotations

import json
import math

import pytest

from rla_core.schemas import PendingCandidate, Slot, Step, Task, TrainingSample, Trajectory
from tasks.checks.gates import (
    GateFailed,
    check_judge_batch,
    check_policy_batch,
    check_rollouts,
    check_task_store,
)

HELDOUT = {"heldout-0", "heldout-1"}
VOCAB = 100


def _sample(task_id="t0", advantage=0.5, prompt=(1, 2, 3), response=(4, 5), judge_sample=None) -> TrainingSample:
    return TrainingSample(
        prompt_ids=list(prompt), response_ids=list(response), advantage=advantage,
        task_id=task_id, sample_index=0, step_index=0, judge_sample=judge_sample,
    )


def _good_batch() -> list[TrainingSample]:
    return [_sample(task_id=f"t{i}", advantage=(-1.0) ** i * 0.5) for i in range(6)]


def _failed(result) -> set[tuple[str, str | None]]:
    return {(outcome.expectation, outcome.column) for outcome in result.failures()}


def test_good_policy_batch_passes_and_is_json():
    result = check_policy_batch(_good_batch(), HELDOUT, vocab_size=VOCAB)
    assert result.success and result.rows == 6 and result.failed == 0
    assert result.evaluated == 8
    assert json.loads(json.dumps(result.to_dict()))["gate"] == "policy_batch"


@pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf, 5e3])
def test_bad_advantage_fails(bad):
    batch = _good_batch() + [_sample(advantage=bad)]
    result = check_policy_batch(batch, HELDOUT, vocab_size=VOCAB)
    assert not result.success
    column = {column for _, column in _failed(result)}
    assert column == {"advantage"}
    # the result must stay strict JSON even with NaN/inf among the unexpected values
    text = json.dumps(result.to_dict(), allow_nan=False)
    assert "advantage" in text
    with pytest.raises(GateFailed, match="advantage"):
        raise GateFailed(result)


def test_empty_batch_fails():
    result = check_policy_batch([], HELDOUT)
    assert _failed(result) == {("expect_table_row_count_to_be_between", None)}
    assert result.rows == 0
    with pytest.raises(GateFailed, match="expect_table_row_count_to_be_between") as err:
        raise GateFailed(result)
    assert err.value.result is result
    assert check_policy_batch([], HELDOUT, min_rows=0).success  # a flow may allow an empty batch


def test_heldout_task_fails_everywhere():
    batch = _good_batch() + [_sample(task_id="heldout-1")]
    assert _failed(check_policy_batch(batch, HELDOUT)) == {("expect_column_values_to_not_be_in_set", "task_id")}
    judge = [_sample(task_id="heldout-0", judge_sample=0)]
    assert ("expect_column_values_to_not_be_in_set", "task_id") in _failed(check_judge_batch(judge, HELDOUT))


def test_out_of_vocab_and_empty_ids_fail():
    batch = _good_batch() + [_sample(response=(VOCAB,))]  # ids must be < vocab_size
    result = check_policy_batch(batch, HELDOUT, vocab_size=VOCAB)
    assert _failed(result) == {("expect_column_values_to_be_between", "max_token")}
    assert check_policy_batch(batch, HELDOUT).success  # no vocab size given: no upper bound
    batch = _good_batch() + [_sample(prompt=(-1, 2))]
    assert _failed(check_policy_batch(batch, HELDOUT)) == {("expect_column_values_to_be_between", "min_token")}
    batch = _good_batch() + [_sample(response=())]
    assert _failed(check_policy_batch(batch, HELDOUT)) == {("expect_column_values_to_be_between", "n_response")}


def test_judge_batch_needs_judge_sample():
    good = [_sample(judge_sample=l, advantage=0.3 * (l - 1)) for l in range(3)]
    assert check_judge_batch(good, HELDOUT, vocab_size=VOCAB).success
    result = check_judge_batch(good + [_sample(judge_sample=None)], HELDOUT, vocab_size=VOCAB)
    assert _failed(result) == {("expect_column_values_to_not_be_null", "judge_sample")}


def _trajectory(task_id="t0", steps=1, response=(7,), success=True) -> Trajectory:
    step = Step(index=0, prompt_ids=[1], response_ids=list(response), response_text="x", action="a", observation="o")
    return Trajectory(
        task_id=task_id, slot_id="s", sample_index=0, goal="g", initial_observation="o",
        steps=[step] * steps, success=success,
    )


def test_rollouts_gate():
    good = [_trajectory(success=True), _trajectory(success=False)]
    assert check_rollouts(good, HELDOUT).success
    assert _failed(check_rollouts(good + [_trajectory(steps=0)], HELDOUT)) == {
        ("expect_column_values_to_be_between", "n_steps"),
        ("expect_column_values_to_be_between", "min_response_len"),
    }
    assert _failed(check_rollouts(good + [_trajectory(response=())], HELDOUT)) == {
        ("expect_column_values_to_be_between", "min_response_len"),
    }
    assert _failed(check_rollouts(good + [_trajectory(task_id="heldout-0")], HELDOUT)) == {
        ("expect_column_values_to_not_be_in_set", "task_id"),
    }
    assert not check_rollouts([], HELDOUT).success


def _slot(slot_id="s0", task_id="t0", difficulty=1.0, version=0, pending_id=None) -> Slot:
    task = Task(task_id=task_id, slot_id=slot_id, spec={}, difficulty=difficulty, version=version)
    pending = None
    if pending_id is not None:
        candidate = Task(task_id=pending_id, slot_id=slot_id, spec={}, version=version + 1)
        pending = PendingCandidate(task=candidate, direction="harder", created_iteration=1, prev_acc=0.9, source="test")
    return Slot(slot_id=slot_id, root=task, active=task, pending=pending)


def test_task_store_gate():
    good = [_slot("s0", "t0"), _slot("s1", "t1", pending_id="t1v1")]
    assert check_task_store(good, HELDOUT).success
    cases = {
        ("expect_column_values_to_be_unique", "slot_id"): good + [_slot("s0", "t9")],
        ("expect_column_values_to_not_be_null", "difficulty"): good + [_slot("s2", "t2", difficulty=math.nan)],
        ("expect_column_values_to_be_between", "difficulty"): good + [_slot("s2", "t2", difficulty=math.inf)],
        ("expect_column_values_to_be_between", "version"): good + [_slot("s2", "t2", version=-1)],
        ("expect_column_values_to_not_be_in_set", "active_task_id"): good + [_slot("s2", "heldout-0")],
        ("expect_column_values_to_not_be_in_set", "pending_task_id"): good + [_slot("s2", pending_id="heldout-0")],
    }
    for expected, slots in cases.items():
        result = check_task_store(slots, HELDOUT)
        assert _failed(result) == {expected}, expected
        json.dumps(result.to_dict(), allow_nan=False)
    assert not check_task_store([], HELDOUT).success
    assert check_task_store(good, []).success  # no held-out set: the check passes vacuously


def test_reserved_content_gate_checks_content_not_ids():
    """A training task that plays a held-out game under a training id fails; so does a sample whose task
    was never rolled out (no content hash); the same rows without them pass."""
    import random

    from rla_core.envs.base import get_environment
    from rla_core.bootstrap import generate_tasks
    from tasks.checks.gates import check_reserved_content

    family = get_environment("household")
    heldout, train = (generate_tasks(family, {}, 3, random.Random(seed), name, set(), 12)
                      for seed, name in ((0, "heldout"), (1, "slot")))
    reserved = {family.content_hash(t.spec) for t in heldout}
    rows = [("rollout", t.task_id, family.content_hash(t.spec)) for t in train]
    clean = check_reserved_content(rows, reserved)
    assert clean.success and clean.rows == 3
    planted = rows + [("policy_sample", "slot0001-v2-0badcafe", family.content_hash(heldout[1].spec)),
                      ("judge_sample", "never-rolled-out", None)]
    result = check_reserved_content(planted, reserved)
    assert not result.success
    assert _failed(result) == {("expect_column_values_to_not_be_in_set", "content_hash"),
                               ("expect_column_values_to_not_be_null", "content_hash")}
    with pytest.raises(GateFailed, match="reserved_content"):
        raise GateFailed(result)
