"""Rewriters: the environment model E that proposes a harder or easier version of a task
(docs/design.md, "The formulas", Environment adaptation), registered by name.

Each rewriter makes up to A attempts; the first that passes structural validation (`family.validate`:
parses, fits the schema, solvable by the oracle) and differs from the current spec becomes the
candidate. Candidates get a deterministic id `f"{slot_id}-v{version}-{spec_hash}"`, version + 1 and
`difficulty = family.difficulty(spec)`.

Every rewriter reads the same typed `CriticFeedback` the critic writes, and validates inside the
episode horizon (a plan longer than the runner's turn cap can never be played out).

- "procedural": `family.adjust(spec, direction, feedback, rng, horizon)` turns one difficulty knob,
  chosen from the feedback's rejected actions.
- "llm": prompts a generator with the task, the direction and the rendered critic feedback, and reads
  the first JSON object of each answer through `family.spec_from_answer` (a full spec, or the generator
  form {"knobs": {...}, "seed": int} that the family expands). Prompt modes: "full" shows the family's
  schema and the whole spec JSON (for real LLMs); "compact" shows `family.rewrite_context(spec)` (goal,
  knobs, plan length) and asks for the generator form (what a tiny model can learn). All A prompts go to
  the generator in one call (one batched generate), then the answers are checked in order.
"""
from __future__ import annotations

import hashlib
import json
import random
import re
from collections.abc import Callable
from typing import Any, Literal, Protocol

from pydantic import BaseModel

from rla_core.envs.base import EnvironmentFamily, SpecError
from rla_core.schemas import CriticFeedback, Direction, Task
from rla_core.registry import Registry

Generate = Callable[[list[str]], list[str]]
PromptMode = Literal["compact", "full"]
COMPACT_FEEDBACK_CHARS = 600  # keeps a compact prompt near 250 tokens of the run tokenizer


class RewriteAttempt(BaseModel):
    """One attempt of one rewrite, for the attempts log (an artifact, not a training input)."""

    attempt: int
    ok: bool
    reason: str = ""  # the rewriter's reason (procedural) when ok
    error: str = ""  # why the attempt failed validation
    raw: str = ""  # the generator's text (llm), capped
    knob: str = ""  # the knob turned (procedural)
    from_feedback: bool | None = None  # the knob was chosen from the critic feedback (procedural)
    reserved: bool = False  # refused: the rewrite plays a reserved (held-out, dev, benchmark) task


RewriteResult = tuple[Task | None, list[RewriteAttempt]]


class Rewriter(Protocol):
    name: str

    def rewrite(
        self,
        task: Task,
        direction: Direction,
        feedback: CriticFeedback,
        attempts: int,
        rng: random.Random,
        family: EnvironmentFamily,
        horizon: int | None = None,
        reserved: frozenset[str] = frozenset(),
    ) -> RewriteResult:
        """(candidate or None, attempts log). A spec whose `family.content_hash` is in `reserved` is a
        refused attempt, never the candidate."""


# ---------------------------------------------------------------- shared helpers
def spec_hash(spec: dict[str, Any]) -> str:
    """First 8 hex digits of sha256 over the canonical JSON of the spec (sorted keys, no spaces)."""
    canonical = json.dumps(spec, sort_keys=True, separators=(",", ":"), ensure_ascii=True)
    return hashlib.sha256(canonical.encode("utf-8")).hexdigest()[:8]


def candidate_task(parent: Task, spec: dict[str, Any], family: EnvironmentFamily) -> Task:
    """The rewritten task: same slot and env, version + 1, deterministic id, family difficulty."""
    version = parent.version + 1
    return Task(
        task_id=f"{parent.slot_id}-v{version}-{spec_hash(spec)}",
        slot_id=parent.slot_id,
        env=parent.env,
        spec=spec,
        difficulty=float(family.difficulty(spec)),
        version=version,
    )


def _check_attempts(attempts: int) -> None:
    if attempts <= 0:
        raise ValueError(f"attempts must be > 0, got {attempts}")


RESERVED_ERROR = "reserved content"


def refusal(task: Task, spec: dict[str, Any], family: EnvironmentFamily, reserved: frozenset[str]) -> str:
    """Why a valid spec cannot be the candidate ("" when it can): it is the task itself, or it plays a
    reserved task (held-out, dev, judge benchmark: compared by content hash, never by id)."""
    if spec == task.spec:
        return "unchanged spec"
    if reserved and family.content_hash(spec) in reserved:
        return RESERVED_ERROR
    return ""


# ---------------------------------------------------------------- procedural
class ProceduralRewriter:
    """Turns one difficulty knob with the family's own `adjust`."""

    name = "procedural"

    def rewrite(
        self,
        task: Task,
        direction: Direction,
        feedback: CriticFeedback,
        attempts: int,
        rng: random.Random,
        family: EnvironmentFamily,
        horizon: int | None = None,
        reserved: frozenset[str] = frozenset(),
    ) -> RewriteResult:
        _check_attempts(attempts)
        log: list[RewriteAttempt] = []
        for attempt in range(attempts):
            try:
                spec, change = family.adjust(task.spec, direction, feedback, rng, horizon)
                spec = family.validate(spec, horizon)
            except SpecError as err:
                log.append(RewriteAttempt(attempt=attempt, ok=False, error=f"SpecError: {err}"))
                continue
            refused = refusal(task, spec, family, reserved)
            if refused:
                log.append(RewriteAttempt(attempt=attempt, ok=False, error=refused,
                                          reserved=refused == RESERVED_ERROR))
                continue
            log.append(RewriteAttempt(attempt=attempt, ok=True, reason=change.reason, knob=change.knob,
                                      from_feedback=change.from_feedback))
            return candidate_task(task, spec, family), log
        return None, log


# ---------------------------------------------------------------- llm
def _full_prompt(task: Task, direction: Direction, feedback: CriticFeedback, schema: str) -> str:
    spec = json.dumps(task.spec, sort_keys=True)
    return (
        "You rewrite tasks for a text environment so that they suit the current agent.\n"
        f"Schema of a task spec:\n{schema}\n\n"
        f"Current task spec (JSON):\n{spec}\n\n"
        f"The agent finds this task too {'easy' if direction == 'harder' else 'hard'}. "
        f"Write a {direction} version of it that is still solvable.\n"
        f"What went wrong in the agent's failed attempts:\n{feedback.render()}\n\n"
        "Answer with the new task spec as one JSON object.\n"
    )


GENERATOR_FORM = '{"knobs": {...}, "seed": <integer>}'


def _compact_prompt(task: Task, direction: Direction, feedback: CriticFeedback, context: str,
                    form: str = GENERATOR_FORM) -> str:
    # What the answer copies (the knobs) and what decides it (the direction) come last, next to the
    # answer: a tiny model attends to them far more reliably there than across the feedback block.
    return (
        f"Rewrite this task for the agent. Answer with {form}.\n"
        f"Feedback: {feedback.render(max_chars=COMPACT_FEEDBACK_CHARS)}\n{context}\nMake it {direction}.\nAnswer:"
    )


def build_rewrite_prompt(task: Task, direction: Direction, feedback: CriticFeedback, family: EnvironmentFamily,
                         mode: PromptMode = "compact") -> str:
    """The environment model's prompt, the same for its warm-start and for sampling.

    "full": the family's schema, the whole spec JSON, the direction and the whole rendered feedback;
    answer = a spec. "compact": the answer form, the feedback rendered to at most COMPACT_FEEDBACK_CHARS
    characters, `family.rewrite_context(spec)`, then the direction; answer = the generator form.
    """
    if mode == "full":
        return _full_prompt(task, direction, feedback, family.describe_schema())
    if mode == "compact":
        return _compact_prompt(task, direction, feedback, family.rewrite_context(task.spec),
                               getattr(family, "answer_form", GENERATOR_FORM))
    raise ValueError(f"rewrite prompt mode must be 'compact' or 'full', got {mode!r}")


def generator_answer(spec: dict[str, Any]) -> str:
    """The generator form of a generated spec, `{"knobs": ..., "seed": ...}` as JSON: what a compact-mode
    environment model is taught to write; `family.spec_from_answer` expands it back to `spec`."""
    return json.dumps({"knobs": spec["knobs"], "seed": spec["seed"]})


# Where an object can start: "{", JSON whitespace, then a key or "}". Trying every "{" made a failed try
# cost as much as the text before it (json's error locates its line): 200 s for a megabyte of "{".
_OBJECT_START = re.compile(r'\{[ \t\n\r]*["}]')
MAX_ANSWER_CHARS = 50_000  # an answer's object is looked for in its first this many characters


def first_json_object(text: str) -> dict[str, Any]:
    """The first `{...}` in `text` (its first MAX_ANSWER_CHARS characters) that decodes as a JSON
    object; ValueError when there is none or it nests too deeply for the decoder."""
    decoder = json.JSONDecoder()
    text = text[:MAX_ANSWER_CHARS]
    for start in _OBJECT_START.finditer(text):
        try:
            value, _ = decoder.raw_decode(text, start.start())
        except json.JSONDecodeError:
            continue
        except RecursionError:
            raise ValueError("the JSON in the text is nested too deeply") from None
        if isinstance(value, dict):
            return value
    raise ValueError("no JSON object in the text")


class LLMRewriter:
    """Asks a generator (e.g. the environment LM's rollout engine) for a rewritten spec."""

    name = "llm"

    def __init__(self, generate: Generate, max_raw_chars: int = 2000, prompt_mode: PromptMode = "compact"):
        self.generate = generate
        self.max_raw_chars = max_raw_chars
        self.prompt_mode = prompt_mode

    def rewrite(
        self,
        task: Task,
        direction: Direction,
        feedback: CriticFeedback,
        attempts: int,
        rng: random.Random,  # unused: sampling randomness lives in the generator
        family: EnvironmentFamily,
        horizon: int | None = None,
        reserved: frozenset[str] = frozenset(),
    ) -> RewriteResult:
        _check_attempts(attempts)
        prompt = build_rewrite_prompt(task, direction, feedback, family, self.prompt_mode)
        answers = self.generate([prompt] * attempts)
        if len(answers) != attempts:
            raise ValueError(f"generate returned {len(answers)} answers for {attempts} prompts")
        log: list[RewriteAttempt] = []
        for attempt, text in enumerate(answers):
            raw = text[: self.max_raw_chars]
            try:
                spec = family.spec_from_answer(first_json_object(text), horizon)
            # Generated text is untrusted: any malformed answer is a failed attempt, not a crash
            # (SpecError is a ValueError; so are json's errors, e.g. a number past int's digit limit).
            except (ValueError, TypeError, KeyError, OverflowError, RecursionError) as err:
                log.append(RewriteAttempt(attempt=attempt, ok=False, error=f"{type(err).__name__}: {err}", raw=raw))
                continue
            refused = refusal(task, spec, family, reserved)
            if refused:
                log.append(RewriteAttempt(attempt=attempt, ok=False, error=refused, raw=raw,
                                          reserved=refused == RESERVED_ERROR))
                continue
            log.append(RewriteAttempt(attempt=attempt, ok=True, reason="llm rewrite", raw=raw))
            return candidate_task(task, spec, family), log
        return None, log


# ---------------------------------------------------------------- registry
def _make_procedural(generate: Generate | None = None, prompt_mode: PromptMode = "compact") -> Rewriter:
    return ProceduralRewriter()


def _make_llm(generate: Generate | None = None, prompt_mode: PromptMode = "compact") -> Rewriter:
    if generate is None:
        raise ValueError("the 'llm' rewriter needs a generate(prompts) -> texts callable")
    return LLMRewriter(generate, prompt_mode=prompt_mode)


REWRITERS: Registry[Callable[..., Rewriter]] = Registry("rewriter", "environment.rewriter")
REWRITERS.add("procedural", _make_procedural)
REWRITERS.add("llm", _make_llm)


def get_rewriter(name: str, generate: Generate | None = None, prompt_mode: PromptMode = "compact") -> Rewriter:
    """The rewriter registered as `name`; `generate` (and `prompt_mode`) are for "llm", ignored otherwise."""
    return REWRITERS.get(name)(generate=generate, prompt_mode=prompt_mode)
