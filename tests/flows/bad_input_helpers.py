"""Shared by the bad-input tests (tests/flows/test_bad_input_*.py): one clear line for every bad input, and
nothing changed on disk or in MLflow.

Every case runs the real CLI (`flows.cli.main`) from a scratch working directory and asserts
(`assert_one_line_and_nothing_changed`): exit code 2, stderr exactly one line `rla: error: ...` naming the
file and line (or the config key) and what is wrong, and every file and folder under the working directory -
the run folder, its mlflow.db, the inputs - unchanged (path -> sha256 + mtime, plus the folder list). No case
starts Prefect: the flow modules are replaced by stubs (the autouse `flows` fixture, imported by each test
module) that fail the test when called, so each refusal comes from the pre-flight (tasks/checks/preflight.py)
or the config loader. The "existing run" (the `template` fixture) is written file by file (config.yaml, task
stores, records, tiny model folders), no training.
"""
from __future__ import annotations

import hashlib
import json
import random
import shutil
import struct
import sys
import types
import zipfile
from pathlib import Path

import pytest

from flows.cli import main
from rla_core.adaptation.cycle import AdaptReport
from rla_core.adaptation.store import TaskStore
from rla_core.bootstrap import generate_tasks
from rla_core.config import PROJECT_ROOT, config_to_yaml, load_config
from rla_core.envs.household import HOUSEHOLD
from rla_core.judge.benchmark import BenchmarkStep
from rla_core.judge.judge import judge_trajectories
from rla_core.rollout.base import Generation, SamplingParams
from rla_core.rollout.runner import play
from rla_core.schemas import TrainingSample
from tasks.storage.files import mark_done, write_json, write_records

QUICK = str(PROJECT_ROOT / "configs" / "quickstart.yaml")
RUN = Path("runs") / "r"  # the existing run, relative to the working directory of each case
# Model text a stage may meet (stored in the template's trajectories and verdicts): valid, if odd.
ODD_TEXT = "\\boxed{1}\u2028\x85\u2029\x00\x1b[31m 选择 😀 \\boxed{{"


# --------------------------------------------------------------------------- helpers
def snapshot(root: Path) -> dict[str, object]:
    """Every file (sha256, mtime) and folder under `root`."""
    found: dict[str, object] = {}
    for path in sorted(root.rglob("*")):
        rel = path.relative_to(root).as_posix()
        if path.is_dir():
            found[rel + "/"] = "folder"
        else:
            found[rel] = (hashlib.sha256(path.read_bytes()).hexdigest(), path.stat().st_mtime_ns)
    return found


def args(*sets: str, command: str = "run", config: list[str] | None = None, name: str = "r") -> list[str]:
    argv = [command]
    for path in config if config is not None else [QUICK]:
        argv += ["--config", str(path)]
    for item in ("run.output_dir=runs", f"run.name={name}", *sets):
        argv += ["--set", item]
    return argv


def write_model(folder: Path, optimizer: bool = False) -> None:
    """A tiny folder shaped like save_pretrained's: config, tokenizer, 16 bytes of safetensors."""
    folder.mkdir(parents=True)
    (folder / "config.json").write_text(json.dumps({"model_type": "qwen2", "vocab_size": 4}))
    (folder / "generation_config.json").write_text("{}")
    (folder / "tokenizer.json").write_text(json.dumps({"version": "1.0", "model": {"vocab": {}}}))
    (folder / "tokenizer_config.json").write_text(json.dumps({"tokenizer_class": "PreTrainedTokenizerFast"}))
    header = json.dumps({"w": {"dtype": "F32", "shape": [4], "data_offsets": [0, 16]}}).encode()
    (folder / "model.safetensors").write_bytes(struct.pack("<Q", len(header)) + header + bytes(16))
    if optimizer:
        with zipfile.ZipFile(folder / "optimizer.pt", "w") as archive:
            archive.writestr("optimizer/data.pkl", b"\x80\x02}q\x00." * 20)


class _Tokenizer:
    def __call__(self, texts):
        return {"input_ids": [[1, 2, 3] for _ in texts]}


class _Engine:
    def generate(self, prompts, params, progress=None):
        return [Generation(token_ids=[4], text=ODD_TEXT, logprobs=[-0.5]) for _ in prompts for _ in range(params.n)]


def _iteration(root: Path, k: int, tasks, stages: tuple[str, ...], complete: bool) -> None:
    it = root / "iterations" / f"iter_{k:04d}"
    params = SamplingParams(max_new_tokens=4)
    trajectories, _ = play(_Engine(), _Tokenizer(), HOUSEHOLD, [(t, 0) for t in tasks[:2]], params, 2, 3)
    judged, _ = judge_trajectories(_Engine(), _Tokenizer(), trajectories, 2, params, 3)
    sample = TrainingSample(prompt_ids=[1], response_ids=[2], advantage=0.5, task_id=tasks[0].task_id,
                            sample_index=0, step_index=0)
    for stage in stages:
        out = it / stage
        out.mkdir(parents=True)
        summary: dict = {"metrics": {}, "seconds": 0.1}
        if stage == "select":
            write_records(out / "tasks.jsonl", tasks[:2])
        elif stage == "rollout":
            write_records(out / "trajectories.jsonl", trajectories)
        elif stage == "judge":
            write_records(out / "judged.jsonl", judged)
        elif stage == "adapt":
            TaskStore.from_seed(tasks).save(out / "store")
            (out / "report.json").write_text(AdaptReport().model_dump_json())
            write_json(out / "diff.json", {})
        elif stage == "data":
            write_records(out / "policy.jsonl", [sample, sample])
            write_records(out / "judge.jsonl", [sample])
        elif stage == "validate":
            write_json(out / "report.json", {"passed": True})
        elif stage.startswith("train_"):
            write_model(out / "model", optimizer=True)
            summary.update(model_dir=f"iterations/iter_{k:04d}/{stage}/model", trained=True)
        elif stage == "evaluate":
            write_json(out / "metrics.json", {"heldout/success_rate": 0.25})
        mark_done(out, summary)
    if complete:
        (it / "COMPLETE").write_text("")


ALL_STAGES = ("select", "rollout", "judge", "adapt", "data", "validate", "train_policy", "train_judge",
              "evaluate", "commit")


@pytest.fixture(scope="module")
def template(tmp_path_factory) -> Path:
    """An existing run `r` of the quickstart config: seeded, warm-started, iteration 1 complete,
    iteration 2 through its data stage; every file written directly."""
    root = tmp_path_factory.mktemp("template") / "r"
    cfg = load_config([QUICK], ["run.output_dir=runs", "run.name=r"])
    root.mkdir()
    (root / "config.yaml").write_text(config_to_yaml(cfg))
    (root / "mlflow.db").write_bytes(b"SQLite format 3\x00" + bytes(4080))
    (root / "mlflow_run_id.txt").write_text("0123456789abcdef" * 2)
    tasks = generate_tasks(HOUSEHOLD, {}, 4, random.Random(0), "slot", set(), cfg.rollout.max_steps)
    heldout = generate_tasks(HOUSEHOLD, {}, 2, random.Random(1), "heldout", set(), cfg.rollout.max_steps)
    TaskStore.from_seed(tasks).save(root / "seed" / "store")
    write_records(root / "seed" / "heldout.jsonl", heldout)
    write_json(root / "seed" / "reserved.json", [])
    bench = (PROJECT_ROOT / "data" / "household" / "judge_benchmark.jsonl").read_text().split("\n", 1)[0]
    write_records(root / "seed" / "judge_benchmark.jsonl", [BenchmarkStep.model_validate_json(bench)])
    mark_done(root / "seed", {"train": 4, "heldout": 2})
    for role in ("policy", "judge", "environment"):
        write_model(root / "models" / "init" / role)
    mark_done(root / "models" / "init", {"vocab": 4})
    for role in ("policy", "judge"):
        write_model(root / "models" / "bootstrap" / role)
    mark_done(root / "models" / "bootstrap", {})
    write_json(root / "baseline" / "metrics.json", {"heldout/success_rate": 0.2})
    mark_done(root / "baseline", {"metrics": {}})
    _iteration(root, 1, tasks, ALL_STAGES, complete=True)
    _iteration(root, 2, tasks, ALL_STAGES[:5], complete=False)
    return root


@pytest.fixture
def cwd(tmp_path, monkeypatch) -> Path:
    monkeypatch.chdir(tmp_path)
    return tmp_path


class FlowStubs:
    """Stand-ins for the flow modules: a call means a Prefect flow would have started."""

    def __init__(self) -> None:
        self.calls: list[str] = []
        self.allow = False  # True: a call is expected (a passing control) and returns a summary

    def stub(self, name: str):
        def flow(*args, **kwargs):
            self.calls.append(name)
            if not self.allow:
                raise AssertionError(f"flow {name} started: the pre-flight let bad input through")
            return {"run_dir": "runs/r"}
        return flow


@pytest.fixture(autouse=True)
def flows(monkeypatch) -> FlowStubs:
    stubs = FlowStubs()
    train = types.ModuleType("flows.train")
    for name in ("train", "seed_run", "prepare", "evaluate_run"):
        setattr(train, name, stubs.stub(name))
    ablation = types.ModuleType("flows.ablation")
    ablation.ablation = stubs.stub("ablation")
    monkeypatch.setitem(sys.modules, "flows.train", train)
    monkeypatch.setitem(sys.modules, "flows.ablation", ablation)
    return stubs


def existing(cwd: Path, template: Path) -> Path:
    shutil.copytree(template, cwd / RUN)
    return cwd / RUN


def task_line(index: int = 0, **change) -> str:
    task = generate_tasks(HOUSEHOLD, {}, index + 1, random.Random(5), "heldout", set(), 12)[index]
    return json.dumps({**task.model_dump(mode="json"), **change})


def tasks_file(path: Path, lines: list[str]) -> str:
    path.write_text("".join(line + "\n" for line in lines))
    return str(path)


def cut(path: Path, keep: float = 0.5) -> None:
    data = path.read_bytes()
    path.write_bytes(data[: int(len(data) * keep)])


def cut_line(path: Path, line: int) -> None:
    lines = path.read_text().split("\n")
    lines[line - 1] = lines[line - 1][: len(lines[line - 1]) // 2]
    path.write_text("\n".join(lines))


def replace_line(path: Path, line: int, text: str) -> None:
    lines = path.read_text().split("\n")
    lines[line - 1] = text
    path.write_text("\n".join(lines))


# --------------------------------------------------------------------------- registering and checking cases
def registry(cases: list):
    """`case`, the decorator of a test module's cases, appending them to that module's `cases`."""
    def case(category: str, *expected: str, name: str | None = None):
        """Register `fn(cwd, template) -> argv` as a case whose one error line holds every `expected`."""
        def register(fn):
            cases.append(pytest.param(fn, expected, id=f"{category}-{name or fn.__name__}"))
            return fn
        return register
    return case


def assert_one_line_and_nothing_changed(make, expected, cwd, template, capsys, flows) -> None:
    """The check of every case (the body of each module's test_bad_input_is_one_line_and_changes_nothing)."""
    argv = make(cwd, template)
    mlflow_db = cwd / RUN / "mlflow.db"
    db_before = mlflow_db.read_bytes() if mlflow_db.is_file() else None
    before = snapshot(cwd)
    capsys.readouterr()
    assert main(argv) == 2
    out, err = capsys.readouterr()
    lines = err.split("\n")
    assert len(lines) == 2 and lines[1] == "", f"not one line:\n{err}"
    assert lines[0].startswith("rla: error: ") and out == ""
    for piece in expected:
        assert piece in lines[0], f"{piece!r} not in {lines[0]!r}"
    assert snapshot(cwd) == before
    assert (mlflow_db.read_bytes() if mlflow_db.is_file() else None) == db_before
    assert flows.calls == []

