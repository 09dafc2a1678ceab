"""The rewriter seam with the real TextWorld family: the real LLM rewriter reading (scripted) generator text
through the family's answer parser into games TextWorld really builds, and the real procedural rewriter
reading the real critic's feedback on episodes played through the engine.

Only the generator *model* is scripted (what it says is fixed; how it is read, validated and built is
not). About five games are built, once, in a temporary cache."""
from __future__ import annotations

import json
import random

import pytest

from rla_core.adaptation.critic import critic_feedback
from rla_core.adaptation.rewriters import LLMRewriter, get_rewriter
from rla_core.envs.textworld import TextWorldFamily
from rla_core.schemas import NO_ACTION, JudgedStep, JudgeSample, Step, Task, Trajectory

pytestmark = pytest.mark.filterwarnings("ignore:Game .* is not fully supported")

# the parent game: one room, two objects, a one-step quest; the rewrite asked of the generator makes the
# quest two steps long with another seed
PARENT = {"generator": "custom", "knobs": {"world_size": 1, "nb_objects": 2, "quest_length": 1}, "seed": 3}
REWRITTEN = {"generator": "custom", "knobs": {"world_size": 1, "nb_objects": 2, "quest_length": 2}, "seed": 11}
OBJECTIVE = "Open the box, then close it."
HORIZON = 10


@pytest.fixture(scope="module")
def family(tmp_path_factory) -> TextWorldFamily:
    fam = TextWorldFamily()
    fam.configure(games=tmp_path_factory.mktemp("tw_seam_games"), workers=1)
    return fam


@pytest.fixture(scope="module")
def parent(family) -> Task:
    spec = family.validate(PARENT, HORIZON)
    return Task(task_id="s0-v0", slot_id="s0", env="textworld", spec=spec, difficulty=family.difficulty(spec))


@pytest.fixture(scope="module")
def rewritten(family) -> dict:
    return family.validate(REWRITTEN, HORIZON)


class Scripted:
    """A generator 'model' that answers each prompt with the next scripted text; records the prompts."""

    def __init__(self, *answers: str) -> None:
        self.answers, self.prompts = list(answers), []

    def __call__(self, prompts: list[str]) -> list[str]:
        self.prompts += prompts
        return self.answers[: len(prompts)]


def test_compact_answer_in_chatter_becomes_the_validated_candidate(family, parent, rewritten):
    answer = family.generator_answer(rewritten)
    assert json.loads(answer) == {"knobs": {"generator": "custom", **REWRITTEN["knobs"], "step_limit": 20}, "seed": 11}
    generate = Scripted(f"Sure! A longer quest: {answer} I hope this {{works}} for the agent.",
                        "unused second answer")
    feedback = critic_feedback([], [])
    candidate, log = LLMRewriter(generate).rewrite(parent, "harder", feedback, 2, random.Random(0), family, HORIZON)
    # one batched call with A prompts; the compact prompt carries the family's context of the parent game
    assert len(generate.prompts) == 2 and generate.prompts[0] == generate.prompts[1]
    assert family.rewrite_context(parent.spec) in generate.prompts[0] and "Make it harder." in generate.prompts[0]
    assert candidate is not None and [a.ok for a in log] == [True]
    assert candidate.spec == rewritten == family.validate(candidate.spec, HORIZON)
    assert candidate.spec["knobs"]["quest_length"] == 2 and candidate.spec["seed"] == 11
    assert (candidate.slot_id, candidate.env, candidate.version) == ("s0", "textworld", 1)
    assert candidate.task_id.startswith("s0-v1-")
    assert candidate.difficulty == family.difficulty(rewritten) == len(family.record(rewritten)["walkthrough"])
    assert family.content_hash(candidate.spec) != family.content_hash(parent.spec)


def test_full_prompt_answer_with_an_objective_is_compiled_into_the_game(family, parent):
    import textworld

    full = json.dumps({**parent.spec, "objective": OBJECTIVE})
    generate = Scripted(f"Here is the new spec:\n```json\n{full}\n```\nDone.")
    candidate, log = LLMRewriter(generate, prompt_mode="full").rewrite(parent, "easier", critic_feedback([], []), 1,
                                                                       random.Random(0), family, HORIZON)
    [prompt] = generate.prompts
    assert family.describe_schema() in prompt
    assert json.dumps(parent.spec, sort_keys=True) in prompt
    assert "easier version of it that is still solvable" in prompt
    assert candidate is not None and log[-1].ok, log
    assert candidate.spec == {**parent.spec, "objective": OBJECTIVE}
    # the objective is the game's: a new game (its content hash), whose goal and engine text say it
    assert family.content_hash(candidate.spec) != family.content_hash(parent.spec)
    episode = family.make(candidate.spec)
    assert "Open the box" in episode.goal
    assert "Open the box" not in family.make(parent.spec).goal
    env = textworld.start(str(family.game_file(candidate.spec)))
    try:
        assert OBJECTIVE in " ".join(env.reset().feedback.split())  # the compiled Z-machine prints it
    finally:
        env.close()
    # same generator, knobs and seed: the same world, played the same way
    assert family.record(candidate.spec)["walkthrough"] == family.record(parent.spec)["walkthrough"]


def test_malformed_answers_are_failed_attempts_not_exceptions(family, parent, rewritten, tmp_path):
    bad_objective = json.dumps({**parent.spec, "objective": 'Open the "box".'})
    unknown_knob = json.dumps({"knobs": {"world_size": 1, "rooms": 2}, "seed": 4})
    missing_file = json.dumps({"game_file": str(tmp_path / "nowhere.z8"), "step_limit": 10})
    generate = Scripted(bad_objective, unknown_knob, missing_file, "no JSON here at all",
                        "then: " + family.generator_answer(rewritten))
    candidate, log = LLMRewriter(generate).rewrite(parent, "harder", critic_feedback([], []), 5,
                                                   random.Random(0), family, HORIZON)
    assert [a.ok for a in log] == [False, False, False, False, True]
    assert all(a.error for a in log[:4]) and not log[4].error
    assert "SpecError" in log[0].error and "objective may hold" in log[0].error
    assert "SpecError" in log[1].error and "unknown knob(s) ['rooms']" in log[1].error
    assert "SpecError" in log[2].error and "game file not found" in log[2].error
    assert "no JSON object" in log[3].error
    assert log[0].raw == bad_objective
    assert candidate is not None and candidate.spec == rewritten  # the first valid answer is taken
    assert not (tmp_path / "nowhere.z8").exists()
    # only malformed answers: no candidate, and still no exception
    none, failed = LLMRewriter(Scripted(bad_objective, unknown_knob)).rewrite(
        parent, "harder", critic_feedback([], []), 2, random.Random(0), family, HORIZON)
    assert none is None and [a.ok for a in failed] == [False, False]


# ------------------------------------------------------------------------------ procedural + real critic
OBJECT_VERBS = ("take", "put", "insert", "drop", "open", "close", "unlock", "lock", "eat")


def play(family, task: Task, policy, turns: int, sample_index: int) -> Trajectory:
    """The trajectory of `policy(episode, turn)` (a command, None: an answer that did not parse) played
    through the engine, labelled as the rollout runner labels it."""
    episode = family.make(task.spec)
    first = episode.reset()
    steps = []
    for index in range(turns):
        action = policy(episode, index)
        if action is not None:
            assert action in episode.admissible_commands(), (action, episode.admissible_commands())
        good = episode.is_progress(action) if action is not None else False
        outcome = episode.step(action if action is not None else "(invalid answer)")
        steps.append(Step(index=index, prompt_ids=[1], response_ids=[2], response_text=action or "??",
                          action=action, observation=outcome.observation, oracle_good=good))
        if outcome.done:
            break
    episode.close()
    return Trajectory(task_id=task.task_id, slot_id=task.slot_id, sample_index=sample_index, goal=episode.goal,
                      initial_observation=first, steps=steps, success=episode.won)


def judged(trajectories: list[Trajectory], reject) -> list[JudgedStep]:
    """Two judge samples per step, both rejecting the steps `reject(step)` picks (approving the others)."""
    out = []
    for t in trajectories:
        for s in t.steps:
            text = "this does not help \\boxed{-1}" if reject(s) else "fine \\boxed{1}"
            sample = JudgeSample(prompt_ids=[1], response_ids=[2], text=text, verdict=-1 if reject(s) else 1)
            out.append(JudgedStep(task_id=t.task_id, sample_index=t.sample_index, step_index=s.index,
                                  samples=[sample, sample], oracle_good=s.oracle_good))
    return out


def wanderer(episode, turn: int) -> str | None:
    """Only looks around (and once writes nothing parseable): never wins."""
    return None if turn == 2 else "look"


def fumbler(episode, turn: int) -> str:
    """Handles objects (drops and takes things) but never makes the winning move; looks around at turn 2."""
    plan = episode.oracle_plan()
    if turn != 2:
        for command in episode.admissible_commands():
            if command.split()[0] in OBJECT_VERBS and not (len(plan) == 1 and command == plan[0]):
                return command
    return "look"


def is_object_step(step: Step) -> bool:
    return step.action is not None and step.action.split()[0] in OBJECT_VERBS


def test_procedural_rewriter_turns_the_knob_the_real_critic_feedback_points_to(family, parent):
    walkthrough = family.record(parent.spec)["walkthrough"]
    wander = [play(family, parent, wanderer, 4, j) for j in range(2)]
    assert not any(t.success for t in wander) and all(len(t.steps) == 4 for t in wander)
    assert all(s.oracle_good is False for t in wander for s in t.steps)
    feedback = critic_feedback(wander, judged(wander, lambda s: True))
    assert [(a.action, a.count, a.runs) for a in feedback.actions] == [("look", 6, 2), (NO_ACTION, 2, 2)]
    assert feedback.failed == 2 and feedback.actions[0].rationale == "this does not help"
    candidate, log = get_rewriter("procedural").rewrite(parent, "harder", feedback, 2, random.Random(5), family,
                                                        HORIZON)
    assert candidate is not None and log[-1].ok
    assert log[-1].knob == "quest_length" and log[-1].from_feedback is True
    assert "long quests" in log[-1].reason and "8/8 rejected steps" in log[-1].reason
    assert candidate.spec["knobs"] == {**parent.spec["knobs"], "quest_length": 2}
    assert candidate.spec == family.validate(candidate.spec, HORIZON)
    assert candidate.difficulty >= parent.difficulty == len(walkthrough)

    # the same game, the judge rejecting the object commands of a fumbling policy and not its looking
    # around: the objects bucket decides, so nb_objects is turned (2 -> 4), not the fallback quest_length
    fumble = [play(family, parent, fumbler, 4, 0)]
    objects = [s for s in fumble[0].steps if is_object_step(s)]
    assert not fumble[0].success and len(objects) >= 2, fumble[0].steps
    feedback = critic_feedback(fumble, judged(fumble, is_object_step))
    assert feedback.rejected_steps == len(objects)
    assert {a.action for a in feedback.actions} == {s.action for s in objects}
    candidate, log = get_rewriter("procedural").rewrite(parent, "harder", feedback, 2, random.Random(6), family,
                                                        HORIZON)
    assert candidate is not None and log[-1].knob == "nb_objects" and log[-1].from_feedback is True
    assert "were objects" in log[-1].reason, log[-1].reason
    assert candidate.spec["knobs"] == {**parent.spec["knobs"], "nb_objects": 4}
    assert candidate.spec == family.validate(candidate.spec, HORIZON)
