"""Where every stage reads and writes inside a run folder, and which inputs an iteration uses.

runs/<name>/
  config.yaml            the resolved config of the run
  seed/store/            the seed task store        seed/heldout.jsonl   held-out tasks (never trained on)
  models/init/           tokenizer + untrained tiny models      models/bootstrap/{policy,judge[,environment]}/
  iterations/iter_0001/<stage>/...   each stage folder ends with a _DONE marker; COMPLETE last
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from rla_core.config import Config, load_config
from tasks.storage import done_summary, is_done

STAGES = ("select", "rollout", "judge", "adapt", "data", "validate", "train_policy", "train_judge",
          "evaluate", "commit")
COMPLETE = "COMPLETE"


@dataclass(frozen=True)
class RunPaths:
    root: Path

    @classmethod
    def of(cls, run_dir: str | Path) -> "RunPaths":
        return cls(Path(run_dir).resolve())

    @property
    def config(self) -> Path:
        return self.root / "config.yaml"

    @property
    def seed_store(self) -> Path:
        return self.root / "seed" / "store"

    @property
    def heldout(self) -> Path:
        return self.root / "seed" / "heldout.jsonl"

    @property
    def judge_benchmark(self) -> Path:
        """The run's copy of the fixed judge benchmark (eval.judge_benchmark), when configured."""
        return self.root / "seed" / "judge_benchmark.jsonl"

    @property
    def reserved(self) -> Path:
        """Content hashes of the games no training may play (held-out and reserved task files)."""
        return self.root / "seed" / "reserved.json"

    @property
    def init_models(self) -> Path:
        return self.root / "models" / "init"

    @property
    def bootstrap(self) -> Path:
        return self.root / "models" / "bootstrap"

    def iteration(self, k: int) -> Path:
        return self.root / "iterations" / f"iter_{k:04d}"

    def stage(self, k: int, name: str) -> Path:
        if name not in STAGES:
            raise KeyError(f"unknown stage '{name}'; valid: {list(STAGES)}")
        return self.iteration(k) / name

    def is_complete(self, k: int) -> bool:
        return (self.iteration(k) / COMPLETE).is_file()

    def completed_iterations(self) -> list[int]:
        found = sorted(int(p.name.split("_")[1]) for p in (self.root / "iterations").glob("iter_*")
                       if p.is_dir())
        return [k for k in found if self.is_complete(k)]

    def model_dir(self, k: int, role: str) -> Path:
        """The `role` model ("policy" | "judge") that iteration k starts from."""
        for prev in range(k - 1, 0, -1):
            stage = self.stage(prev, f"train_{role}")
            if is_done(stage):
                return self.root / done_summary(stage)["model_dir"]
        return self.bootstrap / role

    def store_dir(self, k: int) -> Path:
        """The task store iteration k starts from: the latest earlier adapted store, else the seed."""
        for prev in range(k - 1, 0, -1):
            if is_done(self.stage(prev, "adapt")):
                return self.stage(prev, "adapt") / "store"
        return self.seed_store

    def rel(self, path: Path) -> str:
        return str(Path(path).resolve().relative_to(self.root))


def run_config(run_dir: str | Path) -> Config:
    return load_config([RunPaths.of(run_dir).config])
