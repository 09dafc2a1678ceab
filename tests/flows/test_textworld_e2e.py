"""The TextWorld setting end to end on micro sizes: `configs/textworld.yaml` through the real training flow
(Prefect test harness, MLflow, DVC, the gates), one iteration on real games built by TextWorld 1.7, then
`rla eval --games` on a folder of games made by the real `tw-make` CLI, with that run's models.

Asserts: every stage is done; the held-out games are not among the training games; the run's `games/`
cache is content-addressed and DVC-tracked; the rollout trajectories replay step for step through the
engine (clean first observations, admissible actions, the engine's progress labels); the adaptation
turned TextWorld knobs; a re-run resumes, changes no file and builds no game; the per-tier game
evaluation (Wilson intervals, skipped games with their reason, files, MLflow metrics) and its bad inputs.

Game builds (~1 s each): at most the 16 pool drafts, the adaptation's rewrites (about 25 in all) and 4
`tw-make` games (plus, when the config names a `textworld.games_archive`, the shipped games it unpacks)."""
from __future__ import annotations

import hashlib
import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from flows.rl_iteration import ITERATION
from flows.train import train
from rla_core.adaptation.store import TaskStore
from rla_core.config import PROJECT_ROOT, load_config
from rla_core.envs.base import get_environment
from rla_core.errors import BadValue, MissingFile
from rla_core.rollout.runner import INVALID
from rla_core.schemas import Task, Trajectory
from tasks.common import bind_environment
from tasks.reports.game_eval import evaluate_games as play_games
from rla_core.stats import wilson
from tasks.paths import RunPaths, run_config
from tasks.storage.reproduce import version_start
from tasks.stages.setup import bootstrap, init_models, seed
from tasks.stages.evaluation import baseline
from tasks.storage.files import done_summary, read_json, read_records
from tasks.tracking.tracker import read_metrics
from tests.flows.conftest import MICRO

# Jericho warns that it does not know TextWorld's games (no score/move detection); the family does not use those
pytestmark = pytest.mark.filterwarnings("ignore:Game .* is not fully supported")

CONFIG = str(PROJECT_ROOT / "configs" / "textworld.yaml")
TW_MAKE = Path(sys.executable).parent / "tw-make"
TASKS, N, SLOTS, HELDOUT = 3, 2, 8, 4
KNOBS = ("world_size", "nb_objects", "quest_length")
TEXTWORLD_MICRO = [o for o in MICRO if o.startswith("models.")] + [
    "run.iterations=1", "run.eval_every=1",
    f"environment.train_slots={SLOTS}",
    "environment.knobs={world_size: [1, 2], nb_objects: [2], quest_length: [1, 2], pool: 24}",
    "environment.heldout_file=null", f"environment.heldout_tasks={HELDOUT}", "environment.reserved_files=[]",
    f"rollout.tasks_per_iteration={TASKS}", f"rollout.n={N}",
    "bootstrap.demos=6", "bootstrap.corpus_walks=6", "bootstrap.corpus_specs=2", "bootstrap.corpus_rewrites=2",
    # a warm-start just long enough that the micro policy answers admissible commands (10 steps: never)
    "bootstrap.policy_steps=60", "bootstrap.lr=0.01", "bootstrap.judge_steps=10", "bootstrap.batch_size=8",
    "eval.episodes_per_task=1", "eval.greedy_at_end=false", "textworld.workers=2",
    # no dev split: the shipped dev games would be reserved and played (the dev evaluation is the household's
    # code, tested end to end there and in the coding run)
    "eval.dev_file=null", "eval.dev_judge_benchmark=null",
    "judge.m=2", "judge.max_new_tokens=16", "train.max_optimizer_steps=2", "train.minibatch_size=64",
]
RUN_STAGES = (seed, init_models, bootstrap, baseline, version_start)
GAME_NAME = re.compile(r"^[0-9a-f]{16}\.z8$")


def _overrides(out) -> list[str]:
    return TEXTWORLD_MICRO + [f"run.output_dir={out}"]


@pytest.fixture(scope="module")
def tw_run(harness, tmp_path_factory):
    out = tmp_path_factory.mktemp("textworld_runs")
    result = train([CONFIG], _overrides(out))
    return RunPaths.of(result["run_dir"]), result, out


@pytest.fixture()
def family(tw_run):
    """The registered TextWorld family, pointed at the run's games/ as every stage points it."""
    paths, _, _ = tw_run
    bind_environment(run_config(paths.root), paths.root)
    return get_environment("textworld")


def test_every_stage_of_the_iteration_is_done(tw_run):
    paths, result, _ = tw_run
    assert run_config(paths.root).environment.name == "textworld"
    assert paths.completed_iterations() == [1] and sorted(result["iterations"]) == [1]
    for stage in ITERATION:
        assert (paths.stage(1, stage.name) / "_DONE").is_file(), stage.name
    assert done_summary(paths.stage(1, "evaluate"))["evaluated"] is True  # eval_every 1
    assert read_json(paths.it(1).eval_metrics)["heldout/episodes"] == HELDOUT


def test_heldout_games_are_not_training_games(tw_run, family):
    paths, _, _ = tw_run
    heldout = read_records(paths.heldout, Task)
    train_tasks = [slot.root for slot in TaskStore.load(paths.seed_store).slots()]
    assert len(heldout) == HELDOUT and len(train_tasks) == SLOTS
    assert all(t.env == "textworld" for t in heldout + train_tasks)
    held = {family.content_hash(t.spec) for t in heldout}
    trained = {family.content_hash(t.spec) for t in train_tasks}
    assert len(held) == HELDOUT and len(trained) == SLOTS  # distinct games within each split
    assert held.isdisjoint(trained)
    assert set(read_json(paths.reserved)) == held
    # and no task the iteration rolled out (seed slots or rewrites) plays a held-out game
    rolled = read_records(paths.it(1).tasks, Task)
    assert held.isdisjoint(family.content_hash(t.spec) for t in rolled)


def test_games_folder_is_content_addressed_and_dvc_tracked(tw_run, family):
    paths, _, _ = tw_run
    games = sorted(paths.games.glob("*.z8"))
    assert games and all(GAME_NAME.match(g.name) for g in games), [g.name for g in games]
    assert all(g.with_suffix(".json").is_file() for g in games)
    records = [json.loads(p.read_text()) for p in sorted((paths.games / "index").glob("*.json"))]
    built = [r for r in records if "error" not in r]
    assert len(built) >= len(games)
    for record in built:
        assert (paths.games / record["file"]).is_file(), record
        assert record["file"] == f"{record['content']}.z8"
    assert {r["file"] for r in built} == {g.name for g in games}
    for task in read_records(paths.heldout, Task) + read_records(paths.it(1).tasks, Task):
        assert family.game_file(task.spec).parent == paths.games
    assert (paths.root / "games.dvc").is_file()  # DVC-tracked by the commit stage, beside games/
    assert "games" in (paths.root / "games.dvc").read_text()


def test_rollout_trajectories_replay_through_the_engine(tw_run, family):
    paths, _, _ = tw_run
    tasks = {t.task_id: t for t in read_records(paths.it(1).tasks, Task)}
    trajectories = read_records(paths.it(1).trajectories, Trajectory)
    assert len(trajectories) == len(tasks) * N and len(tasks) >= TASKS
    played = 0
    for trajectory in trajectories:
        first = trajectory.initial_observation
        assert "$$" not in first and first.startswith("-= "), first
        assert trajectory.steps
        episode = family.make(tasks[trajectory.task_id].spec)
        assert episode.reset() == first and episode.goal == trajectory.goal
        for step in trajectory.steps:
            assert isinstance(step.oracle_good, bool), step
            if step.action is not None:
                assert step.action in episode.admissible_commands(), (step.action, episode.admissible_commands())
                assert step.oracle_good == episode.is_progress(step.action)
                played += 1
            else:
                assert step.oracle_good is False
            assert episode.step(step.action or INVALID).observation == step.observation
        assert episode.won == trajectory.success
        episode.close()
    assert played > 0, "the policy never answered an admissible command"


def test_adaptation_turned_textworld_knobs(tw_run, family):
    paths, _, _ = tw_run
    report = read_json(paths.it(1).adapt_report)
    proposals = report["proposals"]
    assert proposals, report
    made = [p for p in proposals if p["candidate_id"]]
    assert made, proposals
    assert all(p["knob"] in KNOBS for p in made), proposals
    pending = {c.task.task_id: c for c in TaskStore.load(paths.it(1).store).pending()}
    parents = {t.task_id: t for t in read_records(paths.it(1).tasks, Task)}
    for proposal in made:
        candidate = pending[proposal["candidate_id"]].task
        parent = parents[proposal["task_id"]]
        changed = {k for k in KNOBS if candidate.spec["knobs"][k] != parent.spec["knobs"][k]}
        assert changed == {proposal["knob"]}, (proposal, candidate.spec, parent.spec)
        assert family.validate(candidate.spec) == candidate.spec


# bookkeeping a re-run rewrites: the run lock and MLflow's store (the training run is re-opened and closed)
def _tree(root: Path) -> dict[str, str]:
    return {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(root.rglob("*"))
            if p.is_file() and p.name != ".rla.lock" and not p.name.startswith("mlflow.db")}


def test_rerun_resumes_changes_no_file_and_builds_no_game(tw_run, monkeypatch):
    paths, first, out = tw_run
    before = _tree(paths.root)
    assert sum(k.startswith("games/") for k in before) > 10 and any(k.startswith("iterations/") for k in before)

    def no_build(self, spec):
        raise AssertionError(f"the re-run built a game: {spec}")

    monkeypatch.setattr("rla_core.envs.textworld.games.GameCache._build", no_build)
    again = train([CONFIG], _overrides(out))
    assert again["run_dir"] == first["run_dir"] and again["iterations"] == {}
    assert again["baseline"] == first["baseline"]
    run_dir = str(paths.root)
    for stage in RUN_STAGES:
        assert stage.run_here(run_dir)["resumed"] is True, stage.name
    for stage in ITERATION:
        assert stage.run_here(run_dir, 1) == {**done_summary(paths.stage(1, stage.name)), "resumed": True}, stage.name
    after = _tree(paths.root)
    assert sorted(k for k in set(before) | set(after) if before.get(k) != after.get(k)) == []


def test_warmstart_bench_trains_what_bootstrap_trains_on_the_runs_games(tw_run, tmp_path, monkeypatch):
    """`rla bench policy-warmstart` in a fresh process: its checkpoint at bootstrap.policy_steps is the run's
    warm-started policy, weight for weight, read from the run's games with the run's caps on the texts (it
    once used the family's defaults: 400-character observations where the run has 200, a game cache outside
    the run). The micro run has no dev split, so the check for one is skipped and nothing is scored."""
    from safetensors.torch import load_file

    from rla_bench import warmstart
    from rla_core.envs.base import ENVIRONMENTS
    from rla_core.envs.textworld.family import CACHE_ENV, TextWorldFamily

    paths, _, _ = tw_run
    steps = run_config(paths.root).bootstrap.policy_steps
    monkeypatch.setitem(ENVIRONMENTS._entries, "textworld", TextWorldFamily())  # as a new process has it
    monkeypatch.setenv(CACHE_ENV, str(tmp_path / "default-cache"))
    monkeypatch.setattr(warmstart, "_check_dev", lambda *args: None)

    def no_build(self, spec):
        raise AssertionError(f"the bench built a game the run has: {spec}")

    monkeypatch.setattr("rla_core.envs.textworld.games.GameCache._build", no_build)
    rows = warmstart.warm_start(paths.root, "policy", "policy", [steps], [], tmp_path / "work", lambda *args: {})
    assert [row["steps"] for row in rows] == [steps]
    own = load_file(paths.bootstrap / "policy" / "model.safetensors")
    mine = load_file(tmp_path / "work" / "policy" / f"step{steps}" / "model.safetensors")
    assert mine.keys() == own.keys() and all(mine[k].equal(own[k]) for k in own)


def test_heldout_policy_checkpoint_replays_the_baseline_on_the_runs_games(tw_run, tmp_path, monkeypatch):
    """bench/heldout_policy_checkpoint.py in a fresh process, on a TextWorld run: at the run's eval.temperature
    it plays the baseline evaluation's held-out episodes byte for byte, on the run's games with the run's caps
    (it once played with the family's defaults: 400-character observations where the run has 200)."""
    import importlib.util

    from rla_core.envs.base import ENVIRONMENTS
    from rla_core.envs.textworld.family import CACHE_ENV, TextWorldFamily

    paths, _, _ = tw_run
    cfg = run_config(paths.root)
    assert cfg.textworld.observation_chars != TextWorldFamily.observation_chars  # the caps matter here
    monkeypatch.setitem(ENVIRONMENTS._entries, "textworld", TextWorldFamily())  # as a new process has it
    monkeypatch.setenv(CACHE_ENV, str(tmp_path / "default-cache"))
    spec = importlib.util.spec_from_file_location("heldout_policy", PROJECT_ROOT / "bench" / "heldout_policy_checkpoint.py")
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    out = tmp_path / "sampled"
    assert script.main(["--run", str(paths.root), "--temperature", str(cfg.eval.temperature), "--out-dir", str(out)]) == 0
    assert (out / "heldout_trajectories.jsonl").read_bytes() == \
        (paths.root / "baseline" / "heldout_trajectories.jsonl").read_bytes()


# ---------------------------------------------------------------------------------------- rla eval --games
TIERS = {"easy": (1, 2, 1, [21, 22]), "medium": (2, 3, 2, [23]), "hard": (3, 4, 3, [24])}


def tw_make(world_size: int, nb_objects: int, quest_length: int, seed: int, out: Path) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, str(TW_MAKE), "custom", "--world-size", str(world_size),
                             "--nb-objects", str(nb_objects), "--quest-length", str(quest_length), "--seed", str(seed),
                             "--output", str(out), "-f", "--silent"],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT)


@pytest.fixture(scope="module")
def tiers(tmp_path_factory) -> Path:
    """tiers/{easy,medium,hard}/*.z8 made by the real CLI, plus tiers/easy/lone.z8 without its sidecar."""
    folder = tmp_path_factory.mktemp("tw_eval") / "tiers"
    jobs = []
    for tier, (world, objects, quest, seeds) in TIERS.items():
        (folder / tier).mkdir(parents=True)
        jobs += [(tw_make(world, objects, quest, s, folder / tier / f"g{s}.z8"), folder / tier / f"g{s}.z8")
                 for s in seeds]
    for process, path in jobs:
        output, _ = process.communicate(timeout=180)
        assert process.returncode == 0, output.decode()
        assert path.is_file() and path.with_suffix(".json").is_file()
    shutil.copy(folder / "easy" / "g21.z8", folder / "easy" / "lone.z8")
    return folder


@pytest.fixture(scope="module")
def game_eval(tw_run, tiers, tmp_path_factory):
    from flows.commands import evaluate_games

    paths, _, out = tw_run
    target = tmp_path_factory.mktemp("tw_eval_out") / "out.json"
    assert evaluate_games([CONFIG], _overrides(out), None, str(tiers), 1, 0.0, out=str(target)) == 0
    return paths, json.loads(target.read_text())


def test_game_eval_reports_every_tier_with_wilson_intervals(game_eval, tiers):
    _, result = game_eval
    rows = result["tiers"]
    assert set(rows) == {"easy", "medium", "hard", "all"}
    assert (rows["easy"]["games"], rows["medium"]["games"], rows["hard"]["games"]) == (2, 1, 1)
    assert rows["all"]["games"] == sum(rows[t]["games"] for t in TIERS) == 4
    assert rows["all"]["episodes"] == sum(rows[t]["episodes"] for t in TIERS) == 4  # 1 episode per game
    for tier, row in rows.items():
        assert 0.0 <= row["success_low"] < row["success_high"] <= 1.0, (tier, row)  # 1-2 episodes: a wide interval
        assert row["success_low"] <= row["success_rate"] <= row["success_high"], (tier, row)
        wins = round(row["success_rate"] * row["episodes"])
        assert (row["success_low"], row["success_high"]) == pytest.approx(wilson(wins, int(row["episodes"])))
        assert 1 <= row["mean_steps"] <= 10
    # the walkthrough lengths of the tiers are the quest lengths tw-make was asked for
    assert (rows["easy"]["walkthrough_steps"], rows["medium"]["walkthrough_steps"],
            rows["hard"]["walkthrough_steps"]) == (1.0, 2.0, 3.0)
    assert (result["iteration"], result["episodes_per_game"], result["temperature"]) == (1, 1, 0.0)
    assert result["games_dir"] == str(tiers.resolve())


def test_game_eval_lists_the_game_without_sidecar_as_skipped(game_eval, tiers):
    _, result = game_eval
    assert len(result["skipped"]) == 1
    [skipped] = result["skipped"]
    assert Path(skipped["game"]).resolve() == (tiers / "easy" / "lone.z8").resolve()
    assert "lone.json" in skipped["reason"]


def test_game_eval_writes_its_folder_and_logs_to_mlflow(game_eval):
    paths, result = game_eval
    folder = Path(result["folder"])
    assert folder.parent.parent == paths.root / "eval" and folder.parent.name.startswith("games-tiers-")
    assert folder.name == "iter_0001"
    stored = read_json(folder / "results.json")
    assert stored["tiers"] == result["tiers"] and stored["skipped"] == result["skipped"]
    trajectories = read_records(folder / "trajectories.jsonl", Trajectory)
    assert len(trajectories) == 4 and len({t.task_id for t in trajectories}) == 4
    assert sum(t.success for t in trajectories) == round(result["tiers"]["all"]["success_rate"] * 4)
    assert all(t.initial_observation.startswith("-= ") for t in trajectories)
    logged = read_metrics(paths.root)
    name = folder.parent.name
    for tier in ("easy", "medium", "hard", "all"):
        for metric in ("success_rate", "success_low", "success_high", "games", "mean_steps"):
            key = f"eval_games/{name}/{tier}/{metric}"
            assert key in logged, f"{key} missing; have {sorted(k for k in logged if k.startswith('eval_games'))}"
            assert logged[key] == {1: pytest.approx(result["tiers"][tier][metric])}


def test_game_eval_reports_the_judges_p_minus_on_the_bad_steps(game_eval):
    _, result = game_eval
    trajectories = read_records(Path(result["folder"]) / "trajectories.jsonl", Trajectory)
    assert any(s.oracle_good is False for t in trajectories for s in t.steps)  # steps the judge is scored on
    row = next(line for line in result["table"].splitlines() if line.startswith("| all |"))
    cells = [c.strip() for c in row.strip("|").split("|")]
    assert cells[9] != "nan", row  # judge p- of the "all" tier: there are bad (oracle) steps to score it on


def test_a_game_whose_sidecar_arrives_later_is_played(game_eval, tiers, family):
    """The user reads "skipped lone.z8: no lone.json beside it", puts the sidecar there and evaluates again."""
    lone = tiers / "easy" / "lone.z8"
    spec = {"game_file": str(lone.resolve()), "step_limit": 10}
    shutil.copy(tiers / "easy" / "g21.json", lone.with_suffix(".json"))
    try:
        assert family.validate(spec, 10) == spec
        assert family.content_hash(spec) == family.content_hash({**spec, "game_file": str(tiers / "easy" / "g21.z8")})
    finally:
        lone.with_suffix(".json").unlink()


def test_game_eval_refuses_an_empty_folder_and_a_household_run(tw_run, tmp_path):
    from flows.commands import evaluate_games

    paths, _, out = tw_run
    empty = tmp_path / "no_games"
    (empty / "easy").mkdir(parents=True)
    (empty / "easy" / "readme.txt").write_text("no games here")
    with pytest.raises(MissingFile, match=r"no TextWorld game \(\*\.z8\)"):
        evaluate_games([CONFIG], _overrides(out), None, str(empty), 1, 0.0)
    with pytest.raises(MissingFile, match="no folder"):
        play_games(run_config(paths.root), paths.root, 1, tmp_path / "absent")
    household = load_config(None, [f"run.output_dir={tmp_path}"])
    assert household.environment.name == "household"
    with pytest.raises(BadValue, match="environment is 'household'"):
        play_games(household, tmp_path / "household", 0, empty)
    assert not (tmp_path / "household").exists()


# ---------------------------------------------------------------------------------------- wilson
def test_wilson_interval_contains_a_rate_of_zero_or_one():
    assert all(wilson(n, n)[1] == 1.0 for n in range(1, 101)), [n for n in range(1, 101) if wilson(n, n)[1] < 1.0]
    assert all(wilson(0, n)[0] == 0.0 for n in range(1, 201)), [n for n in range(1, 201) if wilson(0, n)[0] > 0.0]


@pytest.mark.parametrize("successes, n, expected", [
    (0, 10, (0.0, 0.277533)),
    (5, 10, (0.236593, 0.763407)),
    (10, 10, (0.722467, 1.0)),
    (3, 7, (0.158220, 0.749542)),
    (1, 1, (0.206549, 1.0)),
    (0, 0, (0.0, 0.0)),
])
def test_wilson_interval_matches_hand_computed_values(successes, n, expected):
    low, high = wilson(successes, n)
    assert low == pytest.approx(expected[0], abs=1e-3) and high == pytest.approx(expected[1], abs=1e-3)
    if 0 < successes < n:
        assert low < successes / n < high
