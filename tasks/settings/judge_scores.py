"""Reuse of judge benchmark scores: a judge that did not change gets the scores it already got.

Every evaluation scores the judge on the fixed benchmarks (held-out and dev). A row with a fixed judge (the
ablation's rows a and b, or `judge.train: false`) evaluates the same weights, with the same seed and the
same sampling, at every evaluation, and so gets the same verdicts every time: on SmolLM2 that repeats
minutes of generation per evaluation. Each scoring is kept in the run's cache (cache/judge_scores/<key>/:
its metrics and its verdicts file); a later scoring with the same key copies the verdicts file and returns the
metrics instead of generating again. `rla ablation --warm-start` copies the cache with the warm start, so
the rows reuse the baseline's scores. The cache is not versioned: the evaluation's own outputs are
identical either way, and `rla reproduce` (a scratch folder, no cache) recomputes them.

The key is exact: it covers everything the scores depend on and nothing else.
- the judge's files (weights, tokenizer, config; not optimizer.pt), by content;
- the benchmark file, by content;
- the seed and the number of verdicts per step;
- the config, without the keys that cannot change a given judge's verdicts: the run's name and
  bookkeeping, the keys whose differences `--warm-start` allows between ablation rows (λ, judge.train,
  environment.adapt), and `train`/`bootstrap` (they act on the weights, which are hashed);
- the source of rla_core and tasks (code that changed may score differently);
- torch's version and thread count and the machine's CPU type (float results depend on them).
"""
from __future__ import annotations

import hashlib
import json
import logging
import os
import platform
import shutil
from pathlib import Path
from typing import Callable

import torch

from rla_core.config import RUN_FREE_KEYS, Config, key_under
from tasks.paths import RunPaths
from tasks.stages.datasets import sha256
from tasks.storage.files import read_json, write_json

METRICS_FILE = "metrics.json"
OUTPUT_FILE = "output"  # the scoring's verdicts (coding: tests) file, whatever the caller named it
# Config keys that cannot change the verdicts of given judge weights on a given benchmark at a given seed.
FREE_KEYS = (*RUN_FREE_KEYS, "run.name", "run.eval_every", "tracking", "versioning", "judge.train",
             "environment.adapt", "rollout.drop_finished", "rollout.prefix_reuse", "train", "bootstrap")
_CODE = tuple(Path(__file__).resolve().parents[2] / name for name in ("rla_core", "tasks"))
_SKIPPED_MODEL_FILES = {"optimizer.pt"}
_code_digest: str | None = None

log = logging.getLogger(__name__)


def _file_digest(hasher: "hashlib._Hash", path: Path) -> None:
    with path.open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 22), b""):
            hasher.update(block)


def _tree_digest(root: Path, pattern: str = "*", skip: frozenset[str] | set[str] = frozenset()) -> str:
    hasher = hashlib.sha256()
    for path in sorted(p for p in root.rglob(pattern) if p.is_file() and p.name not in skip):
        hasher.update(str(path.relative_to(root)).encode() + b"\0")
        _file_digest(hasher, path)
        hasher.update(b"\0")
    return hasher.hexdigest()


def code_digest() -> str:
    """sha256 over the .py files of rla_core and tasks (computed once per process)."""
    global _code_digest
    if _code_digest is None:
        _code_digest = hashlib.sha256("".join(_tree_digest(root, "*.py") for root in _CODE).encode()).hexdigest()
    return _code_digest


def _scoring_config(cfg: Config, weight_key: str) -> dict:
    free = (*FREE_KEYS, weight_key)

    def keep(tree: dict, prefix: str = "") -> dict:
        out = {}
        for name, value in tree.items():
            key = prefix + name
            if key_under(key, free):
                continue
            out[name] = keep(value, key + ".") if isinstance(value, dict) else value
        return out

    return keep(cfg.model_dump(mode="json"))


def scores_key(cfg: Config, weight_key: str, judge_dir: Path, benchmark: Path, seed: int, m: int) -> str:
    """The exact identity of a benchmark scoring (module docstring): equal keys, equal verdicts and metrics."""
    parts = {
        "judge": _tree_digest(Path(judge_dir), skip=_SKIPPED_MODEL_FILES),
        "benchmark": sha256(Path(benchmark)),
        "seed": seed, "m": m,
        "config": _scoring_config(cfg, weight_key),
        "code": code_digest(),
        "machine": [torch.__version__, torch.get_num_threads(), platform.machine(), _cpu_model()],
    }
    return hashlib.sha256(json.dumps(parts, sort_keys=True, default=str).encode()).hexdigest()


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor()


def cache_dir(paths: RunPaths) -> Path:
    """The run's reusable judge scores: <key>/metrics.json and <key>/output, the verdicts file (not versioned)."""
    return paths.root / "cache" / "judge_scores"


def copy_cache(source: RunPaths, target: RunPaths) -> list[str]:
    """Copy the finished cache entries of run `source` that run `target` lacks (with a copied warm start:
    exact by key, so a fixed judge is not scored again there); returns the keys copied."""
    theirs, mine = cache_dir(source), cache_dir(target)
    copied = []
    for entry in sorted(theirs.iterdir()) if theirs.is_dir() else ():
        if entry.is_dir() and not entry.name.endswith(".tmp") and not (mine / entry.name).exists():
            shutil.copytree(entry, mine / entry.name)
            copied.append(entry.name)
    return copied


def scored_once(paths: RunPaths, cfg: Config, weight_key: str, judge_dir: Path, benchmark: Path, out_file: Path,
                seed: int, m: int, score: Callable[[], dict[str, float]]) -> dict[str, float]:
    """`score()` (which writes `out_file`) unless the run's cache holds a scoring with the same key: then
    its verdicts file is copied to `out_file` and its metrics returned. A fresh scoring goes into the
    cache. eval.reuse_judge_scores: false always scores and leaves the cache alone."""
    if not cfg.eval.reuse_judge_scores:
        return score()
    key = scores_key(cfg, weight_key, judge_dir, benchmark, seed, m)
    entry = cache_dir(paths) / key
    if (entry / METRICS_FILE).is_file() and (entry / OUTPUT_FILE).is_file():
        shutil.copyfile(entry / OUTPUT_FILE, out_file)
        log.info("judge benchmark %s: this judge was scored before with the same key; its scores are reused",
                 benchmark.name)
        return dict(read_json(entry / METRICS_FILE))
    metrics = score()
    staging = entry.with_name(f"{key}.{os.getpid()}.tmp")
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir(parents=True)
    shutil.copyfile(out_file, staging / OUTPUT_FILE)
    write_json(staging / METRICS_FILE, metrics)
    try:
        shutil.rmtree(entry, ignore_errors=True)  # an entry without its files (interrupted by hand) is replaced
        os.replace(staging, entry)
    except OSError:  # another process filled the same entry first: equal by key
        shutil.rmtree(staging, ignore_errors=True)
    return metrics
