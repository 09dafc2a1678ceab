"""Model outputs of any size or content never crash a stage: the policy's action parser, the judge's
verdict and rationale parsers, the LLM rewriter's JSON parsing, and the trip through the stage files
(rollout -> trajectories.jsonl -> judge -> judged.jsonl) return an invalid action / unparsed verdict /
failed attempt, never raise, and take no more than a moment.

Cases: 24 outputs x 5 consumers (parse_action, parse_verdict + judge_rationale, the LLM rewriter, a
rollout and judge pass with the records written and read back, the critic's feedback) = 120, plus 4
exact-answer checks (pinned behaviour of the parsers on edge cases).

Found by these: a `\\boxed{` followed by whitespace took cubic time in the verdict regex (30 s for 4,000
spaces), `\\boxed{<4,301+ digits>}` raised in int(), a megabyte of "{" took 200 s in the rewriter's
object search, U+2028/U+0085 in a response split its trajectories.jsonl line in two on reading, and a
lone surrogate made the record unwritable.
"""
from __future__ import annotations

import random
import time

import pytest

from rla_core.adaptation.critic import critic_feedback
from rla_core.adaptation.rewriters import LLMRewriter, first_json_object
from rla_core.bootstrap import generate_tasks
from rla_core.envs.household import HOUSEHOLD
from rla_core.judge.judge import judge_rationale, judge_trajectories, parse_verdict
from rla_core.rollout.base import Generation, SamplingParams
from rla_core.rollout.prompts import parse_action
from rla_core.rollout.runner import play
from rla_core.schemas import CriticFeedback, JudgedStep, Trajectory
from tasks.storage.files import read_records, write_records

MB = 1_000_000
OUTPUTS = {
    "empty": "",
    "huge_junk": "lorem ipsum " * (MB // 12),
    "huge_then_answer": "a" * MB + " \\boxed{1}",
    "unclosed_boxed_spaces": "\\boxed{" + " " * MB,
    "unclosed_boxed_newlines": "\\boxed{" + "\n" * MB,
    "huge_number": "\\boxed{" + "9" * 10_000 + "}",
    "zeros_then_one": "\\boxed{" + "0" * 5_000 + "1}",
    "negative": "\\boxed{-1} \\boxed{-0}",
    "unicode_digits": "选择 \\boxed{２} or \\boxed{٣}",
    "emoji_rtl_zero_width": "\u202e😀\u200b\\boxed{1}\u200d👍🏽",
    "control_chars": "\x01\x1b[31m\\boxed{1}\x7f\x08\x0b\x0c\x1c\x1d\x1e",
    "nul_bytes": "\x00" * 100_000 + "\\boxed{\x001\x00}",
    "line_separators": "a\u2028b\u2029c\x85d \\boxed{1}",
    "lone_surrogate": "\ud800 \\boxed{1} \udfff",
    "unbalanced_open": "\\boxed{{{1}",
    "unbalanced_close": "}}}\\boxed{1}}}}{{{",
    "nested_boxed": "\\boxed{\\boxed{\\boxed{-1}}}",
    "many_boxed": "\\boxed{1}" * 100_000,
    "brace_flood": "{" * MB,
    "key_flood": '{"' * (MB // 2),
    "deep_json": '{"knobs":' * 100_000,
    "deep_list": '{"knobs": {"rooms": ' + "[" * 100_000,
    "json_huge_int": '{"knobs": {"rooms": ' + "7" * 5_000 + '}, "seed": 1}',
    "json_wrong_types": '{"knobs": [1, 2], "seed": "x"} {"knobs": {"rooms": "two"}, "seed": 1e999}',
}
IDS = list(OUTPUTS)
COMMANDS = ["go to kitchen", "take apple", "look"]
SECONDS = 10.0  # generous on a shared CPU; the cubic regex took 30 s on 4,000 characters


def _timed(fn, *args):
    start = time.perf_counter()
    value = fn(*args)
    assert time.perf_counter() - start < SECONDS
    return value


@pytest.mark.parametrize("name", IDS)
def test_the_policy_answer_parses_to_an_admissible_command_or_none(name):
    assert _timed(parse_action, OUTPUTS[name], COMMANDS) in COMMANDS + [None]


@pytest.mark.parametrize("name", IDS)
def test_the_judge_answer_parses_to_a_verdict_and_a_short_one_line_rationale(name):
    assert _timed(parse_verdict, OUTPUTS[name]) in (-1, 0, 1)
    rationale = _timed(judge_rationale, OUTPUTS[name])
    assert isinstance(rationale, str) and len(rationale) <= 160


@pytest.mark.parametrize("name", IDS)
def test_the_llm_rewriter_turns_any_answer_into_a_candidate_or_a_failed_attempt(name):
    parent = generate_tasks(HOUSEHOLD, {}, 1, random.Random(0), "slot", set(), 12)[0]
    rewriter = LLMRewriter(lambda prompts: [OUTPUTS[name]] * len(prompts))
    candidate, log = _timed(rewriter.rewrite, parent, "harder", CriticFeedback(), 2, random.Random(0), HOUSEHOLD, 12)
    assert candidate is None or candidate.env == HOUSEHOLD.name
    assert log and all(len(attempt.raw) <= 2000 for attempt in log)


class _Tokenizer:
    def __call__(self, texts):
        return {"input_ids": [[1, 2, 3] for _ in texts]}


class _Engine:
    """Answers every prompt with the same text, as an engine's Generation (decoded text)."""

    def __init__(self, text: str):
        self.text = text

    def generate(self, prompts, params, progress=None):
        return [Generation(token_ids=[4, 5], text=self.text, logprobs=[-0.1, -0.2])
                for _ in prompts for _ in range(params.n)]


@pytest.mark.parametrize("name", IDS)
def test_a_rollout_and_judge_pass_store_any_answer_and_read_it_back(name, tmp_path):
    tasks = generate_tasks(HOUSEHOLD, {}, 1, random.Random(1), "slot", set(), 12)
    engine, params = _Engine(OUTPUTS[name]), SamplingParams(max_new_tokens=4)
    trajectories, metrics = play(engine, _Tokenizer(), HOUSEHOLD, [(tasks[0], 0)], params, 2, 3)
    assert 0 <= metrics["invalid_rate"] <= 1
    back = read_records(write_records(tmp_path / "trajectories.jsonl", trajectories), Trajectory)
    assert back == trajectories and len(back[0].steps) >= 1
    judged, _ = judge_trajectories(engine, _Tokenizer(), back, 2, params, 3)
    assert read_records(write_records(tmp_path / "judged.jsonl", judged), JudgedStep) == judged


@pytest.mark.parametrize("name", IDS)
def test_the_critic_feedback_of_any_answer_renders_within_its_cap(name):
    tasks = generate_tasks(HOUSEHOLD, {}, 1, random.Random(2), "slot", set(), 12)
    engine, params = _Engine(OUTPUTS[name]), SamplingParams(max_new_tokens=4)
    trajectories, _ = play(engine, _Tokenizer(), HOUSEHOLD, [(tasks[0], 0)], params, 2, 3)
    judged, _ = judge_trajectories(engine, _Tokenizer(), trajectories, 2, params, 3)
    feedback = _timed(critic_feedback, trajectories, judged)
    for one in (feedback.values() if isinstance(feedback, dict) else [feedback]):
        assert len(one.render()) <= 1500


def test_edge_answers_parse_as_before():
    assert parse_action("\\boxed{" + "0" * 5_000 + "1}", COMMANDS) == COMMANDS[0]
    assert parse_action("\\boxed{-1}", COMMANDS) is None and parse_action("\\boxed{ 3 }", COMMANDS) == COMMANDS[2]
    assert parse_action("\\boxed{٣}", COMMANDS) == COMMANDS[2]  # int() reads any Unicode decimal digit


def test_verdicts_strip_whitespace_as_the_old_pattern_did():
    assert parse_verdict("\\boxed{ \t+1\n }") == 1 and parse_verdict("\\boxed{\u3000-1\u3000}") == -1
    assert parse_verdict("\\boxed{1 1}") == 0 and parse_verdict("\\boxed{\\boxed{-1}}") == -1


def test_the_rewriter_object_search_finds_the_same_objects():
    assert first_json_object('x {bad} { "a": 1} {"b": 2}') == {"a": 1}
    assert first_json_object("{{{{" + '{"k": {}}') == {"k": {}}
    assert first_json_object("{\n\t}") == {}


def test_a_lone_surrogate_in_decoded_text_becomes_replacement_characters():
    text = Generation(token_ids=[1], text="a\ud800b").text
    assert "\ud800" not in text and text.startswith("a") and text.endswith("b")
    assert Generation(token_ids=[1], text="é\u2028😀").text == "é\u2028😀"
