"""A change to the task store copies the changed slot only: the others are shared between the old and
the new store (nothing edits a slot in place), and neither store can be changed through what it hands out."""
from __future__ import annotations

from rla_core.adaptation.store import TaskStore
from rla_core.schemas import PendingCandidate, Task


def _task(slot: str, version: int = 0) -> Task:
    return Task(task_id=f"{slot}-v{version}", slot_id=slot, env="household", spec={"seed": version},
                difficulty=1.0, version=version)


def test_set_pending_shares_the_other_slots_and_leaves_the_receiver_alone(tmp_path):
    store = TaskStore.from_seed([_task(f"s{i}") for i in range(5)])
    candidate = PendingCandidate(task=_task("s2", 1), direction="harder", created_iteration=1, prev_acc=1.0,
                                 source="procedural", reason="too easy")
    new = store.set_pending("s2", candidate)
    assert store.slot("s2").pending is None and new.slot("s2").pending.task.task_id == "s2-v1"
    assert new._slots["s0"] is store._slots["s0"] and new._slots["s2"] is not store._slots["s2"]
    assert new.slot_ids() == store.slot_ids() == ["s0", "s1", "s2", "s3", "s4"]
    handed_out = new.slot("s0")
    handed_out.active.difficulty = 99.0
    assert new.slot("s0").active.difficulty == store.slot("s0").active.difficulty == 1.0
    assert TaskStore.load(new.save(tmp_path)) == new
