"""Bad task files named by the config (fresh run) and bad records of an existing run: one clear line naming
the file and line, nothing changed (the check and the fixtures: bad_input_helpers.py).

Cases by category (parametrised ids start with the category): task files 18, records 19.
"""
from __future__ import annotations

import json
import shutil

import pytest

from rla_core.config import PROJECT_ROOT
from tests.flows.bad_input_helpers import (RUN, args, assert_one_line_and_nothing_changed, cut, cut_line, existing,
                                         registry, replace_line, task_line, tasks_file)
from tests.flows.bad_input_helpers import cwd, flows, template  # noqa: F401  (fixtures; flows: autouse)

CASES: list = []
case = registry(CASES)


# ---- task files named by the config (fresh run)
@case("task files", "environment.heldout_file", "not found")
def heldout_file_missing(cwd, template):
    return args(f"environment.heldout_file={cwd / 'missing.jsonl'}")


@case("task files", "heldout.jsonl:3:", "not valid JSON")
def heldout_truncated_line(cwd, template):
    path = tasks_file(cwd / "heldout.jsonl", [task_line(0), task_line(1), task_line(2)[:200]])
    return args(f"environment.heldout_file={path}")


@case("task files", "heldout.jsonl", "no tasks")
def heldout_empty(cwd, template):
    return args(f"environment.heldout_file={tasks_file(cwd / 'heldout.jsonl', [])}")


@case("task files", "heldout.jsonl:2:", "JSON object")
def heldout_line_not_an_object(cwd, template):
    return args(f"environment.heldout_file={tasks_file(cwd / 'heldout.jsonl', [task_line(0), '[1, 2]'])}")


@case("task files", "heldout.jsonl:2:", "unknown field 'colour'")
def heldout_unknown_field(cwd, template):
    path = tasks_file(cwd / "heldout.jsonl", [task_line(0), task_line(1, colour="red")])
    return args(f"environment.heldout_file={path}")


@case("task files", "heldout.jsonl:1:", "field 'spec' is missing")
def heldout_missing_field(cwd, template):
    line = json.loads(task_line(0))
    del line["spec"]
    return args(f"environment.heldout_file={tasks_file(cwd / 'heldout.jsonl', [json.dumps(line)])}")


@case("task files", "heldout.jsonl:2:", "is for 'kitchen'")
def heldout_other_environment(cwd, template):
    path = tasks_file(cwd / "heldout.jsonl", [task_line(0), task_line(1, env="kitchen")])
    return args(f"environment.heldout_file={path}")


@case("task files", "heldout.jsonl:1:", "start_room")
def heldout_invalid_spec(cwd, template):
    line = json.loads(task_line(0))
    line["spec"]["start_room"] = "moon"
    return args(f"environment.heldout_file={tasks_file(cwd / 'heldout.jsonl', [json.dumps(line)])}")


@case("task files", "dev.jsonl:2:", "not valid JSON")
def reserved_file_truncated(cwd, template):
    path = tasks_file(cwd / "dev.jsonl", [task_line(0), task_line(1)[:-30]])
    return args(f"environment.reserved_files=[{path}]")


@case("task files", "bench.jsonl:1:", "field 'observation' is missing")
def benchmark_record_missing_field(cwd, template):
    line = json.loads((PROJECT_ROOT / "data" / "household" / "judge_benchmark.jsonl").read_text().split("\n")[0])
    del line["observation"]
    (cwd / "bench.jsonl").write_text(json.dumps(line) + "\n")
    return args(f"eval.judge_benchmark={cwd / 'bench.jsonl'}")


@case("task files", "heldout.jsonl:2:", "not UTF-8")
def heldout_not_utf8(cwd, template):
    (cwd / "heldout.jsonl").write_bytes(task_line(0).encode() + b"\n{\"task_id\": \"\xff\"}\n")
    return args(f"environment.heldout_file={cwd / 'heldout.jsonl'}")


@case("task files", "heldout.jsonl:5:")
def heldout_bad_line_after_blank_lines(cwd, template):
    path = tasks_file(cwd / "heldout.jsonl", [task_line(0), "", "   ", task_line(1), '{"task_id": 3}'])
    return args(f"environment.heldout_file={path}")


@case("task files", "environment.heldout_file", "not found")
def heldout_file_is_a_folder(cwd, template):
    (cwd / "heldout").mkdir()
    return args(f"environment.heldout_file={cwd / 'heldout'}")


@case("task files", "environment.reserved_files", "dev2.jsonl")
def reserved_file_missing(cwd, template):
    return args(f"environment.reserved_files=[{cwd / 'dev2.jsonl'}]")


@case("task files", "eval.judge_benchmark", "nobench.jsonl")
def benchmark_file_missing(cwd, template):
    return args(f"eval.judge_benchmark={cwd / 'nobench.jsonl'}")


@case("task files", "eval.dev_file", "nodev.jsonl")
def dev_file_missing(cwd, template):
    return args(f"eval.dev_file={cwd / 'nodev.jsonl'}")


@case("task files", "mydev.jsonl:2:", "not valid JSON")
def dev_file_truncated(cwd, template):
    path = tasks_file(cwd / "mydev.jsonl", [task_line(0), task_line(1)[:-30]])
    return args(f"eval.dev_file={path}")


@case("task files", "eval.dev_judge_benchmark", "nodevbench.jsonl")
def dev_benchmark_file_missing(cwd, template):
    return args(f"eval.dev_judge_benchmark={cwd / 'nodevbench.jsonl'}")


@case("records", "runs/r/seed/judge_benchmark_dev.jsonl:1:", "not valid JSON")
def seed_dev_benchmark_truncated(cwd, template):
    (existing(cwd, template) / "seed" / "judge_benchmark_dev.jsonl").write_text('{"step_id": "x"\n')
    return args()


# ---- records of an existing run
@case("records", "runs/r/seed/store/slots.jsonl:3:", "not valid JSON")
def seed_store_truncated_line(cwd, template):
    cut_line(existing(cwd, template) / "seed" / "store" / "slots.jsonl", 3)
    return args()


@case("records", "runs/r/seed/store/slots.jsonl", "no Slot records")
def seed_store_empty(cwd, template):
    (existing(cwd, template) / "seed" / "store" / "slots.jsonl").write_text("")
    return args()


@case("records", "runs/r/seed/store/store.json:1:", "not valid JSON")
def store_meta_not_json(cwd, template):
    (existing(cwd, template) / "seed" / "store" / "store.json").write_text("{format_version: 2")
    return args()


@case("records", "runs/r/seed/store/store.json", "format_version 1 != 2")
def store_format_version(cwd, template):
    (existing(cwd, template) / "seed" / "store" / "store.json").write_text('{"format_version": 1}')
    return args()


@case("records", "runs/r/seed/store/slots.jsonl:2:", "repeats line 1")
def slot_id_repeats(cwd, template):
    path = existing(cwd, template) / "seed" / "store" / "slots.jsonl"
    replace_line(path, 2, path.read_text().split("\n")[0])
    return args()


@case("records", "runs/r/seed/heldout.jsonl:2:", "field 'difficulty'")
def run_heldout_wrong_type(cwd, template):
    path = existing(cwd, template) / "seed" / "heldout.jsonl"
    line = json.loads(path.read_text().split("\n")[1])
    replace_line(path, 2, json.dumps({**line, "difficulty": "hard"}))
    return args()


@case("records", "runs/r/seed/heldout.jsonl", "missing", "seed/_DONE")
def run_heldout_missing(cwd, template):
    (existing(cwd, template) / "seed" / "heldout.jsonl").unlink()
    return args()


@case("records", "runs/r/iterations/iter_0002/select/tasks.jsonl:1:", "not valid JSON")
def selected_tasks_truncated(cwd, template):
    cut_line(existing(cwd, template) / "iterations" / "iter_0002" / "select" / "tasks.jsonl", 1)
    return args()


@case("records", "iter_0002/rollout/trajectories.jsonl:1:", "Trajectory record: field 'steps.0.action'")
def trajectory_wrong_field(cwd, template):
    path = existing(cwd, template) / "iterations" / "iter_0002" / "rollout" / "trajectories.jsonl"
    line = json.loads(path.read_text().split("\n")[0])
    line["steps"][0]["action"] = 7
    replace_line(path, 1, json.dumps(line))
    return args()


@case("records", "iter_0002/judge/judged.jsonl:1:", "JSON object")
def verdict_line_not_an_object(cwd, template):
    replace_line(existing(cwd, template) / "iterations" / "iter_0002" / "judge" / "judged.jsonl", 1, '"verdicts"')
    return args()


@case("records", "iter_0002/data/policy.jsonl:2:", "field 'advantage'")
def batch_sample_bad_value(cwd, template):
    path = existing(cwd, template) / "iterations" / "iter_0002" / "data" / "policy.jsonl"
    line = json.loads(path.read_text().split("\n")[1])
    replace_line(path, 2, json.dumps({**line, "advantage": "high"}))
    return args()


@case("records", "iter_0002/adapt/report.json", "unknown field 'acepted'")
def adapt_report_unknown_field(cwd, template):
    (existing(cwd, template) / "iterations" / "iter_0002" / "adapt" / "report.json").write_text('{"acepted": []}')
    return args()


@case("records", "runs/r/iterations/iter_0001/adapt/store/slots.jsonl:1:", "not valid JSON")
def carried_store_truncated(cwd, template):
    cut_line(existing(cwd, template) / "iterations" / "iter_0001" / "adapt" / "store" / "slots.jsonl", 1)
    shutil.rmtree(cwd / RUN / "iterations" / "iter_0002")  # iteration 2 starts from iteration 1's store
    return args()


@case("records", "runs/r/seed/reserved.json", "JSON list")
def reserved_hashes_not_a_list(cwd, template):
    (existing(cwd, template) / "seed" / "reserved.json").write_text('{"a": 1}')
    return args()


@case("records", "runs/r/baseline/metrics.json:2:", "not valid JSON")
def baseline_metrics_not_json(cwd, template):
    cut(existing(cwd, template) / "baseline" / "metrics.json")
    return args()


@case("records", "runs/r/iterations/iter_0001/evaluate/metrics.json", "not valid JSON")
def evaluation_metrics_truncated(cwd, template):
    cut(existing(cwd, template) / "iterations" / "iter_0001" / "evaluate" / "metrics.json")
    return args()


@case("records", "runs/r/seed/judge_benchmark.jsonl:1:", "unknown field 'label'")
def run_benchmark_unknown_field(cwd, template):
    path = existing(cwd, template) / "seed" / "judge_benchmark.jsonl"
    replace_line(path, 1, json.dumps({**json.loads(path.read_text().split("\n")[0]), "label": 1}))
    return args()


@case("records", "iter_0002/rollout/trajectories.jsonl:2:", "not UTF-8")
def trajectories_not_utf8(cwd, template):
    path = existing(cwd, template) / "iterations" / "iter_0002" / "rollout" / "trajectories.jsonl"
    lines = path.read_bytes().split(b"\n")
    lines[1] = lines[1][:40] + b"\xc3\x28" + lines[1][40:]
    path.write_bytes(b"\n".join(lines))
    return args()


# --------------------------------------------------------------------------- the tests
@pytest.mark.parametrize("make, expected", CASES)
def test_bad_input_is_one_line_and_changes_nothing(make, expected, cwd, template, capsys, flows):
    assert_one_line_and_nothing_changed(make, expected, cwd, template, capsys, flows)
