"""Record types exchanged between stages: one explicit, serialisable type per boundary.

Every stage of an iteration reads and writes these as JSON/JSONL, so a stage can run on another
machine and be retried alone. Token ids are kept exactly as generated: training never re-tokenises.
"""
from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

Verdict = Literal[-1, 0, 1]
Direction = Literal["harder", "easier"]


class _Record(BaseModel):
    # NaN/inf are written as NaN/Infinity (not silently as null) so the data gates can see them.
    model_config = ConfigDict(extra="forbid", ser_json_inf_nan="constants")


class Task(_Record):
    """One concrete task: an environment name plus its JSON spec (validated by that environment)."""

    task_id: str
    slot_id: str
    env: str = "household"
    spec: dict[str, Any]
    difficulty: float = 0.0  # environment-defined scalar, for grouping metrics by difficulty
    version: int = 0  # 0 for the root task of a slot, +1 per accepted rewrite


class Step(_Record):
    """One policy turn: what the policy saw, what it generated (exact ids) and what followed."""

    index: int
    prompt_ids: list[int]
    response_ids: list[int]
    response_text: str
    response_logprobs: list[float] = Field(default_factory=list)  # log π(token) of response_ids as sampled
    action: str | None  # the admissible command chosen, None when the response did not parse
    observation: str  # the observation after the action
    oracle_good: bool | None = None  # oracle label: does the action make progress on a shortest plan


class Trajectory(_Record):
    task_id: str
    slot_id: str
    sample_index: int  # j in 0..N-1 within the task's group
    goal: str
    initial_observation: str
    steps: list[Step]
    success: bool

    @property
    def outcome(self) -> int:
        """O(τ) ∈ {+1, −1}."""
        return 1 if self.success else -1


class JudgeSample(_Record):
    """One of the m judge samples for one step."""

    prompt_ids: list[int]
    response_ids: list[int]
    response_logprobs: list[float] = Field(default_factory=list)  # log J(token) of response_ids as sampled
    text: str
    verdict: Verdict


class JudgedStep(_Record):
    task_id: str
    sample_index: int
    step_index: int
    samples: list[JudgeSample]
    oracle_good: bool | None = None


class TrainingSample(_Record):
    """(prompt, response, advantage) for the policy or the judge; the ids are the generated ones."""

    prompt_ids: list[int]
    response_ids: list[int]
    advantage: float
    task_id: str
    sample_index: int
    step_index: int
    judge_sample: int | None = None  # l, for reward-model samples
    # log-probs of response_ids under the model that generated them (π_old of the update), when known
    old_logprobs: list[float] | None = None


class RejectedAction(_Record):
    """One distinct action that every judge sample rejected in some failed run of a task."""

    action: str  # the admissible command, or NO_ACTION when the response did not parse
    count: int  # steps with this action rejected by every judge sample
    runs: int  # failed runs in which that happened
    rationale: str = ""  # the judge's most frequent rationale for it ("" when it wrote none)


NO_ACTION = "<no valid action>"


class CriticFeedback(_Record):
    """What went wrong in the failed runs of ONE task, for the environment model (docs/design.md,
    "The formulas", Environment adaptation).

    The critic writes it and every rewriter reads it: the procedural rewriter reads `actions`, an LLM
    rewriter reads `render()`. Actions are ordered by how often they were rejected.
    """

    trajectories: int = 0
    failed: int = 0
    rejected_steps: int = 0  # steps of failed runs that every judge sample rejected
    actions: list[RejectedAction] = Field(default_factory=list)
    omitted: int = 0  # distinct rejected actions beyond `actions`
    # "step": household steps every judge sample rejected; "test": coding, the ground-truth tests the
    # failed programs failed (action = the test, rationale = "<failure kind>: <detail>")
    unit: Literal["step", "test"] = "step"

    def render(self, max_chars: int = 1500) -> str:
        """The prose summary: a header line, then one line per rejected action, cut at `max_chars`."""
        if self.unit == "test":
            return self._render_tests(max_chars)
        if not self.failed:
            return "No failed trajectories."
        header = f"Failed trajectories: {self.failed} of {self.trajectories}."
        if not self.actions:
            return header + " No step was rejected by every judge sample."
        distinct = len(self.actions) + self.omitted
        lines = [header + f" Steps rejected by every judge sample: {self.rejected_steps} ({distinct} distinct actions)."]
        for item in self.actions:
            line = f'- "{item.action}" rejected {item.count}x in {item.runs} failed run{"s" if item.runs != 1 else ""}'
            lines.append(line + (f'; judge: "{item.rationale}"' if item.rationale else ""))
        if self.omitted:
            lines.append(f"({self.omitted} more rejected actions not shown)")
        return _cut("\n".join(lines), max_chars)

    def _render_tests(self, max_chars: int) -> str:
        if not self.failed:
            return "No failed programs."
        lines = [f"Failed programs: {self.failed} of {self.trajectories}. Failed ground-truth test runs: "
                 f"{self.rejected_steps}."]
        lines += [f"- {item.action}: failed by {item.count} program{'s' if item.count != 1 else ''}; {item.rationale}"
                  for item in self.actions]
        if self.omitted:
            lines.append(f"({self.omitted} more failed tests not shown)")
        return _cut("\n".join(lines), max_chars)


def _cut(text: str, max_chars: int) -> str:
    return text if len(text) <= max_chars else text[: max_chars - 3].rstrip() + "..."


class TaskRecordEvent(_Record):
    """One entry of a slot's history: an accepted version, with who/when/why."""

    version: int
    task_id: str
    iteration: int
    source: str  # "seed" or the rewriter name
    reason: str = ""  # the rewriter's own reason (e.g. the knob it turned and the evidence)
    feedback: CriticFeedback | None = None  # the critic feedback the rewrite was made from
    direction: Direction | None = None
    acc_before: float | None = None
    acc_after: float | None = None


class PendingCandidate(_Record):
    task: Task
    direction: Direction
    created_iteration: int
    prev_acc: float  # accuracy of the version it was derived from
    source: str
    reason: str = ""
    feedback: CriticFeedback = Field(default_factory=CriticFeedback)


class Slot(_Record):
    slot_id: str
    root: Task
    active: Task
    history: list[TaskRecordEvent] = Field(default_factory=list)
    pending: PendingCandidate | None = None


# ---------------------------------------------------------------- the coding setting (docs/coding.md)
class ProgramRun(_Record):
    """One policy program run against its task's ground-truth tests (stdin tests, then call tests)."""

    task_id: str
    sample_index: int
    statuses: list[str]  # sandbox status per GT test: ok | wrong | timeout | memory | output_limit | crash | blocked
    details: list[str] = Field(default_factory=list)  # per GT test: "" when ok, else what went wrong (capped)
    pass_ratio: float
    pass_all: bool


class UnitTest(_Record):
    """One unit test the judge wrote for a task (from the statement only), and which programs pass it."""

    task_id: str
    index: int  # u in 0..U-1
    prompt_ids: list[int]
    response_ids: list[int]
    response_logprobs: list[float] = Field(default_factory=list)
    text: str
    stdin: str | None  # None: the answer did not parse (failed by every program)
    stdout: str | None
    passes: list[bool] = Field(default_factory=list)  # by program sample_index: passes this test
