"""Tests of the TextWorld environment family on real games built by the TextWorld 1.7 engine: the spec,
the content-addressed game cache, validation, episodes and their oracle, the procedural rewriter, the
generator form of a spec, games made by the `tw-make` CLI, and the registry.

Building a game costs about a second, so the games are built once per module in a temporary cache."""
from __future__ import annotations

import json
import random
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from rla_core.envs.base import Episode, SpecError, get_environment
from rla_core.envs.textworld import TEXTWORLD, TextWorldEpisode, TextWorldFamily
from rla_core.envs.textworld import rewriter
from rla_core.envs.textworld.episode import NOTHING, OVER, clean_goal, clean_text
from rla_core.envs.textworld.games import GameCache, game_content_hash, generate_game
from rla_core.envs.textworld.spec import MAX_OBJECTIVE_CHARS, build_key, parse_spec
from rla_core.schemas import NO_ACTION, CriticFeedback, RejectedAction

# the base game: two rooms, one object asked for (nb_objects at its lower bound), a two-step quest
BASE = {"generator": "custom", "knobs": {"world_size": 2, "nb_objects": 1, "quest_length": 2}, "seed": 3}
# the knobs and seed of the CLI game below, built by the family
CLI_KNOBS = {"world_size": 2, "nb_objects": 3, "quest_length": 2}
TWIN = {"generator": "custom", "knobs": CLI_KNOBS, "seed": 5}
TW_MAKE = Path(sys.executable).parent / "tw-make"

# Jericho warns that it does not know TextWorld's games (no score/move detection); the family does not use those
pytestmark = pytest.mark.filterwarnings("ignore:Game .* is not fully supported")


def feedback(*actions: tuple[str, int]) -> CriticFeedback:
    items = [RejectedAction(action=a, count=c, runs=1) for a, c in actions]
    return CriticFeedback(trajectories=4, failed=4, rejected_steps=sum(c for _, c in actions), actions=items)


def z8_files(root: Path) -> set[str]:
    return {p.name for p in root.glob("*.z8")}


# ---------------------------------------------------------------------------------------------- fixtures
@pytest.fixture(scope="module")
def family(tmp_path_factory) -> TextWorldFamily:
    fam = TextWorldFamily()
    fam.configure(games=tmp_path_factory.mktemp("tw_games"), workers=1)
    return fam


@pytest.fixture(scope="module")
def base(family):
    """(validated spec, build record) of BASE."""
    spec = family.validate(BASE)
    return spec, family.record(spec)


@pytest.fixture(scope="module")
def twin(family):
    spec = family.validate(TWIN)
    return spec, family.record(spec)


@pytest.fixture(scope="module")
def cli_game(tmp_path_factory) -> Path:
    """A game made by the real CLI, as a user would: `tw-make custom ... --output g.z8`."""
    out = tmp_path_factory.mktemp("tw_cli") / "g.z8"
    subprocess.run([sys.executable, str(TW_MAKE), "custom", "--world-size", "2", "--nb-objects", "3",
                    "--quest-length", "2", "--seed", "5", "--output", str(out), "-f", "--silent"],
                   check=True, capture_output=True, timeout=120)
    assert out.is_file() and out.with_suffix(".json").is_file()
    return out


@pytest.fixture(scope="module")
def refused(family, cli_game, tmp_path_factory):
    """A game file whose sidecar claims a walkthrough that does not win: the engine's verification
    refuses it. (No `custom` spec within the knob bounds was found that the generator refuses: the
    suggested world_size 1, nb_objects 1, quest_length 8 builds an 8-step game.)"""
    folder = tmp_path_factory.mktemp("tw_tampered")
    z8 = folder / "t.z8"
    shutil.copy(cli_game, z8)
    data = json.loads(cli_game.with_suffix(".json").read_text())
    data["metadata"]["walkthrough"] = ["look"]
    z8.with_suffix(".json").write_text(json.dumps(data))
    spec = {"game_file": str(z8)}
    with pytest.raises(SpecError, match="does not win"):
        family.record(spec)
    return spec


# ---------------------------------------------------------------------------------------------- 1. parse_spec
def test_parse_spec_fills_defaults_and_normalises():
    assert parse_spec({"seed": 1}) == {"generator": "custom", "knobs": {"nb_objects": 4, "quest_length": 2,
                                                                           "world_size": 2},
                                       "seed": 1, "step_limit": 20}
    partial = parse_spec({"knobs": {"world_size": 5}, "seed": 0, "step_limit": 7})
    assert partial["knobs"] == {"nb_objects": 4, "quest_length": 2, "world_size": 5} and partial["step_limit"] == 7
    assert list(partial["knobs"]) == sorted(partial["knobs"])  # knobs in a stable order
    assert parse_spec({"generator": "coin_collector", "seed": 2})["knobs"] == {"level": 1}
    assert parse_spec({"seed": 1, "objective": "  Find \n the   key. "})["objective"] == "Find the key."
    assert parse_spec({"game_file": "a/b.z8"}) == {"game_file": "a/b.z8", "step_limit": 20}
    assert parse_spec(parse_spec({"seed": 9})) == parse_spec({"seed": 9})  # idempotent


@pytest.mark.parametrize("spec, message", [
    ([1, 2], "must be a JSON object, got list"),
    ({"seed": 1, "rooms": 3}, r"unknown field\(s\) \['rooms'\]"),
    ({"generator": "zork", "seed": 1}, "unknown generator 'zork'"),
    ({"knobs": {"rooms": 3}, "seed": 1}, r"unknown knob\(s\) \['rooms'\] for generator 'custom'"),
    ({"knobs": {"level": 3}, "seed": 1}, r"unknown knob\(s\) \['level'\]"),
    ({"generator": "coin_collector", "knobs": {"world_size": 3}, "seed": 1}, r"unknown knob\(s\) \['world_size'\]"),
    ({"knobs": [2], "seed": 1}, "knobs must be a JSON object, got list"),
    ({"knobs": {"world_size": True}, "seed": 1}, "knob world_size must be an integer, got bool"),
    ({"knobs": {"nb_objects": "3"}, "seed": 1}, "knob nb_objects must be an integer, got str '3'"),
    ({"knobs": {"quest_length": 2.0}, "seed": 1}, "knob quest_length must be an integer, got float"),
    ({"knobs": {"world_size": 13}, "seed": 1}, r"knob world_size must be in \[1, 12\], got 13"),
    ({"knobs": {"nb_objects": 0}, "seed": 1}, r"knob nb_objects must be in \[1, 30\], got 0"),
    ({"knobs": {"quest_length": 9}, "seed": 1}, r"knob quest_length must be in \[1, 8\], got 9"),
    ({"generator": "treasure_hunter", "knobs": {"level": 31}, "seed": 1}, r"knob level must be in \[1, 20\]"),
    ({"knobs": {}}, "needs a 'seed'"),
    ({"seed": "7"}, "seed must be an integer, got str"),
    ({"seed": False}, "seed must be an integer, got bool"),
    ({"seed": -1}, r"seed must be in \[0, 2147483647\]"),
    ({"seed": 2**31}, r"seed must be in \[0, 2147483647\]"),
    ({"seed": 1, "step_limit": 0}, r"step_limit must be in \[1, 200\]"),
    ({"seed": 1, "step_limit": 201}, r"step_limit must be in \[1, 200\]"),
    ({"seed": 1, "step_limit": "20"}, "step_limit must be an integer"),
    ({"seed": 1, "objective": "x" * (MAX_OBJECTIVE_CHARS + 1)}, f"objective is {MAX_OBJECTIVE_CHARS + 1} characters"),
    ({"seed": 1, "objective": "   "}, "objective must be a non-empty string"),
    ({"seed": 1, "objective": 5}, "objective must be a non-empty string"),
    ({"game_file": "games/g.ulx"}, r"game_file must be a TextWorld \.z8 game, got 'games/g.ulx'"),
    ({"game_file": "games/g.json"}, r"must be a TextWorld \.z8 game"),
    ({"game_file": ""}, "game_file must be a non-empty path string"),
    ({"game_file": "g.z8", "seed": 3}, r"a game-file spec takes only .* got also \['seed'\]"),
])
def test_parse_spec_errors_name_the_problem(spec, message):
    with pytest.raises(SpecError, match=message):
        parse_spec(spec)


@pytest.mark.parametrize("generator", [["custom"], {"name": "custom"}])
def test_parse_spec_unhashable_generator_is_a_spec_error(generator):
    with pytest.raises(SpecError, match="unknown generator"):
        parse_spec({"generator": generator, "seed": 1})


def test_build_key_ignores_step_limit_but_not_seed_knobs_or_objective():
    spec = parse_spec(BASE)
    assert build_key(spec) == build_key(parse_spec({**BASE, "step_limit": 50}))
    assert build_key(spec) != build_key(parse_spec({**BASE, "seed": 4}))
    assert build_key(spec) != build_key(parse_spec({**BASE, "knobs": {"world_size": 3}}))
    assert build_key(spec) != build_key(parse_spec({**BASE, "objective": "Take the key."}))


# ---------------------------------------------------------------------------------------------- 2. GameCache
def test_build_writes_game_sidecar_and_index(family, base):
    spec, record = base
    root = family.cache.root
    content = record["content"]
    assert record["file"] == f"{content}.z8"
    assert (root / f"{content}.z8").stat().st_size > 0
    data = json.loads((root / f"{content}.json").read_text())
    assert game_content_hash(data) == content
    index = root / "index" / f"{build_key(spec)}.json"
    assert json.loads(index.read_text()) == record
    assert record["rooms"] == 2 and record["objects"] >= 1
    assert record["walkthrough"] and record["objective"]
    assert family.game_file(spec) == root / f"{content}.z8"
    assert not list(root.glob(".build-*")) and not list(root.glob(".*.z8.*"))  # no leftovers of the build


def test_second_get_does_not_rebuild(family, base, monkeypatch):
    spec, record = base
    root = family.cache.root
    files = [root / record["file"], (root / record["file"]).with_suffix(".json"), family.cache.index_file(spec)]
    mtimes = [p.stat().st_mtime_ns for p in files]

    def no_build(_spec):
        raise AssertionError("the cache rebuilt a cached game")

    monkeypatch.setattr(family.cache, "_build", no_build)
    assert family.cache.get(BASE) == record
    assert GameCache(root).get(dict(BASE)) == record  # a fresh cache object on the same folder, too
    assert [p.stat().st_mtime_ns for p in files] == mtimes


def test_specs_differing_in_step_limit_share_one_game(family, base, monkeypatch):
    spec, record = base
    before = z8_files(family.cache.root)
    monkeypatch.setattr(family.cache, "_build", lambda _s: pytest.fail("built again for another step_limit"))
    longer = family.validate({**BASE, "step_limit": 40})
    assert longer["step_limit"] == 40
    assert family.record(longer) == record
    assert family.game_file(longer) == family.game_file(spec)
    assert family.content_hash(longer) == family.content_hash(spec)
    assert z8_files(family.cache.root) == before


def test_content_hash_is_of_the_game_not_of_the_seed(family, base):
    spec, record = base
    # the same seed makes the same game: generating again gives the same content
    assert game_content_hash(generate_game(spec).serialize()) == record["content"]
    # the hash ignores the metadata (uuid, seeds, walkthrough), which is not what is played
    data = json.loads((family.cache.root / f"{record['content']}.json").read_text())
    data["metadata"] = {"uuid": "tw-something-else", "seeds": {"map": 1}, "walkthrough": []}
    assert game_content_hash(data) == record["content"]
    data["objective"] = data["objective"] + " Quickly."
    assert game_content_hash(data) != record["content"]  # ... but not the objective


def test_other_seed_other_game_and_deleted_game_is_rebuilt(family, base):
    other = family.validate({**BASE, "seed": 4})
    content = family.content_hash(other)
    assert content != base[1]["content"]  # another seed normally makes another game
    game = family.cache.root / f"{content}.z8"
    game.unlink()
    assert family.cache.lookup(other) is None  # the index entry no longer counts
    assert family.record(other)["content"] == content and game.is_file()  # rebuilt, the same game


def test_refused_spec_is_recorded_and_not_rebuilt(family, refused, monkeypatch):
    index = family.cache.index_file(refused)
    recorded = json.loads(index.read_text())
    assert set(recorded) == {"error"} and "does not win" in recorded["error"]
    monkeypatch.setattr(family.cache, "_build", lambda _s: pytest.fail("a refused spec was rebuilt"))
    with pytest.raises(SpecError, match="does not win"):
        family.cache.get(refused)
    with pytest.raises(SpecError, match="does not win"):
        family.validate(refused)


def test_prepare_skips_cached_and_refused_specs(family, base, refused, monkeypatch):
    monkeypatch.setattr(family.cache, "_build", lambda _s: pytest.fail("prepare rebuilt a cached spec"))
    counts = family.prepare([BASE, {**BASE, "step_limit": 30}, refused])
    assert counts == {"cached": 2, "built": 0, "refused": 0}


# ---------------------------------------------------------------------------------------------- 3. validate
def test_validate_normalises_and_checks_limits(family, base):
    spec, record = base
    assert spec == parse_spec(BASE) and spec["step_limit"] == 20
    steps = len(record["walkthrough"])
    assert steps == 2
    assert family.validate(BASE, horizon=steps) == spec
    assert family.validate({**BASE, "step_limit": steps}) == {**spec, "step_limit": steps}
    with pytest.raises(SpecError, match=f"step_limit={steps - 1}: the walkthrough has {steps} steps"):
        family.validate({**BASE, "step_limit": steps - 1})
    with pytest.raises(SpecError, match=f"horizon of {steps - 1} turns: the walkthrough has {steps} steps"):
        family.validate(BASE, horizon=steps - 1)
    assert family.difficulty(BASE) == float(steps)
    assert family.knobs_of(BASE) == {"generator": "custom", **BASE["knobs"]}


def test_rewrite_context_and_schema(family, base):
    spec, record = base
    context = family.rewrite_context(spec)
    assert f"Walkthrough: {len(record['walkthrough'])} steps." in context
    assert json.dumps(family.knobs_of(spec)) in context
    assert f"Goal: {clean_goal(record['objective'], family.goal_chars)}\n" in context
    assert "world_size" in family.describe_schema() and "game_file" in family.describe_schema()


def test_draft_draws_from_lists_and_pool_without_building(family):
    rng = random.Random(0)
    drafts = [family.draft({"world_size": [1, 3], "quest_length": 4, "step_limit": 30}, rng) for _ in range(20)]
    assert {d["knobs"]["world_size"] for d in drafts} == {1, 3}
    assert all(d["knobs"]["quest_length"] == 4 and d["step_limit"] == 30 for d in drafts)
    assert all(parse_spec(d) == d for d in drafts)
    pooled = {json.dumps(family.draft({"pool": 2}, random.Random(s)), sort_keys=True) for s in range(30)}
    assert len(pooled) == 2
    with pytest.raises(SpecError, match="unknown textworld knob"):
        family.draft({"rooms": 3}, rng)
    with pytest.raises(SpecError, match=r"knob world_size must be in \[1, 12\]"):
        family.draft({"world_size": 40}, rng)


# ---------------------------------------------------------------------------------------------- 4. Episode
def test_reset_text_is_cleaned(family, base):
    spec, record = base
    episode = family.make(spec)
    assert isinstance(episode, Episode)
    text = episode.reset()
    raw = episode._state["feedback"]
    assert "$$$$" in raw and record["objective"] in raw  # what the engine sends ...
    assert "$$" not in text and "________" not in text  # ... without the ASCII banner
    assert record["objective"] not in text and record["objective"][:40] not in text  # ... nor the objective
    assert not text.rstrip().endswith(">") and "\n>" not in text  # ... nor the prompt and status line
    assert "\n\n" not in text and text == text.strip()
    assert text.startswith("-= ") and len(text) <= family.observation_chars
    # the goal is the objective without the grammar's greeting and sign-off, every instruction kept
    assert episode.goal == clean_goal(record["objective"], family.goal_chars)
    assert episode.goal and "TextWorld" not in episode.goal and len(episode.goal) < len(record["objective"])
    assert all(sentence in record["objective"] for sentence in episode.goal.split(". "))
    assert "latchkey" in episode.goal  # (BASE asks to take the latchkey and unlock the safe)


def test_walkthrough_wins_with_oracle_and_progress_labels(family, base):
    spec, record = base
    walkthrough = record["walkthrough"]
    episode = family.make(spec)
    episode.reset()
    for index, command in enumerate(walkthrough):
        commands = episode.admissible_commands()
        assert commands and commands == sorted(commands)
        assert command in commands
        plan = episode.oracle_plan()
        assert len(plan) == len(walkthrough) - index
        assert plan == walkthrough[index:]
        assert episode.is_progress(command)
        assert episode.is_progress(f"  {command.replace(' ', '   ')} ")  # whitespace is normalised
        for idle in ("look", "inventory"):
            assert idle in commands and not episode.is_progress(idle)
        assert not episode.is_progress("dance")
        outcome = episode.step(command)
        assert outcome.observation and outcome.observation != NOTHING
        assert outcome.done == (index == len(walkthrough) - 1)
    assert outcome.won and episode.won and episode.done and episode.steps == len(walkthrough)
    assert episode.admissible_commands() == [] and episode.oracle_plan() == []
    assert not episode.is_progress(walkthrough[0])
    assert episode.step("look") == type(outcome)(OVER, True, True)
    # reset starts the game again
    again = episode.reset()
    assert episode.steps == 0 and not episode.won and not episode.done
    assert episode.oracle_plan() == walkthrough and again.startswith("-= ")
    episode.close()


def test_idle_commands_do_not_shorten_the_plan(family, base):
    spec, record = base
    episode = family.make(spec)
    episode.reset()
    plan = episode.oracle_plan()
    first = episode.admissible_commands()
    outcome = episode.step("inventory")
    assert not outcome.done and outcome.observation != NOTHING
    assert episode.oracle_plan() == plan and episode.admissible_commands() == first


def test_inadmissible_command_changes_nothing_but_counts(family, base):
    spec, _ = base
    episode = family.make(spec)
    episode.reset()
    before, plan = episode.admissible_commands(), episode.oracle_plan()
    outcome = episode.step("dance with the grue")
    assert outcome.observation == NOTHING and not outcome.done and not outcome.won
    assert episode.steps == 1
    assert episode.admissible_commands() == before and episode.oracle_plan() == plan


def test_step_limit_ends_the_episode(family, base):
    spec, record = base
    limit = len(record["walkthrough"])
    episode = family.make({**BASE, "step_limit": limit})
    episode.reset()
    for number in range(1, limit + 1):
        outcome = episode.step("look" if number % 2 else "xyzzy")  # admissible and not: both count
        assert outcome.done == (number == limit)
    assert not outcome.won and not episode.won and episode.done
    assert episode.admissible_commands() == []
    assert episode.step(record["walkthrough"][0]).observation == OVER
    assert not episode.is_progress(record["walkthrough"][0])


def test_clean_text_caps_length_and_cleans():
    text = clean_text("word " * 300, 50)
    assert len(text) == 50 and text.endswith("…")
    assert clean_text("Intro.\n\nGoal here.\n\n-= Room =-\n  A   table.\n\n\n>  status 0/1", 100, "Goal here.") \
        == "-= Room =-\nA table."
    assert clean_text("\n\n>  ", 100) == NOTHING


def test_clean_goal_drops_greeting_and_sign_off():
    objective = ("Welcome to TextWorld! Here is how to play! First, take the key from the  table. "
                 "Then, unlock the box. That's it!")
    assert clean_goal(objective, 400) == "First, take the key from the table. Then, unlock the box."
    assert clean_goal("Welcome to TextWorld!", 400) == "Welcome to TextWorld!"  # nothing else: kept
    assert clean_goal(objective, 20) == "First, take the key…"


def test_observation_cap_applies_to_episodes(family, base):
    spec, record = base
    episode = TextWorldEpisode(family.game_file(spec), 20, record["objective"], max_chars=30, goal_chars=25)
    first = episode.reset()
    assert len(first) <= 30 and first.endswith("…")
    assert len(episode.goal) <= 25 and episode.goal.endswith("…")
    assert all(len(episode.step(c).observation) <= 30 for c in record["walkthrough"])
    assert episode.won


# ---------------------------------------------------------------------------------------------- 5. rewriter
def test_configure_without_caps_gives_the_defaults_not_an_earlier_runs(tmp_path):
    """The family is one per process: binding a run with no caps after one with caps must not keep them."""
    fam = TextWorldFamily()
    fam.configure(games=tmp_path, workers=1, observation_chars=200, goal_chars=90)
    assert (fam.observation_chars, fam.goal_chars) == (200, 90)
    fam.configure(games=tmp_path, workers=1)
    assert (fam.observation_chars, fam.goal_chars) == (TextWorldFamily.observation_chars, TextWorldFamily.goal_chars)
    assert (fam.observation_chars, fam.goal_chars) == (400, 400)


def test_feedback_buckets_and_knob_order():
    counts, examples = rewriter.classify_feedback(feedback(("go east", 3), ("Take key", 2), ("go west", 2),
                                                           (NO_ACTION, 1), ("frobnicate", 9)))
    assert counts == {"navigation": 5, "objects": 2, "long quests": 1}
    assert examples["navigation"] == "go east"
    assert rewriter.knob_order("custom", counts) == [("world_size", "navigation"), ("quest_length", "navigation"),
                                                     ("nb_objects", "objects")]
    assert rewriter.knob_order("custom", rewriter.classify_feedback(feedback())[0]) == [
        ("quest_length", None), ("nb_objects", None), ("world_size", None)]
    assert rewriter.knob_order("coin_collector", counts) == [("level", "navigation")]
    assert rewriter.turn_knob("nb_objects", 29, "harder") == 30
    assert rewriter.turn_knob("nb_objects", 30, "harder") is None
    assert rewriter.turn_knob("nb_objects", 3, "easier") == 1 and rewriter.turn_knob("world_size", 1, "easier") is None


def test_adjust_navigation_harder_turns_world_size(family, base):
    spec, _ = base
    new, adjustment = family.adjust(spec, "harder", feedback(("go east", 6), ("take key", 1)), random.Random(1))
    assert (adjustment.knob, adjustment.before, adjustment.after) == ("world_size", 2, 3)
    assert adjustment.evidence == "navigation" and adjustment.from_feedback and "6/7" in adjustment.reason
    assert new["knobs"] == {**spec["knobs"], "world_size": 3} and new["step_limit"] == spec["step_limit"]
    assert family.validate(new) == new
    assert family.record(new)["rooms"] == 3
    assert family.difficulty(new) >= family.difficulty(spec)


def test_adjust_wandering_harder_turns_quest_length(family, base):
    spec, _ = base
    new, adjustment = family.adjust(spec, "harder", feedback((NO_ACTION, 3), ("look", 2), ("go east", 1)),
                                    random.Random(2))
    assert (adjustment.knob, adjustment.before, adjustment.after) == ("quest_length", 2, 3)
    assert adjustment.evidence == "long quests"
    assert new["knobs"] == {**spec["knobs"], "quest_length": 3}
    assert family.validate(new) == new
    assert family.difficulty(new) >= family.difficulty(spec)


def test_adjust_objects_easier_turns_nb_objects(family, twin):
    spec, _ = twin
    new, adjustment = family.adjust(spec, "easier", feedback(("take box", 4), ("open box", 2)), random.Random(3))
    assert (adjustment.knob, adjustment.before, adjustment.after) == ("nb_objects", 3, 1)
    assert adjustment.evidence == "objects"
    assert new["knobs"] == {**spec["knobs"], "nb_objects": 1}
    assert family.validate(new) == new
    assert family.difficulty(new) <= family.difficulty(spec)


def test_adjust_knob_at_bound_passes_to_the_next(family, base):
    spec, _ = base  # nb_objects is at its lower bound 1: the objects bucket falls to quest_length
    new, adjustment = family.adjust(spec, "easier", feedback(("take key", 5)), random.Random(4))
    assert (adjustment.knob, adjustment.before, adjustment.after) == ("quest_length", 2, 1)
    assert adjustment.evidence == "objects"
    assert new["knobs"] == {**spec["knobs"], "quest_length": 1}
    assert family.validate(new) == new
    assert family.difficulty(new) <= family.difficulty(spec) and family.difficulty(new) == 1.0


def test_adjust_refuses_game_files_and_bad_directions(family, cli_game):
    with pytest.raises(SpecError, match="game-file task has no generator knobs"):
        family.adjust({"game_file": str(cli_game)}, "harder", feedback(), random.Random(0))
    with pytest.raises(ValueError, match="direction must be 'harder' or 'easier'"):
        family.adjust(BASE, "sideways", feedback(), random.Random(0))


# ---------------------------------------------------------------------------------------------- 6. answers
def test_generator_answer_round_trips(family, base, twin):
    for spec, _ in (base, twin):
        answer = json.loads(family.generator_answer(spec))
        assert answer == {"knobs": {"generator": "custom", **spec["knobs"], "step_limit": spec["step_limit"]},
                          "seed": spec["seed"]}
        assert family.spec_from_answer(answer) == spec
    # a full spec is validated as by `validate`
    assert family.spec_from_answer(dict(BASE)) == base[0]
    # the generator form without a generator is a custom game
    assert family.spec_from_answer({"knobs": dict(BASE["knobs"]), "seed": 3}) == base[0]
    with pytest.raises(SpecError, match="horizon of 1 turns"):
        family.spec_from_answer(json.loads(family.generator_answer(base[0])), horizon=1)


def test_generator_answer_round_trips_a_non_default_step_limit(family, base):
    spec = family.validate({**BASE, "step_limit": 30})
    assert family.spec_from_answer(json.loads(family.generator_answer(spec))) == spec


def test_a_spec_with_its_own_objective_is_answered_as_the_full_spec(family):
    spec = parse_spec({**BASE, "objective": "Open the box, then close it."})
    assert json.loads(family.generator_answer(spec)) == spec


@pytest.mark.parametrize("answer, message", [
    ({"knobs": [2, 1, 2], "seed": 3}, "knobs must be a JSON object, got list"),
    ({"knobs": {"generator": "zork"}, "seed": 3}, "unknown generator 'zork'"),
    ({"knobs": {"world_size": 2}, "seed": "3"}, "seed must be an integer, got str"),
    ({"knobs": {"world_size": "2"}, "seed": 3}, "knob world_size must be an integer, got str"),
    ({"knobs": {"world_size": 2, "rooms": 1}, "seed": 3}, r"unknown knob\(s\) \['rooms'\]"),
    ({"knobs": {"generator": "coin_collector", "level": 0}, "seed": 3}, r"knob level must be in \[1, 20\]"),
    ({"knobs": {}, "seed": 3, "extra": 1}, r"unknown field\(s\) \['extra'\]"),
    ([1], "an answer must be a JSON object, got list"),
    ({}, "needs a 'seed'"),
])
def test_malformed_answers_are_spec_errors(family, answer, message):
    with pytest.raises(SpecError, match=message):
        family.spec_from_answer(answer)


def test_answer_with_unhashable_generator_is_a_spec_error(family):
    with pytest.raises(SpecError):
        family.spec_from_answer({"knobs": {"generator": ["custom"]}, "seed": 3})


# ---------------------------------------------------------------------------------------------- 7. tw-make games
def test_cli_game_is_accepted_and_matches_the_family_build(family, cli_game, twin):
    spec = family.validate({"game_file": str(cli_game)})
    assert spec == {"game_file": str(cli_game), "step_limit": 20}
    record = family.record(spec)
    assert record["file"] == str(cli_game.resolve())
    assert family.game_file(spec) == cli_game.resolve()
    assert family.knobs_of(spec) == {}
    # the CLI and the family make the same game from the same knobs and seed
    assert family.content_hash(spec) == twin[1]["content"]
    assert record["walkthrough"] == twin[1]["walkthrough"]
    episode = family.make(spec)
    assert episode.game_file == str(cli_game.resolve())
    episode.reset()
    for command in record["walkthrough"]:
        assert episode.is_progress(command)
        outcome = episode.step(command)
    assert outcome.done and outcome.won


def test_game_file_without_sidecar_or_missing(family, cli_game, tmp_path):
    lone = tmp_path / "lone.z8"
    shutil.copy(cli_game, lone)
    with pytest.raises(SpecError, match=r"no lone\.json beside it"):
        family.validate({"game_file": str(lone)})
    with pytest.raises(SpecError, match="game file not found"):
        family.validate({"game_file": str(tmp_path / "absent.z8")})


def test_game_file_walkthrough_longer_than_step_limit(family, cli_game):
    with pytest.raises(SpecError, match="step_limit=1: the walkthrough has 2 steps"):
        family.validate({"game_file": str(cli_game), "step_limit": 1})


# ---------------------------------------------------------------------------------------------- objectives
@pytest.mark.parametrize("objective", ['Find the "key" now.', "Take the key [now].", "Say 'hi'."])
def test_objectives_inform7_would_rewrite_are_spec_errors(objective):
    with pytest.raises(SpecError, match="objective may hold letters, digits"):
        parse_spec({**BASE, "objective": objective})


def test_a_game_that_does_not_compile_is_a_recorded_spec_error(family, monkeypatch):
    """Inform 7's compile error becomes a SpecError, recorded in the index like every refusal."""
    from textworld.generator import CouldNotCompileGameError

    def broken(game, options):
        raise CouldNotCompileGameError("Inform 7 said no\n*** Problem: a sentence it cannot read")

    monkeypatch.setattr("textworld.generator.compile_game", broken)
    spec = {**BASE, "seed": 991}
    with pytest.raises(SpecError, match="Inform 7 cannot compile this game: \\*\\*\\* Problem"):
        family.validate(spec)
    assert "error" in json.loads(family.cache.index_file(parse_spec(spec)).read_text())


def test_the_reset_text_is_cut_at_the_room_header_whatever_the_objective_says(family, base):
    """The banner is cut at the first room header, not by finding the objective verbatim."""
    spec, record = base
    episode = family.make(spec)
    episode.objective = "a text that is not in the game"
    text = episode.reset()
    assert text.startswith("-= ") and "$$" not in text


# ---------------------------------------------------------------------------------------------- 8. registry
def test_family_is_registered():
    family = get_environment("textworld")
    assert isinstance(family, TextWorldFamily) and family is TEXTWORLD and family.name == "textworld"
