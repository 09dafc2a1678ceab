"""Great Expectations data gates: a bad task store, rollout set or training batch stops the update.

Each gate turns records into a one-row-per-record pandas frame (list fields become derived columns
such as `n_response` or `max_token`), validates it against an expectation suite in an ephemeral GX
context, and returns a `GateResult` (JSON-ready, for MLflow); the validate stage raises `GateFailed`
for a failed one, listing its failed expectations. Held-out task ids must never reach the task store,
the rollouts or any training batch.

`import great_expectations` costs ~5 s, so it happens once, on the first gate call; the context is
cached and a gate then takes ~0.1 s for thousands of rows.
"""
from __future__ import annotations

import functools
import logging
import os
import threading
import time
from typing import Any, Iterable, Sequence

import pandas as pd
from pydantic import BaseModel

from rla_core.envs.coding.problems import MAX_IO_CHARS, CodingSpec
from rla_core.errors import UserError
from rla_core.schemas import Slot, Task, TrainingSample, Trajectory
from tasks.storage.files import json_safe

MAX_ABS_ADVANTAGE = 1e3  # z-scores are O(1); anything near this means a broken normaliser
_FLOAT_MAX = 1.7976931348623157e308  # `between ±max` rejects ±inf (NaN is caught by not-null)
_SAMPLE_VALUES = 5  # unexpected values kept per expectation in the result
_LOCK = threading.Lock()  # one validation at a time: the cached context is shared by threads


class ExpectationOutcome(BaseModel):
    expectation: str  # e.g. "expect_column_values_to_be_between"
    column: str | None = None
    kwargs: dict[str, Any] = {}  # without the batch id; a value_set is replaced by its size
    success: bool
    unexpected_count: int | None = None
    observed_value: Any = None
    unexpected_sample: list[Any] = []
    error: str | None = None  # set when the expectation itself raised (e.g. a missing column)


class GateResult(BaseModel):
    gate: str
    success: bool
    rows: int
    evaluated: int
    failed: int
    seconds: float
    expectations: list[ExpectationOutcome]

    def failures(self) -> list[ExpectationOutcome]:
        return [outcome for outcome in self.expectations if not outcome.success]

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON types only (non-finite floats as strings), ready for `json.dumps`/MLflow."""
        return self.model_dump(mode="json")


class GateFailed(UserError, RuntimeError):
    """A data gate failed; `.result` holds the full GateResult."""

    def __init__(self, result: GateResult):
        self.result = result
        counts = f"{result.failed}/{result.evaluated} expectations, {result.rows} rows"
        lines = [f"data gate '{result.gate}' failed ({counts}):"]
        for outcome in result.failures():
            where = f" on '{outcome.column}'" if outcome.column else ""
            if outcome.error:
                detail = f"error: {outcome.error}"
            elif outcome.unexpected_count is None:
                detail = f"observed {outcome.observed_value}"
            else:
                detail = f"{outcome.unexpected_count} unexpected, e.g. {outcome.unexpected_sample}"
            lines.append(f"  - {outcome.expectation}{where} {outcome.kwargs}: {detail}")
        super().__init__("\n".join(lines))


# --- the gates ----------------------------------------------------------------------------------


def check_task_store(slots: Sequence[Slot], heldout_task_ids: Iterable[str], min_rows: int = 1) -> GateResult:
    """Non-empty; unique slot ids; active task id present; finite difficulty; version >= 0; no
    held-out id among active or pending tasks."""
    rows = [
        {
            "slot_id": slot.slot_id,
            "active_task_id": slot.active.task_id,
            "difficulty": slot.active.difficulty,
            "version": slot.active.version,
            "pending_task_id": slot.pending.task.task_id if slot.pending else None,
            "pending_version": slot.pending.task.version if slot.pending else 0,
        }
        for slot in slots
    ]
    columns = ["slot_id", "active_task_id", "difficulty", "version", "pending_task_id", "pending_version"]
    frame = pd.DataFrame(rows, columns=columns)
    heldout = sorted(set(heldout_task_ids))
    gx = _expectations()
    suite = [
        gx.ExpectTableRowCountToBeBetween(min_value=min_rows),
        gx.ExpectColumnValuesToBeUnique(column="slot_id"),
        gx.ExpectColumnValuesToNotBeNull(column="active_task_id"),
        gx.ExpectColumnValuesToNotBeNull(column="difficulty"),
        gx.ExpectColumnValuesToBeBetween(column="difficulty", min_value=-_FLOAT_MAX, max_value=_FLOAT_MAX),
        gx.ExpectColumnValuesToBeBetween(column="version", min_value=0),
        gx.ExpectColumnValuesToBeBetween(column="pending_version", min_value=0),
        gx.ExpectColumnValuesToNotBeInSet(column="active_task_id", value_set=heldout),
        gx.ExpectColumnValuesToNotBeInSet(column="pending_task_id", value_set=heldout),
    ]
    return _validate("task_store", frame, suite)


def check_coding_tasks(tasks: Sequence[Task], heldout_task_ids: Iterable[str] = (), min_rows: int = 1) -> GateResult:
    """A coding task set: non-empty; unique task ids; env "coding"; >= 1 test (stdin + call); a
    statement; time limit in (0, 30] s; no test text over MAX_IO_CHARS; call tests only with an
    entry point; not every expected stdout empty (a broken import); no held-out task."""
    columns = ["task_id", "env", "n_tests", "n_stdin_tests", "n_call_tests", "statement_chars", "time_limit_s",
               "max_io_chars", "all_expected_empty", "call_tests_without_entry_point"]
    frame = pd.DataFrame([_coding_row(task) for task in tasks], columns=columns)
    gx = _expectations()
    suite = [
        gx.ExpectTableRowCountToBeBetween(min_value=min_rows),
        gx.ExpectColumnValuesToNotBeNull(column="task_id"),
        gx.ExpectColumnValuesToBeUnique(column="task_id"),
        gx.ExpectColumnValuesToBeInSet(column="env", value_set=["coding"]),
        gx.ExpectColumnValuesToBeBetween(column="n_tests", min_value=1),
        gx.ExpectColumnValuesToBeBetween(column="statement_chars", min_value=1),
        gx.ExpectColumnValuesToNotBeNull(column="time_limit_s"),
        gx.ExpectColumnValuesToBeBetween(column="time_limit_s", min_value=0, max_value=30, strict_min=True),
        gx.ExpectColumnValuesToBeBetween(column="max_io_chars", max_value=MAX_IO_CHARS),
        gx.ExpectColumnValuesToBeInSet(column="all_expected_empty", value_set=[False]),
        gx.ExpectColumnValuesToBeInSet(column="call_tests_without_entry_point", value_set=[False]),
        gx.ExpectColumnValuesToNotBeInSet(column="task_id", value_set=sorted(set(heldout_task_ids))),
    ]
    return _validate("coding_tasks", frame, suite)


def _coding_row(task: Task) -> dict[str, Any]:
    """One task's row; a malformed spec (wrong types) gives values the suite rejects, not an exception."""
    spec = task.spec
    stdin_tests = [t for t in _list(spec.get("tests")) if isinstance(t, dict)]
    call_tests = [t for t in _list(spec.get("call_tests")) if isinstance(t, dict)]
    texts = [t.get(key) for t in stdin_tests for key in ("stdin", "stdout")] + [t.get("code") for t in call_tests]
    statement = spec.get("statement")
    time_limit = spec.get("time_limit_s", CodingSpec.model_fields["time_limit_s"].default)
    numeric = isinstance(time_limit, (int, float)) and not isinstance(time_limit, bool)
    return {
        "task_id": task.task_id,
        "env": task.env,
        "n_tests": len(stdin_tests) + len(call_tests),
        "n_stdin_tests": len(stdin_tests),
        "n_call_tests": len(call_tests),
        "statement_chars": len(statement) if isinstance(statement, str) else 0,
        "time_limit_s": float(time_limit) if numeric else None,
        "max_io_chars": max((len(text) for text in texts if isinstance(text, str)), default=0),
        "all_expected_empty": bool(stdin_tests) and all(not str(t.get("stdout") or "").strip() for t in stdin_tests),
        "call_tests_without_entry_point": bool(call_tests) and not spec.get("entry_point"),
    }


def check_reserved_content(rows: Sequence[tuple[str, str, str | None]], reserved: Iterable[str]) -> GateResult:
    """No reserved content on the way into training: every row (a stored task, a rolled-out task, a
    policy or judge sample, as (kind, task id, content hash)) has a known content hash (None: a sample
    whose task was never rolled out) that is not reserved (held-out, dev, benchmarks: by content, not id)."""
    frame = pd.DataFrame(list(rows), columns=["kind", "task_id", "content_hash"])
    gx = _expectations()
    suite = [
        gx.ExpectColumnValuesToNotBeNull(column="content_hash"),
        gx.ExpectColumnValuesToNotBeInSet(column="content_hash", value_set=sorted(set(reserved))),
    ]
    return _validate("reserved_content", frame, suite)


def _list(value: Any) -> list:
    return value if isinstance(value, list) else []


def check_rollouts(
    trajectories: Sequence[Trajectory], heldout_task_ids: Iterable[str], min_rows: int = 1
) -> GateResult:
    """Non-empty; every trajectory has >= 1 step and no empty response; success is a bool; no
    held-out task."""
    rows = [
        {
            "task_id": trajectory.task_id,
            "n_steps": len(trajectory.steps),
            "min_response_len": min((len(step.response_ids) for step in trajectory.steps), default=0),
            "success": trajectory.success,
        }
        for trajectory in trajectories
    ]
    frame = pd.DataFrame(rows, columns=["task_id", "n_steps", "min_response_len", "success"])
    gx = _expectations()
    suite = [
        gx.ExpectTableRowCountToBeBetween(min_value=min_rows),
        gx.ExpectColumnValuesToNotBeNull(column="task_id"),
        gx.ExpectColumnValuesToBeBetween(column="n_steps", min_value=1),
        gx.ExpectColumnValuesToBeBetween(column="min_response_len", min_value=1),
        gx.ExpectColumnValuesToNotBeNull(column="success"),
        gx.ExpectColumnValuesToBeInSet(column="success", value_set=[True, False]),
        gx.ExpectColumnValuesToNotBeInSet(column="task_id", value_set=sorted(set(heldout_task_ids))),
    ]
    return _validate("rollouts", frame, suite)


def check_policy_batch(
    samples: Sequence[TrainingSample],
    heldout_task_ids: Iterable[str],
    vocab_size: int | None = None,
    max_abs_advantage: float = MAX_ABS_ADVANTAGE,
    min_rows: int = 1,
) -> GateResult:
    """Training samples for the policy: see `_batch_suite`."""
    frame = _batch_frame(samples)
    return _validate("policy_batch", frame, _batch_suite(heldout_task_ids, vocab_size, max_abs_advantage, min_rows))


def check_judge_batch(
    samples: Sequence[TrainingSample],
    heldout_task_ids: Iterable[str],
    vocab_size: int | None = None,
    max_abs_advantage: float = MAX_ABS_ADVANTAGE,
    min_rows: int = 1,
) -> GateResult:
    """Training samples for the judge: the policy-batch checks plus `judge_sample` not null and >= 0."""
    gx = _expectations()
    suite = _batch_suite(heldout_task_ids, vocab_size, max_abs_advantage, min_rows) + [
        gx.ExpectColumnValuesToNotBeNull(column="judge_sample"),
        gx.ExpectColumnValuesToBeBetween(column="judge_sample", min_value=0),
    ]
    return _validate("judge_batch", _batch_frame(samples), suite)


def _batch_frame(samples: Sequence[TrainingSample]) -> pd.DataFrame:
    rows = []
    for sample in samples:
        ids = sample.prompt_ids + sample.response_ids
        rows.append(
            {
                "task_id": sample.task_id,
                "advantage": sample.advantage,
                "n_prompt": len(sample.prompt_ids),
                "n_response": len(sample.response_ids),
                "min_token": min(ids, default=0),
                "max_token": max(ids, default=0),
                "judge_sample": sample.judge_sample,
            }
        )
    columns = ["task_id", "advantage", "n_prompt", "n_response", "min_token", "max_token", "judge_sample"]
    return pd.DataFrame(rows, columns=columns)


def _batch_suite(
    heldout_task_ids: Iterable[str], vocab_size: int | None, max_abs_advantage: float, min_rows: int
) -> list:
    """Non-empty; advantage not NaN and |A| <= bound (also rejects ±inf); prompt and response ids
    non-empty; every token id in [0, vocab_size); no held-out task."""
    gx = _expectations()
    suite = [
        gx.ExpectTableRowCountToBeBetween(min_value=min_rows),
        gx.ExpectColumnValuesToNotBeNull(column="advantage"),
        gx.ExpectColumnValuesToBeBetween(column="advantage", min_value=-max_abs_advantage, max_value=max_abs_advantage),
        gx.ExpectColumnValuesToBeBetween(column="n_prompt", min_value=1),
        gx.ExpectColumnValuesToBeBetween(column="n_response", min_value=1),
        gx.ExpectColumnValuesToBeBetween(column="min_token", min_value=0),
        gx.ExpectColumnValuesToNotBeInSet(column="task_id", value_set=sorted(set(heldout_task_ids))),
    ]
    if vocab_size is not None:
        suite.append(gx.ExpectColumnValuesToBeBetween(column="max_token", max_value=vocab_size - 1))
    return suite


# --- GX plumbing --------------------------------------------------------------------------------


@functools.lru_cache(maxsize=1)
def _expectations() -> Any:
    """The `great_expectations.expectations` module, imported on first use (slow import)."""
    os.environ.setdefault("GX_ANALYTICS_ENABLED", "false")
    import great_expectations.expectations as gxe

    return gxe


@functools.lru_cache(maxsize=1)
def _batch_definition() -> Any:
    """Ephemeral context -> pandas source -> dataframe asset -> whole-frame batch definition."""
    import great_expectations as gx
    from great_expectations.data_context.types.base import ProgressBarsConfig

    logging.getLogger("great_expectations").setLevel(logging.WARNING)  # no INFO line per context
    context = gx.get_context(mode="ephemeral")
    context.variables.progress_bars = ProgressBarsConfig(globally=False)  # no tqdm per validation
    asset = context.data_sources.add_pandas("rla_gates").add_dataframe_asset("records")
    return asset.add_batch_definition_whole_dataframe("whole")


def _validate(gate: str, frame: pd.DataFrame, expectations: list) -> GateResult:
    import great_expectations as gx

    start = time.perf_counter()
    suite = gx.ExpectationSuite(name=gate, expectations=expectations)
    with _LOCK:
        batch = _batch_definition().get_batch(batch_parameters={"dataframe": frame})
        validation = batch.validate(suite, result_format="SUMMARY")
    outcomes = [_outcome(result) for result in validation.results]
    failed = sum(not outcome.success for outcome in outcomes)
    return GateResult(
        gate=gate,
        success=bool(validation.success) and failed == 0,
        rows=len(frame),
        evaluated=len(outcomes),
        failed=failed,
        seconds=round(time.perf_counter() - start, 4),
        expectations=outcomes,
    )


def _outcome(result: Any) -> ExpectationOutcome:
    config = result.expectation_config
    kwargs = {key: value for key, value in config.kwargs.items() if key != "batch_id"}
    if "value_set" in kwargs:
        kwargs["value_set_size"] = len(kwargs.pop("value_set") or [])
    column = kwargs.pop("column", None)
    info = result.exception_info or {}
    details = result.result or {}
    return ExpectationOutcome(
        expectation=config.type,
        column=column,
        kwargs=json_safe(kwargs),
        success=bool(result.success),
        unexpected_count=details.get("unexpected_count"),
        observed_value=json_safe(details.get("observed_value")),
        unexpected_sample=json_safe(list(details.get("partial_unexpected_list") or [])[:_SAMPLE_VALUES]),
        error=info.get("exception_message") if info.get("raised_exception") else None,
    )
