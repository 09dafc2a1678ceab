"""Tests of the built-in household environment: spec validation, world rules, oracle, generator, adjust."""
from __future__ import annotations

import copy
import json
import random
from collections import deque

import pytest

from rla_core.bootstrap import oracle_walk
from rla_core.envs.base import ENVIRONMENTS, Episode, SpecError, get_environment
from rla_core.envs.household import HOUSEHOLD
from rla_core.envs.household.rewriter import classify_feedback
from rla_core.schemas import NO_ACTION, CriticFeedback, RejectedAction, Task
from rla_core.envs.household.world import Layout, State

ENV = HOUSEHOLD


def spec_of(goal: dict, rooms: list | None = None, objects: list | None = None, step_limit: int = 20) -> dict:
    """A hand-written spec; by default one kitchen with a closed cabinet and a mug on the countertop."""
    rooms = rooms or [{"name": "kitchen", "receptacles": [
        {"name": "countertop 1"}, {"name": "cabinet 1", "closed": True}, {"name": "sinkbasin 1"}]}]
    objects = objects or [{"name": "mug 1", "location": "countertop 1"}, {"name": "book 1", "location": "cabinet 1"}]
    spec = {"rooms": rooms, "start_room": rooms[0]["name"], "objects": objects, "goal": goal, "step_limit": step_limit}
    return copy.deepcopy(spec)  # tests mutate it


PUT_MUG = {"type": "put", "object": "mug", "target": "cabinet 1"}


def brute_force_distance(layout: Layout, state: State, limit: int = 14) -> float:
    """Plain BFS over full concrete states with every admissible command (the reference oracle)."""
    def key(st: State) -> tuple:
        return (st.room, st.at, st.holding, tuple(st.is_open), tuple(st.obj_loc), tuple(st.obj_flags), st.lamp_on)

    if layout.is_won(state):
        return 0
    seen, frontier = {key(state)}, deque([(state, 0)])
    while frontier:
        st, depth = frontier.popleft()
        if depth >= limit:
            break
        for action in layout.admissible(st).values():
            nxt = st.copy()
            layout.apply(nxt, action)
            if layout.is_won(nxt):
                return depth + 1
            if key(nxt) not in seen:
                seen.add(key(nxt))
                frontier.append((nxt, depth + 1))
    return float("inf")


TINY = {
    "put": spec_of(PUT_MUG),
    "clean": spec_of({"type": "clean", "object": "mug", "target": "cabinet 1"}),
    "put_two": spec_of({"type": "put_two", "object": "mug", "target": "countertop 1"}, objects=[
        {"name": "mug 1", "location": "cabinet 1"}, {"name": "mug 2", "location": "sinkbasin 1"},
        {"name": "book 1", "location": "countertop 1"}]),
    "examine": spec_of({"type": "examine", "object": "book"}, rooms=[
        {"name": "kitchen", "receptacles": [{"name": "countertop 1"}, {"name": "cabinet 1", "closed": True}]},
        {"name": "bedroom", "receptacles": [{"name": "desk 1"}, {"name": "drawer 1", "closed": True}]}],
        objects=[{"name": "book 1", "location": "cabinet 1"}, {"name": "pen 1", "location": "desk 1"}]),
    "heat": spec_of({"type": "heat", "object": "apple", "target": "fridge 1"}, rooms=[
        {"name": "kitchen", "receptacles": [{"name": "fridge 1", "closed": True}, {"name": "microwave 1"}]},
        {"name": "bathroom", "receptacles": [{"name": "shelf 1"}]}],
        objects=[{"name": "apple 1", "location": "shelf 1"}, {"name": "pen 1", "location": "microwave 1"}]),
}


def test_registered_and_protocol():
    assert get_environment("household") is HOUSEHOLD and ENVIRONMENTS["household"] is HOUSEHOLD
    assert isinstance(ENV.make(ENV.validate(spec_of(PUT_MUG))), Episode)


def test_hand_computed_plan_goal_text_and_difficulty():
    spec = ENV.validate(spec_of(PUT_MUG))
    episode = ENV.make(spec)
    assert episode.goal == "Your task is to: put a mug in cabinet 1."
    assert episode.reset() == ("You are in the middle of the kitchen. Looking quickly around you, you see "
                               "a countertop 1, a cabinet 1, and a sinkbasin 1.")
    assert episode.oracle_plan() == ["go to countertop 1", "take mug 1 from countertop 1", "go to cabinet 1",
                                     "open cabinet 1", "put mug 1 in cabinet 1"]
    assert ENV.difficulty(spec) == 5.0
    assert ENV.knobs_of(spec) == {"rooms": 1, "distractors": 1, "closed": 1, "goal_type": "put", "step_limit": 20}


def test_generate_is_deterministic_by_seed():
    a = ENV.generate({"rooms": 2}, random.Random(7))
    assert a == ENV.generate({"rooms": 2}, random.Random(7))
    assert a != ENV.generate({"rooms": 2}, random.Random(8))
    assert ENV.generate_from_seed(a["knobs"], a["seed"]) == a
    assert ENV.validate(copy.deepcopy(a)) == a
    layout_knobs = ENV.knobs_of({k: v for k, v in a.items() if k != "knobs"})  # derived from the layout
    assert layout_knobs == {**a["knobs"], "goal_type": a["goal"]["type"]}


def test_validate_is_idempotent_and_fills_knobs():
    spec = spec_of(PUT_MUG, step_limit=60)
    once = ENV.validate(spec)
    assert once["knobs"]["step_limit"] == 40 and once["seed"] is None  # derived knobs are clipped to bounds
    assert ENV.validate(copy.deepcopy(once)) == once


def test_oracle_matches_brute_force_on_generated_layouts():
    rng = random.Random(21)
    for goal_type in ["put", "put_two", "clean", "heat", "cool", "examine"]:
        spec = ENV.generate({"goal_type": goal_type, "rooms": 2, "distractors": 1, "closed": 2}, rng)
        episode = ENV.make(spec)
        state = episode.layout.initial_state()
        for _ in range(rng.randint(2, 8)):
            episode.layout.apply(state, rng.choice(list(episode.layout.admissible(state).values())))
        assert episode.oracle.distance(state) == brute_force_distance(episode.layout, state, limit=20)


@pytest.mark.parametrize("mutate, message", [
    (lambda s: s["objects"][0].update(location="shelf 9"), "'shelf 9', which is not a receptacle"),
    (lambda s: s["goal"].update(target="fridge 1"), "goal.target 'fridge 1'"),
    (lambda s: s["rooms"][0]["receptacles"].append({"name": "spaceship 1"}), "unknown type 'spaceship'"),
    (lambda s: s["rooms"][0]["receptacles"][0].update(closed=True), "cannot be closed"),
    (lambda s: s["objects"].append({"name": "mug 1", "location": "sinkbasin 1"}), "object names repeat"),
    (lambda s: s["objects"][0].update(name="mug"), "'<type> <number>'"),
    (lambda s: s["goal"].update(type="clean", object="book"), "a book cannot be cleaned"),
    (lambda s: s["goal"].update(type="heat"), "has no microwave"),
    (lambda s: s["goal"].update(type="put_two"), "needs 2 mug object(s); the spec has 1"),
    (lambda s: s["goal"].update(type="examine", target=None), "has no desk"),
    (lambda s: s.update(start_room="garage"), "start_room 'garage'"),
    (lambda s: s.update(colour="red"), "spec.colour"),
    (lambda s: s.update(step_limit=4), "not solvable within step_limit=4: the shortest plan has 5 steps"),
    (lambda s: s["objects"][0].update(location="cabinet 1"), "already satisfied"),
    (lambda s: s.update(knobs={"rooms": 9}), "spec.knobs.rooms"),
])
def test_validation_errors_name_the_problem(mutate, message):
    spec = spec_of(PUT_MUG)
    mutate(spec)
    with pytest.raises(SpecError, match=None) as info:
        ENV.validate(spec)
    assert message in str(info.value)


@pytest.mark.parametrize("knobs, name", [
    ({"rooms": 5}, "knobs.rooms"), ({"distractors": -1}, "knobs.distractors"), ({"closed": 7}, "knobs.closed"),
    ({"step_limit": 2}, "knobs.step_limit"), ({"goal_type": "fly"}, "knobs.goal_type"), ({"goal_type": []}, "knobs.goal_type"),
    ({"colour": 1}, "colour"),
])
def test_knobs_out_of_range_rejected(knobs, name):
    with pytest.raises(SpecError) as info:
        ENV.generate(knobs, random.Random(0))
    assert name in str(info.value)


@pytest.mark.parametrize("goal_type", ["put", "put_two", "clean", "heat", "cool", "examine"])
def test_every_goal_type_is_solvable_and_the_plan_wins(goal_type):
    rng = random.Random(3)
    for rooms in (1, 3):
        spec = ENV.generate({"goal_type": goal_type, "rooms": rooms, "closed": 2, "step_limit": 30}, rng)
        assert spec["goal"]["type"] == goal_type and len(spec["rooms"]) == rooms
        episode = ENV.make(spec)
        episode.reset()
        plan = episode.oracle_plan()
        assert len(plan) == ENV.difficulty(spec)
        for i, command in enumerate(plan):
            assert episode.is_progress(command), (i, command)
            outcome = episode.step(command)
            assert outcome.done == (i == len(plan) - 1)
        assert outcome.won and episode.oracle_plan() == []


@pytest.mark.parametrize("name", sorted(TINY))
def test_oracle_is_shortest_against_brute_force(name):
    spec = ENV.validate(TINY[name])
    episode = ENV.make(spec)
    layout, rng = episode.layout, random.Random(11)
    for walk in range(4):
        state = layout.initial_state()
        for _ in range(3 * walk):  # random walks reach odd states: things moved, opened, closed, held
            state_actions = list(layout.admissible(state).values())
            layout.apply(state, rng.choice(state_actions))
        expected = brute_force_distance(layout, state)
        assert episode.oracle.distance(state) == expected, (name, walk)
        if 0 < expected < float("inf"):
            assert len(episode.oracle.plan(state)) == expected


@pytest.mark.parametrize("name", ["put", "examine"])
def test_progress_labels_match_brute_force_definition(name):
    episode = ENV.make(ENV.validate(TINY[name]))
    layout = episode.layout
    episode.reset()
    for command in episode.oracle_plan()[:2]:
        episode.step(command)
    here = brute_force_distance(layout, episode.state)
    for command, action in layout.admissible(episode.state).items():
        nxt = episode.state.copy()
        layout.apply(nxt, action)
        assert episode.is_progress(command) == (brute_force_distance(layout, nxt) == here - 1), command


def test_progress_labels_on_a_hand_example():
    episode = ENV.make(ENV.validate(spec_of(PUT_MUG)))
    episode.reset()
    assert episode.is_progress("go to countertop 1")
    assert not episode.is_progress("go to sinkbasin 1")  # useless move
    assert not episode.is_progress("look") and not episode.is_progress("inventory")
    assert not episode.is_progress("fly to the moon")  # inadmissible
    episode.step("go to countertop 1")
    assert episode.is_progress("take mug 1 from countertop 1")
    assert not episode.is_progress("go to countertop 1")


def test_episodes_of_one_spec_share_the_oracle_not_the_state():
    spec = ENV.validate(spec_of(PUT_MUG))
    first, second = ENV.make(spec), ENV.make(copy.deepcopy(spec))
    assert first.oracle is second.oracle
    first.reset()
    second.reset()
    first.step("go to countertop 1")
    assert second.state.at == -1 and len(second.oracle_plan()) == 5 and len(first.oracle_plan()) == 4


def test_closed_receptacle_hides_contents():
    episode = ENV.make(ENV.validate(spec_of(PUT_MUG)))
    episode.reset()
    outcome = episode.step("go to cabinet 1")
    assert outcome.observation == "You arrive at cabinet 1. The cabinet 1 is closed."
    assert not any(c.startswith("take") for c in episode.admissible_commands())
    assert episode.step("take book 1 from cabinet 1").observation == "Nothing happens."
    outcome = episode.step("open cabinet 1")
    assert outcome.observation == "You open the cabinet 1. The cabinet 1 is open. In it, you see a book 1."
    assert "take book 1 from cabinet 1" in episode.admissible_commands()


def test_inadmissible_and_step_limit():
    episode = ENV.make(ENV.validate(spec_of(PUT_MUG, step_limit=6)))
    episode.reset()
    before = episode.state.copy()
    outcome = episode.step("put mug 1 in cabinet 1")  # not holding it: inadmissible
    assert outcome.observation == "Nothing happens." and not outcome.done
    assert episode.state == before and episode.steps == 1
    for _ in range(4):
        assert not episode.step("look").done
    outcome = episode.step("inventory")
    assert outcome.done and not outcome.won and episode.admissible_commands() == []
    assert episode.step("look").observation == "The episode is over."


def test_admissible_order_keeps_idle_commands_last():
    episode = ENV.make(ENV.validate(spec_of(PUT_MUG)))
    episode.reset()
    episode.step("go to countertop 1")
    episode.step("take mug 1 from countertop 1")
    episode.step("go to sinkbasin 1")
    assert episode.admissible_commands() == [
        "clean mug 1 with sinkbasin 1", "go to cabinet 1", "go to countertop 1", "put mug 1 in sinkbasin 1",
        "examine mug 1", "inventory", "look"]
    assert episode.step("clean mug 1 with sinkbasin 1").observation == "You clean the mug 1 using the sinkbasin 1."
    assert episode.step("examine mug 1").observation == "This is a clean mug 1."


def test_default_knobs_give_short_plans_and_short_lists():
    rng = random.Random(5)
    for _ in range(40):
        spec = ENV.generate({}, rng)
        episode = ENV.make(spec)
        episode.reset()
        assert 3 <= ENV.difficulty(spec) <= 8
        assert len(episode.admissible_commands()) <= 15


def test_oracle_walk_labels():
    """Warm-start demonstrations (`rla_core.bootstrap.oracle_walk`, tested in depth in test_bootstrap.py)."""
    spec = ENV.generate({"goal_type": "clean", "rooms": 2}, random.Random(2))
    task = Task(task_id="clean-2", slot_id="clean", spec=spec)
    clean = oracle_walk(ENV, task, 0.0, random.Random(0))
    episode = ENV.make(spec)
    episode.reset()
    plan = episode.oracle_plan()
    for step in clean:
        episode.step(step.commands[step.taken_index - 1])
    assert all(step.good for step in clean) and episode.won
    assert [s.commands[s.taken_index - 1] for s in clean] == plan
    noisy = oracle_walk(ENV, task, 0.6, random.Random(1))
    assert any(not s.good for s in noisy) and all(1 <= s.taken_index <= len(s.commands) for s in noisy)


def rejected(*actions: str) -> CriticFeedback:
    """Feedback whose failed runs had each of `actions` rejected once by every judge sample."""
    items = [RejectedAction(action=a, count=1, runs=1, rationale="bad") for a in actions]
    return CriticFeedback(trajectories=4, failed=4, rejected_steps=len(items), actions=items)


def test_feedback_classification_weights_actions_by_their_count():
    feedback = CriticFeedback(trajectories=3, failed=3, rejected_steps=6, actions=[
        RejectedAction(action="go to drawer 1", count=3, runs=2), RejectedAction(action="open cabinet 2", count=2, runs=1),
        RejectedAction(action="go to bedroom", count=1, runs=1), RejectedAction(action=NO_ACTION, count=1, runs=1)])
    counts, examples = classify_feedback(feedback)
    assert counts == {"navigation": 4, "containers": 2, "invalid": 1}
    assert examples == {"navigation": "go to drawer 1", "containers": "open cabinet 2", "invalid": NO_ACTION}


@pytest.mark.parametrize("direction, feedback, start, knob, expected", [
    ("harder", rejected("go to shelf 1", "go to bed 1"), {"rooms": 1}, "rooms", 2),
    ("easier", rejected("go to shelf 1"), {"rooms": 1, "distractors": 4}, "distractors", 2),
    ("harder", rejected("open drawer 1"), {"closed": 1}, "closed", 2),
    ("easier", rejected("close fridge 1"), {"closed": 2}, "closed", 1),
    ("harder", rejected("heat mug 1 with microwave 1"), {"goal_type": "clean"}, "goal_type", "put_two"),
    ("easier", rejected("clean mug 1 with sinkbasin 1"), {"goal_type": "clean"}, "goal_type", "examine"),
    ("harder", rejected("look"), {"step_limit": 16}, "step_limit", 14),
    ("harder", CriticFeedback(), {"step_limit": 16}, "step_limit", 14),
    ("easier", CriticFeedback(), {"step_limit": 12}, "step_limit", 14),
])
def test_adjust_turns_the_knob_named_by_the_evidence(direction, feedback, start, knob, expected):
    spec = ENV.generate({"goal_type": "clean", **start}, random.Random(4))
    new_spec, change = ENV.adjust(spec, direction, feedback, random.Random(9))
    assert ENV.validate(copy.deepcopy(new_spec)) == new_spec
    assert new_spec["knobs"][knob] == expected and (change.knob, change.after) == (knob, expected)
    assert change.from_feedback == bool(feedback.actions)
    assert change.reason.startswith(f"{direction}: {knob} ") and f"-> {expected}" in change.reason
    before = {**ENV.knobs_of(spec), "goal_type": spec["goal"]["type"]}  # adjust pins the sampled type
    others = [k for k in before if k != knob]
    assert {k: new_spec["knobs"][k] for k in others} == {k: before[k] for k in others}
    if knob == "step_limit":  # the knob is the turns to spare: limit minus plan length
        before_m, after_m = spec["step_limit"] - ENV.difficulty(spec), new_spec["step_limit"] - ENV.difficulty(new_spec)
        assert after_m < before_m if direction == "harder" else after_m > before_m
    else:
        plan_before, plan_after = ENV.difficulty(spec), ENV.difficulty(new_spec)
        assert plan_after >= plan_before if direction == "harder" else plan_after <= plan_before


def test_adjust_at_bound_picks_another_knob():
    spec = ENV.generate({"rooms": 4, "goal_type": "put", "step_limit": 30}, random.Random(1))
    new_spec, change = ENV.adjust(spec, "harder", rejected("go to kitchen"), random.Random(0))
    assert new_spec["knobs"]["rooms"] == 4 and change.reason.startswith("harder: distractors 2 -> 4")
    assert change.from_feedback  # distractors is navigation's second knob


def test_step_limit_moves_only_inside_the_horizon():
    """A step limit above the runner's turn cap is never reached: easier never raises it past the
    horizon (another knob turns instead), harder lowers it from the horizon, not from the spec value."""
    spec = ENV.generate({"goal_type": "put", "distractors": 2, "step_limit": 12}, random.Random(3))
    new_spec, change = ENV.adjust(spec, "easier", rejected("look"), random.Random(0), horizon=12)
    assert change.knob == "distractors" and new_spec["step_limit"] == 12
    far = ENV.generate({"goal_type": "put", "step_limit": 30}, random.Random(3))
    harder, change = ENV.adjust(far, "harder", rejected("look"), random.Random(0), horizon=12)
    assert (change.knob, change.before, change.after) == ("step_limit", 30, 10) and harder["step_limit"] == 10
    with pytest.raises(SpecError, match="horizon of 3 turns"):
        ENV.validate(spec, horizon=3)


def test_content_hash_ignores_how_the_spec_was_generated():
    spec = ENV.generate({"goal_type": "put"}, random.Random(5))
    relabelled = {**copy.deepcopy(spec), "seed": 123, "knobs": {**spec["knobs"], "distractors": 7}}
    assert ENV.content_hash(relabelled) == ENV.content_hash(spec)
    moved = copy.deepcopy(spec)
    moved["step_limit"] += 1
    assert ENV.content_hash(moved) != ENV.content_hash(spec)


def test_describe_schema_mentions_every_field():
    text = ENV.describe_schema()
    for word in ("rooms", "start_room", "objects", "goal", "step_limit", "put_two", "desklamp"):
        assert word in text
    example = json.loads(text.split("Example: ", 1)[1])
    assert ENV.difficulty(ENV.validate(example)) == 5.0


# ---------------------------------------------------------------- LLM rewriter answers
def generator_form(spec: dict) -> dict:
    """What a compact-mode environment model writes for `spec`, decoded (as the rewriter decodes it)."""
    return json.loads(json.dumps({"knobs": spec["knobs"], "seed": spec["seed"]}))


def test_rewrite_context_is_goal_knobs_and_plan_length():
    spec = ENV.generate({"goal_type": ["put", "examine"], "closed": 0, "distractors": 1}, random.Random(4))
    goal, knobs, plan = ENV.rewrite_context(spec).split("\n")
    assert goal == "Goal: " + ENV.make(spec).goal
    concrete = {**spec["knobs"], "goal_type": spec["goal"]["type"]}  # the sampled type, not the list
    assert json.loads(knobs.removeprefix("Knobs: ")) == concrete
    assert list(json.loads(knobs.removeprefix("Knobs: "))) == ["rooms", "distractors", "closed", "goal_type",
                                                                "step_limit"]  # the order answers use
    assert plan == f"Oracle plan: {int(ENV.difficulty(spec))} steps."


@pytest.mark.parametrize("seed", range(4))
def test_generator_form_expands_to_exactly_the_generated_spec(seed):
    knobs = {"rooms": 2, "distractors": 3, "closed": 2, "goal_type": ["put", "clean", "examine"], "step_limit": 12}
    spec = ENV.generate(knobs, random.Random(seed), horizon=12)
    assert ENV.spec_from_answer(generator_form(spec), horizon=12) == spec
    assert ENV.spec_from_answer(copy.deepcopy(spec), horizon=12) == ENV.validate(spec, 12)  # a full spec


@pytest.mark.parametrize("direction", ["harder", "easier"])
@pytest.mark.parametrize("seed", range(3))
def test_generator_form_round_trips_the_procedural_rewrite(direction, seed):
    spec = ENV.generate({"goal_type": ["put", "examine"], "closed": 1, "distractors": 2}, random.Random(seed), 12)
    new_spec, _ = ENV.adjust(spec, direction, rejected("go to shelf 1"), random.Random(seed + 10), horizon=12)
    assert ENV.spec_from_answer(generator_form(new_spec), horizon=12) == new_spec


KNOBS = {"rooms": 1, "distractors": 1, "closed": 0, "goal_type": "put", "step_limit": 12}


@pytest.mark.parametrize("answer, message", [
    ([KNOBS, 3], "must be a JSON object"),
    ({"knobs": KNOBS}, "needs both 'knobs' and 'seed'"),
    ({"seed": 3}, "needs both"),
    ({"seed": 3, "step_limit": 5}, "spec.rooms"),  # not the generator form: validated as a spec
    ({"knobs": [1, 2], "seed": 3}, "knobs must be a JSON object"),
    ({"knobs": {**KNOBS, "rooms": "2"}, "seed": 3}, "knobs.rooms"),
    ({"knobs": {**KNOBS, "rooms": 2.0}, "seed": 3}, "knobs.rooms"),
    ({"knobs": {**KNOBS, "closed": True}, "seed": 3}, "knobs.closed"),
    ({"knobs": {**KNOBS, "doors": 2}, "seed": 3}, "knobs.doors"),
    ({"knobs": {**KNOBS, "goal_type": "dance"}, "seed": 3}, "knobs.goal_type"),
    ({"knobs": {**KNOBS, "distractors": 10**40}, "seed": 3}, "knobs.distractors"),
    ({"knobs": KNOBS, "seed": "12"}, "seed must be an integer"),
    ({"knobs": KNOBS, "seed": 1.5}, "seed must be an integer"),
    ({"knobs": KNOBS, "seed": None}, "seed must be an integer"),
    ({"knobs": KNOBS, "seed": -1}, r"seed must be in \[0, 2\*\*63\)"),
    ({"knobs": KNOBS, "seed": 10**400}, r"seed must be in \[0, 2\*\*63\)"),
    ({"knobs": {**KNOBS, "rooms": 4, "closed": 6, "goal_type": "put_two", "step_limit": 4}, "seed": 3}, "no valid spec"),
])
def test_malformed_answers_raise_spec_error(answer, message):
    with pytest.raises(SpecError, match=message):
        ENV.spec_from_answer(answer, horizon=12)
