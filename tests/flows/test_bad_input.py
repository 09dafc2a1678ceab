"""One clear line for every bad input, and nothing changed on disk or in MLflow.

Every case runs the real CLI (`flows.cli.main`) from a scratch working directory and asserts: exit code
2, stderr exactly one line `rla: error: ...` naming the file and line (or the config key) and what is
wrong, and every file and folder under the working directory - the run folder, its mlflow.db, the
inputs - unchanged (path -> sha256 + mtime, plus the folder list). No case starts Prefect: the flow
modules are replaced by stubs that fail the test when called, so each refusal comes from the
pre-flight (tasks/checks/preflight.py) or the config loader. The "existing run" is written file by file
(config.yaml, task stores, records, tiny model folders), no training.

Cases by category (parametrised ids start with the category):
    configs       20
    yaml          14
    task files    18
    records       19
    models        10
    checkpoints    9
    run folders   27
    total        117 CLI cases
plus 8 other tests: the count above; good input passes and is left as it was (an existing run whose
records hold odd but valid model text, a continued run with more iterations elsewhere, a fresh run, a
fresh ablation); a passing pre-flight reaches the flow; `rla eval --run DIR` evaluates that folder with its
own config; the refusal prepare_run_dir shares names the key.
Model outputs (124 cases) are in tests/rla_core/test_model_outputs.py.
"""
from __future__ import annotations

import hashlib
import json
import random
import shlex
import shutil
import struct
import sys
import types
import zipfile
from collections import Counter
from pathlib import Path

import pytest

from flows.cli import main
from rla_core.ablation import ROWS, JudgeWeight, row_overrides
from rla_core.adaptation.cycle import AdaptReport
from rla_core.adaptation.store import TaskStore
from rla_core.bootstrap import generate_tasks
from rla_core.config import PROJECT_ROOT, config_to_yaml, load_config
from rla_core.envs.household import HOUSEHOLD
from rla_core.judge.benchmark import BenchmarkStep
from rla_core.judge.judge import judge_trajectories
from rla_core.rollout.base import Generation, SamplingParams
from rla_core.rollout.runner import play
from rla_core.schemas import TrainingSample, Trajectory
from tasks.checks import preflight
from tasks.storage.files import mark_done, read_records, write_json, write_records

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


# --------------------------------------------------------------------------- the cases
CASES: list = []


def case(category: str, *expected: str, name: str | None = None):
    """Register `fn(cwd, template) -> argv` as a case whose one error line holds every `expected`."""
    def register(fn):
        CASES.append(pytest.param(fn, expected, id=f"{category}-{name or fn.__name__}"))
        return fn
    return register


# ---- configs (fresh run folder: it must not appear)
@case("configs", "unknown config key 'rollout.nn'; did you mean 'rollout.n'?")
def unknown_key(cwd, template):
    return args("rollout.nn=3")


@case("configs", "judge.m", "0")
def zero_judge_samples(cwd, template):
    return args("judge.m=0")


@case("configs", "rollout.n", "lots")
def wrong_type(cwd, template):
    return args("rollout.n=lots")


@case("configs", "environment.alpha_low must be < environment.alpha_high")
def alpha_band_reversed(cwd, template):
    return args("environment.alpha_low=0.9")


@case("configs", "environment.name", "kitchen")
def unknown_environment(cwd, template):
    return args("environment.name=kitchen")


@case("configs", "rollout.backend", "vlm")
def unknown_rollout_backend(cwd, template):
    return args("rollout.backend=vlm")


@case("configs", "train.backend", "jax")
def unknown_trainer_backend(cwd, template):
    return args("train.backend=jax")


@case("configs", "environment.rewriter")
def unknown_rewriter(cwd, template):
    return args("environment.rewriter=gpt")


@case("configs", "run.name", "'..'")
def run_name_climbs_out(cwd, template):
    return args("run.name=..")


@case("configs", "run.name", "/etc")
def run_name_absolute(cwd, template):
    return args("run.name=/etc")


@case("configs", "run.output_dir", "runs")
def output_dir_is_a_file(cwd, template):
    (cwd / "runs").write_text("not a folder")
    return args()


@case("configs", "rollout.n", "section.key=value")
def override_without_value(cwd, template):
    return args("rollout.n")


@case("configs", "storage.bucket")
def s3_without_bucket(cwd, template):
    return args("storage.backend=s3")


@case("configs", "offload_params", "zero_stage 3")
def offload_without_zero3(cwd, template):
    return args("train.deepspeed.offload_params=true")


@case("configs", "not found", "nope.yaml")
def config_file_missing(cwd, template):
    return args(config=[cwd / "nope.yaml"])


@case("configs", "is a folder")
def config_file_is_a_folder(cwd, template):
    (cwd / "configs").mkdir()
    return args(config=[cwd / "configs"])


@case("configs", "rollout.n.x")
def override_below_a_value(cwd, template):
    return args("rollout.n=3", "rollout.n.x=1")


@case("configs", "unknown ablation rows", "valid: abcd")
def ablation_unknown_rows(cwd, template):
    return [*args(command="ablation"), "--rows", "xyz"]


@case("configs", "--seeds")
def ablation_no_seeds(cwd, template):
    return [*args(command="ablation"), "--seeds", "0"]


@case("configs", "reward.step_weight")
def ablation_without_step_weight(cwd, template):
    return [*args("reward.step_weight=0", command="ablation"), "--rows", "ab"]


@case("configs", "coding.judge_test_weight (λ of this setting) must be > 0", "(d)")
def coding_ablation_without_judge_test_weight(cwd, template):  # coding's λ is its own key, not reward.step_weight
    coding = str(PROJECT_ROOT / "configs" / "coding.yaml")
    return [*args("train.optimizer_steps=2", command="ablation", config=[coding]), "--rows", "ad"]


# ---- YAML files
def yaml_case(text: str | bytes):
    def make(cwd, template):
        path = cwd / "x.yaml"
        path.write_bytes(text if isinstance(text, bytes) else text.encode())
        return args(config=[QUICK, path])
    return make


for _name, _text, _expected in [
    ("mapping_value_in_a_value", "run:\n  name: x\n  seed: 3: 4\n", ("x.yaml:3:", "mapping values")),
    ("unterminated_quote", 'run:\n  name: "x\nrollout:\n  n: 3\n', ("x.yaml:", "quoted scalar")),
    ("tab_indent", "run:\n\tname: x\n", ("x.yaml:2:", "'\\t'")),
    ("nul_character", "run:\n  name: x\x00\n", ("x.yaml:2:", "U+0000")),
    ("not_utf8", b"run:\n  name: \xff\xfe\n", ("x.yaml:2:", "not UTF-8")),
    ("top_level_list", "- run\n- rollout\n", ("x.yaml", "top level must be a mapping")),
    ("python_tag", "run: !!python/object:os.system x\n", ("x.yaml:1:", "constructor")),
    ("unclosed_flow_list", "environment:\n  reserved_files: [a, b\nrollout: {}\n", ("x.yaml:3:", "','")),
    ("undefined_alias", "run: &a\n  name: *b\n", ("x.yaml:2:", "alias")),
    ("section_is_a_number", "rollout: 3\n", ("config key 'rollout'", "dictionary")),
    ("bad_indent", "run:\n  name: x\n name2: y\n", ("x.yaml:3:", "block")),
    ("unknown_key_near_a_known_one", "rollout:\n  nn: 4\n",
     ("x.yaml: unknown config key 'rollout.nn'", "did you mean 'rollout.n'?")),
]:
    case("yaml", *_expected, name=_name)(yaml_case(_text))


@case("yaml", "--set rollout.n", "not valid YAML")
def set_value_not_yaml(cwd, template):
    return args("rollout.n=[1")


@case("yaml", "second.yaml:2:")
def second_of_two_files(cwd, template):
    (cwd / "first.yaml").write_text("rollout:\n  n: 4\n")
    (cwd / "second.yaml").write_text("run:\n  seed: [1\n")
    return args(config=[QUICK, cwd / "first.yaml", cwd / "second.yaml"])


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


# ---- model folders
@case("models", "models.policy.path", "not found")
def policy_path_missing(cwd, template):
    return args(f"models.policy.path={cwd / 'no-model'}")


@case("models", "judge-model: no config.json", "models.judge.path")
def judge_path_without_config(cwd, template):
    write_model(cwd / "judge-model")
    (cwd / "judge-model" / "config.json").unlink()
    return args(f"models.judge.path={cwd / 'judge-model'}")


@case("models", "policy-model/config.json:1:", "not valid JSON")
def policy_path_config_not_json(cwd, template):
    write_model(cwd / "policy-model")
    cut(cwd / "policy-model" / "config.json")
    return args(f"models.policy.path={cwd / 'policy-model'}")


@case("models", "runs/r/models/init/policy", "missing", "models/init/_DONE")
def init_model_missing(cwd, template):
    shutil.rmtree(existing(cwd, template) / "models" / "init" / "policy")
    return args()


@case("models", "runs/r/models/bootstrap/judge", "no weights")
def warm_start_without_weights(cwd, template):
    (existing(cwd, template) / "models" / "bootstrap" / "judge" / "model.safetensors").unlink()
    return args()


@case("models", "runs/r/models/bootstrap/policy", "no tokenizer")
def warm_start_without_tokenizer(cwd, template):
    folder = existing(cwd, template) / "models" / "bootstrap" / "policy"
    for name in ("tokenizer.json", "tokenizer_config.json"):
        (folder / name).unlink()
    return args()


@case("models", "iter_0001/train_policy/_DONE", "model_dir", "not a model folder")
def trained_model_dir_points_nowhere(cwd, template):
    marker = existing(cwd, template) / "iterations" / "iter_0001" / "train_policy" / "_DONE"
    marker.write_text(json.dumps({**json.loads(marker.read_text()), "model_dir": "iterations/gone/model"}))
    return args()


@case("models", "runs/r/models/bootstrap/policy", "is a file")
def warm_start_model_is_a_file(cwd, template):
    folder = existing(cwd, template) / "models" / "bootstrap" / "policy"
    shutil.rmtree(folder)
    folder.write_text("weights")
    return args()


@case("models", "iter_0001/train_judge/model/tokenizer.json:1:", "not valid JSON")
def tokenizer_truncated(cwd, template):
    cut(existing(cwd, template) / "iterations" / "iter_0001" / "train_judge" / "model" / "tokenizer.json")
    return args()


@case("models", "env-model", "is a file", "models.environment.path")
def environment_path_is_a_file(cwd, template):
    (cwd / "env-model").write_text("{}")
    return args(f"models.environment.path={cwd / 'env-model'}")


# ---- checkpoints
TRAINED = ("iterations", "iter_0001", "train_policy", "model")


@case("checkpoints", "train_policy/model/model.safetensors", "truncated")
def safetensors_cut(cwd, template):
    cut(existing(cwd, template).joinpath(*TRAINED, "model.safetensors"), 0.9)
    return args()


@case("checkpoints", "models/bootstrap/policy/model.safetensors", "no safetensors header")
def safetensors_empty(cwd, template):
    (existing(cwd, template) / "models" / "bootstrap" / "policy" / "model.safetensors").write_bytes(b"")
    return args()


@case("checkpoints", "model.safetensors", "header claims")
def safetensors_header_length_huge(cwd, template):
    path = existing(cwd, template).joinpath(*TRAINED, "model.safetensors")
    path.write_bytes(struct.pack("<Q", 2**40) + path.read_bytes()[8:])
    return args()


@case("checkpoints", "model.safetensors", "header is not JSON")
def safetensors_header_garbage(cwd, template):
    path = existing(cwd, template).joinpath(*TRAINED, "model.safetensors")
    data = path.read_bytes()
    path.write_bytes(data[:8] + b"\x00" * (len(data) - 8))
    return args()


@case("checkpoints", "train_policy/model/optimizer.pt", "optimizer state")
def optimizer_state_truncated(cwd, template):
    cut(existing(cwd, template).joinpath(*TRAINED, "optimizer.pt"))
    return args()


@case("checkpoints", "train_judge/model/optimizer.pt", "optimizer state")
def optimizer_state_garbage(cwd, template):
    (existing(cwd, template) / "iterations" / "iter_0001" / "train_judge" / "model" / "optimizer.pt").write_bytes(
        b"\x80\x02not a zip" * 10)
    return args()


@case("checkpoints", "model.safetensors.index.json", "shard", "model-00002-of-00002.safetensors")
def sharded_index_names_a_missing_shard(cwd, template):
    folder = existing(cwd, template) / "models" / "bootstrap" / "judge"
    index = {"weight_map": {"w": "model.safetensors", "v": "model-00002-of-00002.safetensors"}}
    (folder / "model.safetensors.index.json").write_text(json.dumps(index))
    return args()


@case("checkpoints", "models/init/judge/model.safetensors", "describes 16 bytes", "holds 20")
def safetensors_trailing_bytes(cwd, template):
    path = existing(cwd, template) / "models" / "init" / "judge" / "model.safetensors"
    path.write_bytes(path.read_bytes() + b"\x00" * 4)
    return args()


@case("checkpoints", "user-model/model.safetensors", "truncated")
def user_model_checkpoint_cut(cwd, template):
    write_model(cwd / "user-model")
    cut(cwd / "user-model" / "model.safetensors", 0.95)
    return args(f"models.policy.path={cwd / 'user-model'}")


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


def test_the_suite_covers_every_category_with_50_cases_or_more():
    counts = Counter(p.id.split("-", 1)[0] for p in CASES)
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
