"""Bad run folders (an existing run of another config, broken or misplaced run files and markers, eval,
bootstrap and ablation folders): one clear line for each, nothing changed (the check and the fixtures:
bad_input_helpers.py). Also the whole suite's count by category, and the passing controls.

Cases by category (parametrised ids start with the category): run folders 27; with the other
test_bad_input_*.py files: configs 21, yaml 14, task files 18, records 19, models 10, checkpoints 9,
run folders 27, total 118 CLI cases.
Plus 8 other tests: the count above; good input passes and is left as it was (an existing run whose
records hold odd but valid model text, a continued run with more iterations elsewhere, a fresh run, a
fresh ablation); a passing pre-flight reaches the flow; `rla eval --run DIR` evaluates that folder with its
own config; the refusal prepare_run_dir shares names the key.
Model outputs (124 cases) are in tests/rla_core/test_model_outputs.py.
"""
from __future__ import annotations

import json
import shlex
import shutil
import sys
from collections import Counter
from pathlib import Path

import pytest

from flows.cli import main
from rla_core.ablation import ROWS, JudgeWeight, row_overrides
from rla_core.config import config_to_yaml, load_config
from rla_core.schemas import Trajectory
from tasks.checks import preflight
from tasks.storage.files import read_records
from tests.flows import test_bad_input_config, test_bad_input_models, test_bad_input_records
from tests.flows.bad_input_helpers import (ODD_TEXT, QUICK, RUN, args, assert_one_line_and_nothing_changed, existing,
                                         registry, snapshot)
from tests.flows.bad_input_helpers import cwd, flows, template  # noqa: F401  (fixtures; flows: autouse)

CASES: list = []
case = registry(CASES)


# ---- run folders
@case("run folders", "runs/r holds a run with a different config", "rollout.n=8", "this config has rollout.n=4",
      "choose another run.name")
def different_config(cwd, template):
    existing(cwd, template)
    return args("rollout.n=4")


@case("run folders", "environment.knobs.distractors=1", "environment.knobs.distractors=2")
def different_knob(cwd, template):
    existing(cwd, template)
    return args("environment.knobs.distractors=2")


@case("run folders", "runs/r", "is a file, not a run folder")
def run_folder_is_a_file(cwd, template):
    (cwd / "runs").mkdir()
    (cwd / RUN).write_text("r")
    return args()


@case("run folders", "runs/r/config.yaml:3:")
def run_config_does_not_parse(cwd, template):
    (existing(cwd, template) / "config.yaml").write_text("run:\n  name: r\n  seed: [0\n")
    return args()


@case("run folders", "runs/r/config.yaml", "unknown config key 'run.colour'")
def run_config_of_another_version(cwd, template):
    path = existing(cwd, template) / "config.yaml"
    path.write_text(path.read_text().replace("run:\n", "run:\n  colour: blue\n", 1))
    return args()


@case("run folders", "runs/r/config.yaml", "is a folder")
def run_config_is_a_folder(cwd, template):
    path = existing(cwd, template) / "config.yaml"
    path.unlink()
    path.mkdir()
    return args()


@case("run folders", "runs/r: holds seed/ but no config.yaml", "choose another run.name")
def outputs_without_config(cwd, template):
    (existing(cwd, template) / "config.yaml").unlink()
    return args()


@case("run folders", "runs/r/seed/_DONE:1:", "not valid JSON")
def seed_marker_not_json(cwd, template):
    (existing(cwd, template) / "seed" / "_DONE").write_text('{"train": 4')
    return args()


@case("run folders", "iter_0002/select/_DONE", "JSON object", "list")
def stage_marker_is_a_list(cwd, template):
    (existing(cwd, template) / "iterations" / "iter_0002" / "select" / "_DONE").write_text("[]")
    return args()


@case("run folders", "runs/r/iterations", "is a file")
def iterations_is_a_file(cwd, template):
    shutil.rmtree(existing(cwd, template) / "iterations")
    (cwd / RUN / "iterations").write_text("")
    return args()


@case("run folders", "runs/r/iterations/iter_x", "not an iteration folder name")
def iteration_folder_misnamed(cwd, template):
    (existing(cwd, template) / "iterations" / "iter_x").mkdir()
    return args()


@case("run folders", "runs/r/iterations/iter_0003", "is a file")
def iteration_folder_is_a_file(cwd, template):
    (existing(cwd, template) / "iterations" / "iter_0003").write_text("")
    return args()


@case("run folders", "runs/r/seed/store", "is a file")
def task_store_is_a_file(cwd, template):
    shutil.rmtree(existing(cwd, template) / "seed" / "store")
    (cwd / RUN / "seed" / "store").write_text("slots")
    return args()


@case("run folders", "runs/r/seed/_DONE", "is a folder")
def marker_is_a_folder(cwd, template):
    marker = existing(cwd, template) / "seed" / "_DONE"
    marker.unlink()
    marker.mkdir()
    return args()


@case("run folders", "iter_0001/COMPLETE", "is a folder")
def complete_marker_is_a_folder(cwd, template):
    marker = existing(cwd, template) / "iterations" / "iter_0001" / "COMPLETE"
    marker.unlink()
    marker.mkdir()
    return args()


@case("run folders", "no run at runs/r")
def eval_without_a_run(cwd, template):
    return args(command="eval")


@case("run folders", "iteration 7 is not complete", "completed: [1]")
def eval_of_an_unfinished_iteration(cwd, template):
    existing(cwd, template)
    return [*args(command="eval"), "--iteration", "7"]


@case("run folders", "--iteration must be >= 0")
def eval_negative_iteration(cwd, template):
    existing(cwd, template)
    return [*args(command="eval"), "--iteration", "-1"]


@case("run folders", "no run at gone", "no config.yaml")
def eval_run_folder_missing(cwd, template):
    return ["eval", "--run", "gone"]


@case("run folders", "--run DIR or --config FILE, not both")
def eval_run_folder_and_config(cwd, template):
    existing(cwd, template)
    return [*args(command="eval"), "--run", str(RUN)]


@case("run folders", "warm-start has not finished")
def eval_before_the_warm_start(cwd, template):
    root = existing(cwd, template)
    (root / "models" / "bootstrap" / "_DONE").unlink()
    shutil.rmtree(root / "iterations")
    return args(command="eval")


@case("run folders", "runs/r", "rollout.max_steps=12", "rollout.max_steps=9")
def bootstrap_on_a_different_run(cwd, template):
    existing(cwd, template)
    return args("rollout.max_steps=9", command="bootstrap")


@case("run folders", "runs/r/config.yaml:1:")
def seed_on_a_broken_run_config(cwd, template):
    (existing(cwd, template) / "config.yaml").write_text("run: {name: r\n")
    return args(command="seed")


@case("run folders", "runs/r", "holds a training run, not an ablation")
def ablation_into_a_training_run(cwd, template):
    existing(cwd, template)
    return [*args(command="ablation"), "--name", "r", "--seeds", "1"]


@case("run folders", "runs/ablation/a-seed0 holds a run with a different config", "rollout.n=3")
def ablation_row_folder_differs(cwd, template):
    base = load_config([QUICK], ["run.output_dir=runs"])
    root = (cwd / "runs" / "ablation").resolve()
    child = load_config([QUICK], ["run.output_dir=runs", *row_overrides(JudgeWeight("reward.step_weight",
                                  base.reward.step_weight), base.tracking.experiment, str(root), ROWS["a"], 0), "rollout.n=3"])
    (root / "a-seed0").mkdir(parents=True)
    (root / "a-seed0" / "config.yaml").write_text(config_to_yaml(child))
    return [*args(command="ablation"), "--rows", "a", "--seeds", "1"]


def _earlier_ablation(cwd: Path, template: Path, *sets: str) -> None:
    """runs/earlier: an ablation folder whose a-seed0 is the template's warm-started run under that row's config."""
    base = load_config([QUICK], ["run.output_dir=runs"])
    root = (cwd / "runs" / "earlier").resolve()
    shutil.copytree(template, root / "a-seed0")
    child = load_config([QUICK], ["run.output_dir=runs", *row_overrides(JudgeWeight("reward.step_weight",
                                  base.reward.step_weight), base.tracking.experiment, str(root), ROWS["a"], 0), *sets])
    (root / "a-seed0" / "config.yaml").write_text(config_to_yaml(child))


@case("run folders", "runs/earlier", "no finished warm start of seed 1", "run that seed there first")
def ablation_warm_start_lacks_a_seed(cwd, template):
    _earlier_ablation(cwd, template)
    return [*args(command="ablation"), "--rows", "d", "--seeds", "2", "--warm-start", "runs/earlier"]


@case("run folders", "runs/earlier/a-seed0 was warm-started with another config", "rollout.n: 3 there, 8 here")
def ablation_warm_start_of_another_config(cwd, template):
    _earlier_ablation(cwd, template, "rollout.n=3")
    return [*args(command="ablation"), "--rows", "d", "--seeds", "1", "--warm-start", "runs/earlier"]


# --------------------------------------------------------------------------- the tests
@pytest.mark.parametrize("make, expected", CASES)
def test_bad_input_is_one_line_and_changes_nothing(make, expected, cwd, template, capsys, flows):
    assert_one_line_and_nothing_changed(make, expected, cwd, template, capsys, flows)


def test_the_suite_covers_every_category_with_50_cases_or_more():
    cases = [*test_bad_input_config.CASES, *test_bad_input_records.CASES, *test_bad_input_models.CASES, *CASES]
    counts = Counter(p.id.split("-", 1)[0] for p in cases)
    assert counts == {"configs": 21, "yaml": 14, "task files": 18, "records": 19, "models": 10,
                      "checkpoints": 9, "run folders": 27}
    assert sum(counts.values()) >= 50


# ---- passing controls: good input passes, and nothing is written by the pre-flight either
def test_an_existing_run_with_odd_model_text_passes_and_is_left_as_it_was(cwd, template):
    root = existing(cwd, template)
    trajectories = root / "iterations" / "iter_0002" / "rollout" / "trajectories.jsonl"
    assert "\u2028" in trajectories.read_text()  # raw in the file: a line split on it would break the record
    assert read_records(trajectories, Trajectory)[0].steps[0].response_text == ODD_TEXT
    before = snapshot(cwd)
    preflight.check([QUICK], ["run.output_dir=runs", "run.name=r"])
    preflight.check([QUICK], ["run.output_dir=runs", "run.name=r"], command="eval")
    assert snapshot(cwd) == before


def test_a_run_may_continue_with_more_iterations_elsewhere_and_other_routing(cwd, template):
    existing(cwd, template)
    shutil.move(cwd / "runs", cwd / "moved")
    preflight.check([QUICK], ["run.output_dir=moved", "run.name=r", "run.iterations=9",
                              "orchestration.gpu_deployment=rla-stage/gpu"])


def test_a_fresh_run_passes_without_creating_its_folder(cwd):
    preflight.check([QUICK], ["run.output_dir=runs", "run.name=new"])
    assert not (cwd / "runs").exists()


def test_a_fresh_ablation_passes_without_creating_its_folder(cwd):
    preflight.check_ablation([QUICK], ["run.output_dir=runs"], 2, "abcd", "ablation")
    assert not (cwd / "runs").exists()


def test_a_passing_pre_flight_reaches_the_flow(cwd, template, flows, capsys):
    existing(cwd, template)
    flows.allow = True
    assert main(args(command="seed")) == 0
    assert flows.calls == ["seed_run"] and capsys.readouterr().err == ""


def test_eval_of_a_run_folder_uses_its_own_config_wherever_it_is(cwd, template, monkeypatch, capsys):
    shutil.move(existing(cwd, template), cwd / "archive")  # moved: its config.yaml still says runs/r
    seen: list = []

    def evaluate_run(configs, overrides, iteration):
        seen.append(load_config(configs, overrides))
        return {"heldout/success_rate": 0.25, "iteration": iteration}

    monkeypatch.setattr(sys.modules["flows.train"], "evaluate_run", evaluate_run)
    assert main(["eval", "--run", "archive", "--iteration", "1"]) == 0
    out, err = capsys.readouterr()
    assert err == "" and json.loads(out) == {"heldout/success_rate": 0.25, "iteration": 1}
    cfg = seen[0]
    assert Path(cfg.run.output_dir) / cfg.run.name == (cwd / "archive").resolve()
    assert cfg.model_dump(exclude={"run"}) == load_config([QUICK]).model_dump(exclude={"run"})


def test_prepare_run_dir_names_the_differing_key_too():
    from rla_core.config import run_mismatch

    old = load_config([QUICK], [])
    message = run_mismatch("runs/quickstart", old, load_config([QUICK], ["judge.m=5", "run.iterations=9"]))
    assert message.startswith("runs/quickstart holds a run with a different config (judge.m=3; this config has "
                              "judge.m=5)")
    assert message.endswith("or continue it as it ran: --set judge.m=3")
    # the suggested flags load back to the run's own config, even for values YAML would read otherwise
    odd = load_config([QUICK], ["run.name='true'", "environment.knobs.goal_type=[put]", "eval.dev_file='1.5'",
                                "tracking.experiment='a b: c'"])
    message = run_mismatch("runs/odd", odd, load_config([QUICK], ["run.name='true'"]))
    flags = shlex.split(message.split("continue it as it ran: ", 1)[1])
    assert flags[0::2] == ["--set"] * 3
    assert load_config([QUICK], ["run.name='true'", *flags[1::2]]) == odd
    gone = load_config([QUICK], ["environment.knobs={goal_type: [put]}"])  # keys the run lacks: no flag sets that
    assert "continue it as it ran" not in run_mismatch("runs/gone", gone, load_config([QUICK]))
    assert run_mismatch("x", old, load_config([QUICK], ["run.iterations=9", "run.output_dir=elsewhere"])) is None
