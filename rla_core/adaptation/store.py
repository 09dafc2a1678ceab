"""The task store (docs/design.md, "The loop", The task store): slots, each with a root task, an active
version, the history of accepted versions and at most one pending candidate.

Immutable style: every method that changes something (`set_pending`, `accept`, `reject`) returns a NEW
TaskStore and leaves the receiver untouched; accessors return deep copies of the records, so callers
can never edit the store's state in place. `save` / `load` are the only file I/O: `slots.jsonl` (one
Slot per line, sorted by slot_id) and `store.json` (format version and counts), each written
atomically (temp file in the same folder + os.replace).
"""
from __future__ import annotations

import json
import random
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

from rla_core.errors import DataError
from rla_core.fileio import atomic_write_text
from rla_core.records import load_json_file, read_numbered
from rla_core.schemas import PendingCandidate, Slot, Task, TaskRecordEvent

SLOTS_FILE = "slots.jsonl"
META_FILE = "store.json"
FORMAT_VERSION = 2  # 2: typed critic feedback on pending candidates and history events


class TaskStore:
    """An immutable set of slots keyed by slot_id."""

    def __init__(self, slots: Iterable[Slot]):
        table: dict[str, Slot] = {}
        for slot in slots:
            if slot.slot_id in table:
                raise ValueError(f"duplicate slot_id '{slot.slot_id}'")
            table[slot.slot_id] = slot.model_copy(deep=True)
        self._slots = dict(sorted(table.items()))

    # ------------------------------------------------------------ construction
    @classmethod
    def from_seed(cls, tasks: Iterable[Task], iteration: int = 0) -> "TaskStore":
        """One slot per seed task: root = active = the task, history = one "seed" event."""
        slots = []
        for task in tasks:
            event = TaskRecordEvent(version=task.version, task_id=task.task_id, iteration=iteration, source="seed")
            slots.append(Slot(slot_id=task.slot_id, root=task, active=task, history=[event]))
        return cls(slots)

    @classmethod
    def _owned(cls, table: dict[str, Slot]) -> "TaskStore":
        """A store over `table` without copying it: for slots no caller holds (freshly parsed, or
        another store's, which nothing edits in place), sorted by slot_id."""
        store = cls.__new__(cls)
        store._slots = table
        return store

    def _replace(self, slot: Slot) -> "TaskStore":
        """A new store with `slot` (a fresh copy made by the caller) in place of its namesake; the other
        slots are shared with this store, not copied: no store ever edits a slot in place, and every
        accessor hands out copies. (Deep-copying all of them made each change O(store size).)"""
        self._slot(slot.slot_id)
        return TaskStore._owned({**self._slots, slot.slot_id: slot})

    def _slot(self, slot_id: str) -> Slot:
        try:
            return self._slots[slot_id]
        except KeyError:
            raise KeyError(f"unknown slot '{slot_id}'") from None

    # ------------------------------------------------------------ reading (copies)
    def __len__(self) -> int:
        return len(self._slots)

    def __iter__(self) -> Iterator[Slot]:
        return iter(self.slots())

    def slot_ids(self) -> list[str]:
        return list(self._slots)

    def slot(self, slot_id: str) -> Slot:
        return self._slot(slot_id).model_copy(deep=True)

    def slots(self) -> list[Slot]:
        return [s.model_copy(deep=True) for s in self._slots.values()]

    def active_tasks(self) -> list[Task]:
        return [s.active.model_copy(deep=True) for s in self._slots.values()]

    def pending(self) -> list[PendingCandidate]:
        return [s.pending.model_copy(deep=True) for s in self._slots.values() if s.pending is not None]

    def select(self, k: int, rng: random.Random, iteration: int | None = None, within_k: bool = True) -> list[Task]:
        """K tasks to roll out in total (one budget, so that rows with and without adaptation spend equal
        compute): the pending candidates (at most k, in slot_id order; one left out is rejected as stale
        when its iteration validates), then the active tasks of k − #candidates slots sampled without
        replacement (all slots if that is ≥ len). Returned actives first, in sampled order. `within_k=False`:
        k active slots and every candidate on top of them (the paper; runs made before the one budget).

        With `iteration` given, only candidates created in iteration − 1 are included; with None, all
        pending ones (each iteration resolves its pending candidates, so these coincide in a healthy run).
        """
        if k < 0:
            raise ValueError(f"k must be ≥ 0, got {k}")
        candidates = [c.task for c in self.pending()
                      if iteration is None or c.created_iteration == iteration - 1]
        if within_k:
            candidates = candidates[:k]
        actives = k - len(candidates) if within_k else k
        chosen = rng.sample(list(self._slots), min(max(actives, 0), len(self._slots)))
        return [self._slots[slot_id].active.model_copy(deep=True) for slot_id in chosen] + candidates

    def counts(self) -> dict[str, int]:
        """slots, pending, accepted_rewrites (history events after the seed), max_version."""
        return {
            "slots": len(self._slots),
            "pending": sum(s.pending is not None for s in self._slots.values()),
            "accepted_rewrites": sum(max(len(s.history) - 1, 0) for s in self._slots.values()),
            "max_version": max((s.active.version for s in self._slots.values()), default=0),
        }

    # ------------------------------------------------------------ changes (new store)
    def set_pending(self, slot_id: str, candidate: PendingCandidate) -> "TaskStore":
        """A new store in which `slot_id` holds `candidate` as its pending rewrite.

        Raises if the slot already has a pending candidate (it must be accepted or rejected first), if
        the candidate belongs to another slot, or if its version is not active.version + 1.
        """
        slot = self._slot(slot_id)
        if slot.pending is not None:
            raise ValueError(f"slot '{slot_id}' already has a pending candidate ({slot.pending.task.task_id})")
        if candidate.task.slot_id != slot_id:
            raise ValueError(f"candidate {candidate.task.task_id} belongs to slot '{candidate.task.slot_id}', not '{slot_id}'")
        if candidate.task.version != slot.active.version + 1:
            raise ValueError(
                f"candidate version {candidate.task.version} != active version {slot.active.version} + 1"
            )
        return self._replace(slot.model_copy(update={"pending": candidate.model_copy(deep=True)}, deep=True))

    def accept(self, slot_id: str, iteration: int, acc_before: float, acc_after: float) -> "TaskStore":
        """A new store in which the slot's pending candidate is its active version (version + 1) and a
        history event records who (the rewriter), when (iteration), why (direction, feedback) and the
        accuracy before (of the parent) and after (of the candidate)."""
        slot = self._slot(slot_id)
        if slot.pending is None:
            raise ValueError(f"slot '{slot_id}' has no pending candidate to accept")
        candidate = slot.pending
        event = TaskRecordEvent(
            version=candidate.task.version,
            task_id=candidate.task.task_id,
            iteration=iteration,
            source=candidate.source,
            reason=candidate.reason,
            feedback=candidate.feedback,
            direction=candidate.direction,
            acc_before=acc_before,
            acc_after=acc_after,
        )
        updated = slot.model_copy(
            update={"active": candidate.task, "pending": None, "history": [*slot.history, event]}, deep=True
        )
        return self._replace(updated)

    def reject(self, slot_id: str) -> "TaskStore":
        """A new store in which the slot's pending candidate is discarded (the active task is kept)."""
        slot = self._slot(slot_id)
        if slot.pending is None:
            raise ValueError(f"slot '{slot_id}' has no pending candidate to reject")
        return self._replace(slot.model_copy(update={"pending": None}, deep=True))

    # ------------------------------------------------------------ comparison
    def diff(self, other: "TaskStore") -> dict[str, Any]:
        """What changed from `self` (before) to `other` (after), JSON-serialisable."""
        before, after = self._slots, other._slots
        common = [slot_id for slot_id in before if slot_id in after]
        activated = [
            {
                "slot_id": slot_id,
                "from": before[slot_id].active.task_id,
                "to": after[slot_id].active.task_id,
                "version": after[slot_id].active.version,
            }
            for slot_id in common
            if before[slot_id].active.task_id != after[slot_id].active.task_id
        ]
        old_pending = {s: before[s].pending.task.task_id for s in common if before[s].pending}
        new_pending = {s: after[s].pending.task.task_id for s in common if after[s].pending}
        return {
            "added_slots": sorted(set(after) - set(before)),
            "removed_slots": sorted(set(before) - set(after)),
            "activated": activated,
            "pending_added": [
                {"slot_id": s, "task_id": t} for s, t in new_pending.items() if old_pending.get(s) != t
            ],
            # A cleared candidate was accepted when it became the active version, else rejected.
            "pending_accepted": [
                {"slot_id": s, "task_id": t}
                for s, t in old_pending.items()
                if new_pending.get(s) != t and after[s].active.task_id == t
            ],
            "pending_rejected": [
                {"slot_id": s, "task_id": t}
                for s, t in old_pending.items()
                if new_pending.get(s) != t and after[s].active.task_id != t
            ],
            "counts_before": self.counts(),
            "counts_after": other.counts(),
        }

    def __eq__(self, other: object) -> bool:
        return isinstance(other, TaskStore) and self._slots == other._slots

    # ------------------------------------------------------------ files
    def save(self, directory: str | Path) -> Path:
        """Write slots.jsonl and store.json into `directory` (created if needed), each atomically."""
        directory = Path(directory)
        directory.mkdir(parents=True, exist_ok=True)
        lines = "".join(slot.model_dump_json() + "\n" for slot in self._slots.values())
        atomic_write_text(directory / SLOTS_FILE, lines)
        meta = {"format_version": FORMAT_VERSION, "counts": self.counts()}
        atomic_write_text(directory / META_FILE, json.dumps(meta, indent=2, sort_keys=True) + "\n")
        return directory

    @classmethod
    def load(cls, directory: str | Path) -> "TaskStore":
        """Read a store written by `save`; every line is validated as a Slot."""
        directory = Path(directory)
        meta = load_json_file(directory / META_FILE)
        version = meta.get("format_version") if isinstance(meta, dict) else None
        if version != FORMAT_VERSION:
            raise DataError(f"{directory / META_FILE}: format_version {version} != {FORMAT_VERSION}")
        slots, lines = {}, {}
        for line, slot in read_numbered(directory / SLOTS_FILE, Slot):
            if slot.slot_id in slots:
                raise DataError(f"{directory / SLOTS_FILE}:{line}: slot_id '{slot.slot_id}' repeats line "
                                f"{lines[slot.slot_id]}")
            slots[slot.slot_id], lines[slot.slot_id] = slot, line
        return cls._owned(dict(sorted(slots.items())))  # parsed here: nobody else holds these
