"""DAgger's labels (`rla_core.bootstrap.replay_walk` + `policy_pairs`), fed by the real producer (the rollout
runner `play`) and checked against the real consumer's input: the policy prompts the runner built at each
visited state are exactly the prompts of the new pairs, and each target is the oracle's command from that
state. Only the policy *model* is scripted (it answers the same command, an unparsable answer, another
command, so its episodes repeat actions and fail as a weak greedy policy's do)."""
from __future__ import annotations

import random

import pytest

from rla_core.bootstrap import oracle_walk, policy_pairs, replay_walk
from rla_core.envs.household import HOUSEHOLD
from rla_core.rollout.base import SamplingParams
from rla_core.rollout.prompts import policy_answer
from rla_core.rollout.runner import play
from rla_core.schemas import Task
from tests.rla_core.test_played_pairs import RecordingTokenizer, ScriptedModel

HORIZON, KEEP = 8, 2


def task(seed: int) -> Task:
    spec = HOUSEHOLD.validate(HOUSEHOLD.generate({"goal_type": "put", "distractors": 2, "closed": 1},
                                                 random.Random(seed)), HORIZON)
    return Task(task_id=f"t{seed}", slot_id=f"t{seed}", spec=spec)


def played(seeds, answers):
    tokenizer = RecordingTokenizer()
    tasks = [task(s) for s in seeds]
    trajectories, _ = play(ScriptedModel(answers), tokenizer, HOUSEHOLD, [(t, 0) for t in tasks],
                           SamplingParams(8, 1.0, 0), HORIZON, KEEP)
    return tasks, trajectories, tokenizer.texts


def test_every_visited_state_gets_the_runners_own_prompt_and_the_oracles_command():
    tasks, trajectories, texts = played(range(4), ["\\boxed{1}", "no idea", "\\boxed{2}", "\\boxed{1}"])
    steps = [s for t in trajectories for s in t.steps]
    assert any(s.action is None for s in steps) and not any(t.success for t in trajectories)
    walks = [replay_walk(HOUSEHOLD, task_, t) for task_, t in zip(tasks, trajectories)]
    pairs = policy_pairs(walks, KEEP)
    assert len(pairs) == len(steps)  # no state of a lost episode is without an oracle plan
    # the runner builds the prompts turn by turn across episodes: compare as the runner's order, per episode
    by_turn = sorted(range(len(steps)), key=lambda i: (steps[i].index, i))
    runner_texts = dict(zip(by_turn, texts))
    assert [prompt for prompt, _ in pairs] == [runner_texts[i] for i in range(len(steps))]
    # each target is the oracle's command from that state: replay up to it in a fresh game and ask the oracle
    i = 0
    for task_, trajectory, walk in zip(tasks, trajectories, walks):
        episode = HOUSEHOLD.make(task_.spec)
        episode.reset()
        for step, w in zip(trajectory.steps, walk):
            command = episode.oracle_plan()[0]
            assert pairs[i][1] == policy_answer(episode.admissible_commands().index(command) + 1)
            assert episode.is_progress(command) and w.commands[w.oracle_index - 1] == command
            episode.step(step.action or "(invalid answer)")
            i += 1


def test_the_first_state_repeats_the_oracle_walks_first_pair():
    tasks, trajectories, _ = played([7], ["\\boxed{2}"])
    first = policy_pairs([replay_walk(HOUSEHOLD, tasks[0], trajectories[0])], KEEP)[0]
    assert first == policy_pairs([oracle_walk(HOUSEHOLD, tasks[0], 0.0, random.Random(0))], KEEP)[0]


def test_a_won_episode_labels_up_to_its_winning_step_only():
    tasks = [task(s) for s in range(6)]
    walks = [oracle_walk(HOUSEHOLD, t, 0.0, random.Random(0)) for t in tasks]  # the oracle's answers, scripted
    answers = [policy_answer(s.oracle_index) for w in walks for s in w]
    trajectories, _ = play(ScriptedModel(answers), RecordingTokenizer(), HOUSEHOLD, [(tasks[0], 0)],
                           SamplingParams(8, 1.0, 0), HORIZON, KEEP)
    assert trajectories[0].success
    replayed = replay_walk(HOUSEHOLD, tasks[0], trajectories[0])
    assert len(replayed) == len(trajectories[0].steps) == len(walks[0])
    assert policy_pairs([replayed], KEEP) == policy_pairs(walks[:1], KEEP)


def test_a_game_that_does_not_repeat_the_episode_is_refused():
    tasks, trajectories, _ = played([3], ["\\boxed{1}"])
    changed = trajectories[0].model_copy(deep=True)
    changed.steps[1].observation = "something else happened"
    with pytest.raises(RuntimeError, match="step 1: the game's observation differs"):
        replay_walk(HOUSEHOLD, tasks[0], changed)
    with pytest.raises(RuntimeError, match="first observation differs"):
        replay_walk(HOUSEHOLD, tasks[0], trajectories[0].model_copy(update={"initial_observation": "x"}))
