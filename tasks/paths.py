"""Where every stage reads and writes inside a run folder, and which inputs an iteration uses.

runs/<name>/
  config.yaml            the resolved config of the run
  seed/store/            the seed task store        seed/heldout.jsonl   held-out tasks (never trained on)
                                                    seed/dev.jsonl       dev tasks (model selection; never trained on)
  models/init/           tokenizer + untrained tiny models      models/bootstrap/{policy,judge[,environment]}/
  iterations/iter_0001/<stage>/...   each stage folder ends with a _DONE marker; COMPLETE last
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from rla_core.config import Config, load_run_config
from tasks.storage.files import is_done
from tasks.summaries import TrainSummary, read_summary

COMPLETE = "COMPLETE"
ROLES = ("policy", "judge")  # the trained models, each with its train_<role> stage
CONFIG_FILE = "config.yaml"  # the resolved config of a run (and the mark of a run folder)
RUN_ID_FILE = "mlflow_run_id.txt"  # the run's MLflow run id: another machine re-attaches to it
ITERATIONS = "iterations"
# iteration 0's folders: what the loop starts from (one per start stage, tasks/pipeline.py:START_STAGES)
START_FOLDERS = ("seed", "models/init", "models/bootstrap", "baseline")
_ITERATION_PREFIX = "iter_"


def iteration_folder(k: int) -> str:
    """The folder name of iteration k: iter_0001, ..., iter_10000."""
    return f"{_ITERATION_PREFIX}{k:04d}"


def parse_iteration(name: str) -> int | None:
    """k of an iteration folder name (`iteration_folder(k)`), None for any other name (iter_1, iter_x)."""
    digits = name.removeprefix(_ITERATION_PREFIX)
    if name == digits or not digits.isascii() or not digits.isdigit() or iteration_folder(int(digits)) != name:
        return None
    return int(digits)


def iteration_rel(k: int) -> str:
    """Iteration k's folder relative to the run root: iterations/iter_0001."""
    return f"{ITERATIONS}/{iteration_folder(k)}"


@dataclass(frozen=True)
class IterationPaths:
    """The files one iteration's stages hand each other, named once: `iterations/iter_k/<stage>/<file>`.
    Each stage folder is named after its stage (tasks/stage.py)."""
    root: Path

    def stage(self, name: str) -> Path:
        return self.root / name

    @property
    def tasks(self) -> Path:
        """select: the tasks rolled out this iteration."""
        return self.root / "select" / "tasks.jsonl"

    @property
    def trajectories(self) -> Path:
        """rollout: N trajectories per task."""
        return self.root / "rollout" / "trajectories.jsonl"

    @property
    def programs(self) -> Path:
        """rollout (coding): every program's ground-truth run."""
        return self.root / "rollout" / "programs.jsonl"

    @property
    def unit_tests(self) -> Path:
        """judge (coding): the judge's unit tests, with which programs pass each."""
        return self.root / "judge" / "unit_tests.jsonl"

    @property
    def judged(self) -> Path:
        """judge: m verdicts per step."""
        return self.root / "judge" / "judged.jsonl"

    @property
    def store(self) -> Path:
        """adapt: the task store after adaptation (the next iteration starts from it)."""
        return self.root / "adapt" / "store"

    @property
    def adapt_report(self) -> Path:
        """adapt: the AdaptReport (accepted, rejected, proposals)."""
        return self.root / "adapt" / "report.json"

    @property
    def store_diff(self) -> Path:
        return self.root / "adapt" / "diff.json"

    @property
    def data(self) -> Path:
        return self.root / "data"

    def batch(self, role: str) -> Path:
        """data: the training samples of `role` ("policy" | "judge")."""
        return self.root / "data" / f"{role}.jsonl"

    @property
    def gates_report(self) -> Path:
        return self.root / "validate" / "report.json"

    def trained(self, role: str) -> Path:
        """train_policy / train_judge: the stage folder of `role`'s update."""
        if role not in ROLES:
            raise KeyError(f"unknown model role '{role}' (no stage train_{role}); valid: {list(ROLES)}")
        return self.root / f"train_{role}"

    def model(self, role: str) -> Path:
        return self.trained(role) / "model"

    @property
    def eval_metrics(self) -> Path:
        """evaluate: held-out and benchmark metrics (absent when the iteration was not evaluated)."""
        return self.root / "evaluate" / "metrics.json"

    @property
    def complete(self) -> Path:
        return self.root / COMPLETE


@dataclass(frozen=True)
class RunPaths:
    root: Path

    @classmethod
    def of(cls, run_dir: str | Path) -> "RunPaths":
        return cls(Path(run_dir).resolve())

    @property
    def config(self) -> Path:
        return self.root / CONFIG_FILE

    @property
    def seed_store(self) -> Path:
        return self.root / "seed" / "store"

    @property
    def heldout(self) -> Path:
        return self.root / "seed" / "heldout.jsonl"

    @property
    def coding_benchmark(self) -> Path:
        """seed (coding): held-out problems with a fixed program pool, to score the judge's tests."""
        return self.root / "seed" / "coding_benchmark.jsonl"

    @property
    def judge_benchmark(self) -> Path:
        """The run's copy of the fixed judge benchmark (eval.judge_benchmark), when configured."""
        return self.root / "seed" / "judge_benchmark.jsonl"

    @property
    def dev(self) -> Path:
        """The run's copy of the dev split (eval.dev_file), when configured: scored, never trained on."""
        return self.root / "seed" / "dev.jsonl"

    @property
    def judge_benchmark_dev(self) -> Path:
        """The run's copy of the dev judge benchmark (eval.dev_judge_benchmark), when configured."""
        return self.root / "seed" / "judge_benchmark_dev.jsonl"

    @property
    def coding_benchmark_dev(self) -> Path:
        """seed (coding): the dev counterpart of coding_benchmark, from the dev problems (eval.dev_file)."""
        return self.root / "seed" / "coding_benchmark_dev.jsonl"

    @property
    def reserved(self) -> Path:
        """Content hashes of the games no training may play (held-out and reserved task files)."""
        return self.root / "seed" / "reserved.json"

    @property
    def games(self) -> Path:
        """TextWorld: the run's content-addressed game cache (rla_core/envs/textworld/games.py)."""
        return self.root / "games"

    @property
    def init_models(self) -> Path:
        return self.root / "models" / "init"

    @property
    def bootstrap(self) -> Path:
        return self.root / "models" / "bootstrap"

    @property
    def baseline(self) -> Path:
        """Held-out metrics of the warm-started models (baseline/metrics.json)."""
        return self.root / "baseline"

    def iteration(self, k: int) -> Path:
        return self.root / ITERATIONS / iteration_folder(k)

    def it(self, k: int) -> IterationPaths:
        """Typed access to iteration k's files."""
        return IterationPaths(self.iteration(k))

    def stage(self, k: int, name: str) -> Path:
        return self.iteration(k) / name

    def is_complete(self, k: int) -> bool:
        return self.it(k).complete.is_file()

    def completed_iterations(self) -> list[int]:
        folder = self.root / ITERATIONS
        found = sorted(k for p in (folder.iterdir() if folder.is_dir() else ())
                       if p.is_dir() and (k := parse_iteration(p.name)) is not None)
        return [k for k in found if self.is_complete(k)]

    def model_dir(self, k: int, role: str) -> Path:
        """The `role` model ("policy" | "judge") that iteration k starts from."""
        for prev in range(k - 1, 0, -1):
            stage = self.it(prev).trained(role)
            if is_done(stage):
                return self.root / read_summary(stage, TrainSummary).model_dir
        return self.bootstrap / role

    def store_dir(self, k: int) -> Path:
        """The task store iteration k starts from: the latest earlier adapted store, else the seed."""
        for prev in range(k - 1, 0, -1):
            if is_done(self.stage(prev, "adapt")):
                return self.it(prev).store
        return self.seed_store

    def rel(self, path: Path) -> str:
        return str(Path(path).resolve().relative_to(self.root))


def run_config(run_dir: str | Path) -> Config:
    return load_run_config(RunPaths.of(run_dir).config)
