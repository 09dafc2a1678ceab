"""TaskStore: seed, select, pending/accept/reject as new stores, save/load, diff (docs/design.md,
"The loop", The task store)."""
from __future__ import annotations

import json
import random

import pytest

from rla_core.adaptation.store import TaskStore
from rla_core.schemas import CriticFeedback, PendingCandidate, RejectedAction, Task

FEEDBACK = CriticFeedback(trajectories=8, failed=8, rejected_steps=3,
                          actions=[RejectedAction(action="go to shelf 1", count=3, runs=2, rationale="empty")])


def seed_tasks(n: int = 4) -> list[Task]:
    return [Task(task_id=f"s{i}-v0", slot_id=f"s{i}", spec={"size": i}, difficulty=float(i)) for i in range(n)]


def candidate(slot: str, version: int = 1, created: int = 0, direction: str = "harder") -> PendingCandidate:
    task = Task(task_id=f"{slot}-v{version}-abc", slot_id=slot, spec={"size": 9}, version=version, difficulty=9.0)
    return PendingCandidate(
        task=task, direction=direction, created_iteration=created, prev_acc=0.9, source="procedural",
        reason="why", feedback=FEEDBACK,
    )


def test_from_seed():
    store = TaskStore.from_seed(seed_tasks())
    assert len(store) == 4
    assert store.counts() == {"slots": 4, "pending": 0, "accepted_rewrites": 0, "max_version": 0}
    slot = store.slot("s2")
    assert slot.root == slot.active and slot.pending is None
    assert [(e.source, e.version, e.task_id, e.iteration) for e in slot.history] == [("seed", 0, "s2-v0", 0)]
    with pytest.raises(ValueError, match="duplicate"):
        TaskStore.from_seed(seed_tasks() + seed_tasks(1))
    with pytest.raises(KeyError, match="unknown slot"):
        store.slot("nope")


def test_select_k_in_total_previous_pending_included():
    store = TaskStore.from_seed(seed_tasks(6)).set_pending("s5", candidate("s5", created=2))
    first = store.select(3, random.Random(7), iteration=3)
    again = store.select(3, random.Random(7), iteration=3)
    assert [t.task_id for t in first] == [t.task_id for t in again]  # deterministic given the rng
    assert len(first) == 3 and first[-1].task_id == "s5-v1-abc"  # one budget: 2 active slots + the candidate
    assert len({t.slot_id for t in first[:2]}) == 2 and all(t.version == 0 for t in first[:2])
    assert len(store.select(99, random.Random(0))) == 7  # k ≥ len: every slot, plus the candidate
    assert [t.task_id for t in store.select(1, random.Random(0), iteration=5)][-1] != "s5-v1-abc"  # stale
    assert [t.task_id for t in store.select(1, random.Random(0))] == ["s5-v1-abc"]
    assert store.select(0, random.Random(0)) == []  # the budget caps the candidates too
    with pytest.raises(ValueError):
        store.select(-1, random.Random(0))


def test_select_rolls_out_k_whatever_the_candidates():
    """Equal compute between ablation rows: a store with candidates rolls out as many tasks as one without."""
    plain = TaskStore.from_seed(seed_tasks(8))
    adapted = plain.set_pending("s1", candidate("s1", created=2)).set_pending("s4", candidate("s4", created=2))
    for k in (0, 1, 2, 3, 5, 8):
        assert len(adapted.select(k, random.Random(k), iteration=3)) == len(plain.select(k, random.Random(k))) == k
    on_top = adapted.select(3, random.Random(0), iteration=3, within_k=False)  # the paper's (and old runs')
    assert len(on_top) == 5 and [t.task_id for t in on_top[3:]] == ["s1-v1-abc", "s4-v1-abc"]
    assert on_top[:3] == plain.select(3, random.Random(0))


def test_set_pending_returns_new_store_and_validates():
    store = TaskStore.from_seed(seed_tasks())
    with_pending = store.set_pending("s1", candidate("s1"))
    assert store.slot("s1").pending is None  # the receiver is untouched
    assert with_pending.slot("s1").pending.task.task_id == "s1-v1-abc"
    assert with_pending.counts()["pending"] == 1
    with pytest.raises(ValueError, match="already has a pending"):
        with_pending.set_pending("s1", candidate("s1"))
    with pytest.raises(ValueError, match="version"):
        store.set_pending("s1", candidate("s1", version=2))
    with pytest.raises(ValueError, match="belongs to slot"):
        store.set_pending("s2", candidate("s1"))


def test_accept_makes_candidate_active_with_history():
    before = TaskStore.from_seed(seed_tasks()).set_pending("s1", candidate("s1"))
    after = before.accept("s1", iteration=3, acc_before=0.9, acc_after=0.5)
    slot = after.slot("s1")
    assert slot.active.task_id == "s1-v1-abc" and slot.active.version == 1
    assert slot.root.task_id == "s1-v0" and slot.pending is None
    event = slot.history[-1]
    assert (event.version, event.task_id, event.iteration, event.source) == (1, "s1-v1-abc", 3, "procedural")
    assert (event.direction, event.acc_before, event.acc_after, event.reason) == ("harder", 0.9, 0.5, "why")
    assert event.feedback == FEEDBACK  # the critic feedback the rewrite came from stays in the history
    assert before.slot("s1").active.task_id == "s1-v0"  # the old store still holds the old version
    assert after.counts() == {"slots": 4, "pending": 0, "accepted_rewrites": 1, "max_version": 1}
    # the next rewrite of this slot must be version 2
    after.set_pending("s1", candidate("s1", version=2))
    with pytest.raises(ValueError, match="no pending"):
        after.accept("s1", 4, 0.5, 0.5)


def test_reject_discards_candidate():
    before = TaskStore.from_seed(seed_tasks()).set_pending("s1", candidate("s1"))
    after = before.reject("s1")
    assert after.slot("s1").pending is None and after.slot("s1").active.task_id == "s1-v0"
    assert len(after.slot("s1").history) == 1
    with pytest.raises(ValueError, match="no pending"):
        after.reject("s1")


def test_returned_records_are_copies():
    store = TaskStore.from_seed(seed_tasks())
    slot = store.slot("s0")
    slot.active.spec["size"] = 123
    store.active_tasks()[0].spec["size"] = 456
    store.select(4, random.Random(0))[0].spec["size"] = 789
    assert store.slot("s0").active.spec == {"size": 0}


def test_save_load_round_trip(tmp_path):
    store = (
        TaskStore.from_seed(seed_tasks())
        .set_pending("s1", candidate("s1"))
        .accept("s1", 1, 0.9, 0.5)
        .set_pending("s3", candidate("s3", created=1, direction="easier"))
    )
    store.save(tmp_path / "store")
    store.save(tmp_path / "store")  # overwriting is fine
    loaded = TaskStore.load(tmp_path / "store")
    assert loaded == store
    assert sorted(p.name for p in (tmp_path / "store").iterdir()) == ["slots.jsonl", "store.json"]  # no temp files
    lines = (tmp_path / "store" / "slots.jsonl").read_text().splitlines()
    assert [json.loads(line)["slot_id"] for line in lines] == ["s0", "s1", "s2", "s3"]
    meta = json.loads((tmp_path / "store" / "store.json").read_text())
    assert meta["counts"] == {"slots": 4, "pending": 1, "accepted_rewrites": 1, "max_version": 1}


def test_diff_summarises_changes():
    base = TaskStore.from_seed(seed_tasks()).set_pending("s1", candidate("s1")).set_pending("s2", candidate("s2"))
    after = base.accept("s1", 1, 0.9, 0.5).reject("s2").set_pending("s3", candidate("s3", created=1))
    diff = base.diff(after)
    assert diff["activated"] == [{"slot_id": "s1", "from": "s1-v0", "to": "s1-v1-abc", "version": 1}]
    assert diff["pending_accepted"] == [{"slot_id": "s1", "task_id": "s1-v1-abc"}]
    assert diff["pending_rejected"] == [{"slot_id": "s2", "task_id": "s2-v1-abc"}]
    assert diff["pending_added"] == [{"slot_id": "s3", "task_id": "s3-v1-abc"}]
    assert diff["added_slots"] == [] and diff["removed_slots"] == []
    assert diff["counts_after"]["accepted_rewrites"] == 1
    json.dumps(diff)  # an MLflow artifact: must serialise
    grown = TaskStore.from_seed(seed_tasks(5))
    assert TaskStore.from_seed(seed_tasks(4)).diff(grown)["added_slots"] == ["s4"]
    assert base.diff(base)["activated"] == []
