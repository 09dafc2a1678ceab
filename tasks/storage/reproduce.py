"""Restore and reproduce any iteration from the DVC remote alone.

At the end of iteration 0 (the `version_start` stage: seed store, held-out tasks, initial and warm-started
models, baseline) and of every iteration k (its `commit` stage), a **record** goes to the run's DVC remote
under `rla-records/iter_<k>.json`, beside DVC's content-addressed objects:

  config       the run's config.yaml text;
  pointers     the `.dvc` files of everything iteration k reads (the run-level folders, the task store
               and models it starts from) and of what it wrote (task store, batches, checkpoints);
  markers      the small files that tell iteration k where its inputs are (`_DONE` of the previous
               iteration's adapt/train stages, its COMPLETE);
  outputs      per stage folder of iteration k: sha256 of every file and the stage's metrics.

`rla restore` writes the pointers and markers of iteration k into a folder and pulls the files from the
remote. `rla reproduce` restores iteration k's inputs into a scratch folder, re-runs its stages there
(in-process, without Prefect) and compares every output file and metric with the record; on CPU they are
identical. Nothing here needs the original run folder or git: a fresh clone and the remote suffice.

Where they differ, the report says how much (relative differences, rla_core/diffs.py): per metric, recorded
and reproduced value; per checkpoint, each tensor's largest element difference, against the recorded file
pulled alone from the remote (or read from the run folder while it still has the recorded bytes); per
JSON/JSONL file, the lines that differ and the largest difference of their numeric fields; and one summary
line. Everything `reproduce` returns is written to `<scratch>/reproduce.json`.
"""
# Over 400 lines: records, restoring and comparing belong together (one record format); the re-run itself is
# tasks/storage/rerun.py.
from __future__ import annotations

import hashlib
import json
import logging
import math
import tempfile
import time
from pathlib import Path

from dvc.exceptions import DvcException
from safetensors import SafetensorError

from rla_core.config import Config, config_to_yaml, load_run_config
from rla_core.diffs import largest, metric_differences, record_differences, safetensors_differences
from rla_core.errors import BadValue, MissingFile
from rla_core.fileio import atomic_write_text
from tasks.storage.object_store import dvc_remote_options
from tasks.paths import CONFIG_FILE, ROLES, START_FOLDERS, RunPaths, iteration_folder, iteration_rel
from tasks.stage import stage
from tasks.storage.files import DONE_MARKER, done_summary, is_done
from tasks.summaries import CommitSummary, migrate
from tasks.storage.versioning import DVC_SUFFIX, _open, data_version, default_remote, init_run_repo, track

RECORDS = "rla-records"
START = 0  # iteration 0: what the loop starts from
TIMING = ("seconds", "time/", "_per_s", "elapsed", "peak_rss")  # keys that measure time or memory, not results
REPORT = "reproduce.json"  # in the scratch folder: what `reproduce` returns, the comparison with the record


def _clean_metrics(metrics: dict) -> dict:
    return {k: v for k, v in metrics.items() if not any(t in k for t in TIMING)}


def _untimed(tree: object) -> object:
    if isinstance(tree, dict):
        return {k: _untimed(v) for k, v in tree.items() if not any(t in str(k) for t in TIMING)}
    if isinstance(tree, list):
        return [_untimed(v) for v in tree]
    return tree


def _sha256(path: Path) -> str:
    """sha256 of the file's bytes; of a JSON file, of its content without timing keys (gate reports
    record how long each check took)."""
    if path.suffix == ".json":
        try:
            data = json.loads(path.read_text())
        except ValueError:
            data = None
        if data is not None:
            text = json.dumps(_untimed(data), sort_keys=True, separators=(",", ":"))
            return hashlib.sha256(text.encode()).hexdigest()
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def folder_outputs(folder: Path) -> dict:
    """{"files": {relative path: sha256 (see _sha256)} (every file but _DONE, DVC pointers, temp files),
    "metrics": the stage's metrics without timings}."""
    files = {}
    for path in sorted(folder.rglob("*")):
        rel = path.relative_to(folder)
        if (path.is_file() and path.name != DONE_MARKER and not path.name.endswith(DVC_SUFFIX)
                and not any(part.startswith(".") for part in rel.parts)):
            files[rel.as_posix()] = _sha256(path)
    summary = migrate(folder.name, done_summary(folder)) if is_done(folder) else {}
    return {"files": files, "metrics": _clean_metrics(summary.get("metrics", {}))}


def _pointer(paths: RunPaths, path: Path) -> tuple[str, str] | None:
    dvc = path.parent / f"{path.name}{DVC_SUFFIX}"
    return (paths.rel(dvc), dvc.read_text()) if dvc.is_file() else None


def _inputs(paths: RunPaths, k: int) -> tuple[list[Path], list[Path]]:
    """(tracked paths, marker files) that iteration k reads."""
    tracked = [paths.root / folder for folder in START_FOLDERS]
    markers: list[Path] = []
    if k > 1:
        tracked.append(paths.store_dir(k))
        tracked += [paths.model_dir(k, role) for role in ROLES]
        prev = paths.it(k - 1)
        markers += [prev.stage("adapt") / DONE_MARKER, prev.complete]
        markers += [prev.trained(role) / DONE_MARKER for role in ROLES]
    return tracked, markers


def build_record(paths: RunPaths, cfg: Config, k: int, stage_names: list[str]) -> dict:
    """The record of iteration k (k = 0: the run's start), from the run folder as it is now."""
    tracked, markers = _inputs(paths, k) if k else ([], [])
    if k:
        it = paths.it(k)
        tracked += [it.store, it.data] + [it.model(role) for role in ROLES if it.model(role).is_dir()]
        folders = {name: it.stage(name) for name in stage_names}
    else:
        tracked += [paths.root / folder for folder in START_FOLDERS]
        folders = {folder: paths.root / folder for folder in START_FOLDERS}
    pointers = dict(p for p in (_pointer(paths, t) for t in dict.fromkeys(tracked)) if p)
    return {
        "run": cfg.run.name, "iteration": k, "written": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "config": paths.config.read_text(),
        "pointers": pointers,
        "markers": {paths.rel(m): m.read_text() for m in markers if m.is_file()},
        "outputs": {name: folder_outputs(folder) for name, folder in folders.items() if folder.is_dir()},
    }


# ------------------------------------------------------------------ the remote's record shelf
def _s3_parts(url: str) -> tuple[str, str]:
    bucket, _, prefix = url.removeprefix("s3://").partition("/")
    return bucket, prefix.strip("/")


def record_name(k: int) -> str:
    return f"{RECORDS}/{iteration_folder(k)}.json"


def publish_record(remote: str, record: dict, options: dict[str, str] | None = None) -> str:
    """Write the record into the DVC remote (a local folder or s3://bucket/prefix); returns its location."""
    text = json.dumps(record, indent=1, sort_keys=True)
    name = record_name(record["iteration"])
    if remote.startswith("s3://"):
        from tasks.storage.object_store import s3_client, with_retries

        bucket, prefix = _s3_parts(remote)
        key = f"{prefix}/{name}" if prefix else name
        client = s3_client((options or {}).get("endpointurl"), (options or {}).get("region"))
        with_retries(f"upload of s3://{bucket}/{key}", lambda: client.put_object(Bucket=bucket, Key=key,
                                                                               Body=text.encode()))
        return f"s3://{bucket}/{key}"
    if "://" in remote:
        raise BadValue(f"records can be kept in a local or s3:// DVC remote, not {remote}")
    return str(atomic_write_text(Path(remote) / name, text))


def read_record(remote: str, k: int, options: dict[str, str] | None = None) -> dict:
    name = record_name(k)
    if remote.startswith("s3://"):
        from botocore.exceptions import ClientError

        from tasks.storage.object_store import s3_client

        bucket, prefix = _s3_parts(remote)
        client = s3_client((options or {}).get("endpointurl"), (options or {}).get("region"))
        try:
            body = client.get_object(Bucket=bucket, Key=f"{prefix}/{name}" if prefix else name)["Body"].read()
        except ClientError:
            raise MissingFile(f"no record of iteration {k} in {remote} ({name})") from None
        return json.loads(body)
    path = Path(remote) / name
    if not path.is_file():
        have = sorted(p.stem for p in (Path(remote) / RECORDS).glob("iter_*.json"))
        raise MissingFile(f"no record of iteration {k} in the DVC remote {remote} (has: {have or 'none'}); "
                          "records are written when an iteration completes with versioning.dvc on")
    return json.loads(path.read_text())


def remote_of(cfg: Config, run_dir: Path) -> str:
    return cfg.versioning.remote or default_remote(run_dir)


def publish_iteration_record(paths: RunPaths, cfg: Config, k: int) -> str:
    """Iteration k's record (its stage folders but the committing one) into the run's DVC remote."""
    names = [p.name for p in sorted(paths.iteration(k).iterdir()) if p.is_dir() and p.name != "commit"]
    return publish_record(remote_of(cfg, paths.root), build_record(paths, cfg, k, names), dvc_remote_options(cfg))


@stage(scope="run", folder="versions/start", summary=CommitSummary)
def version_start(paths: RunPaths, cfg: Config, k: int, out: Path) -> dict:
    """Iteration 0 under DVC: the seed store and held-out tasks, the initial and warm-started models and
    the baseline, tracked and pushed, and their record in the remote (`rla reproduce --iteration 0`)."""
    if not cfg.versioning.dvc:
        return {"metrics": {}}
    init_run_repo(paths.root, cfg.versioning.remote, dvc_remote_options(cfg))
    folders = [paths.root / folder for folder in START_FOLDERS]
    track(paths.root, folders)
    where = publish_record(remote_of(cfg, paths.root), build_record(paths, cfg, START, []), dvc_remote_options(cfg))
    return {"data_version": data_version(paths.root, folders), "record": where, "metrics": {}}


# ------------------------------------------------------------------ restore and reproduce
def restore_from_record(record: dict, target: Path, remote: str, options: dict[str, str] | None = None,
                        inputs_only: bool = False) -> list[str]:
    """Write the record's config, pointers and markers into `target` and pull the files from `remote`.
    With `inputs_only`, only what the iteration reads (not its own outputs). Returns the pulled paths."""
    target.mkdir(parents=True, exist_ok=True)
    if not (target / CONFIG_FILE).is_file():
        atomic_write_text(target / CONFIG_FILE, record["config"])
    init_run_repo(target, remote, options)
    pointers = record["pointers"]
    if inputs_only:
        outputs = f"{iteration_rel(record['iteration'])}/"
        pointers = {rel: text for rel, text in pointers.items() if not rel.startswith(outputs)}
        if record["iteration"] == START:
            pointers = {}
    for rel, text in pointers.items():
        atomic_write_text(target / rel, text)
    for rel, text in record["markers"].items():
        atomic_write_text(target / rel, text)
    if pointers:
        with _open(target.resolve()) as repo:
            repo.pull(targets=[str(target / rel) for rel in pointers], force=True)
    return sorted(rel.removesuffix(DVC_SUFFIX) for rel in pointers)


def scratch_config(record: dict, scratch: Path) -> str:
    """The record's config, kept local to the scratch folder: own MLflow store, local storage, and a DVC
    remote of its own (the original remote is only read)."""
    source = scratch / ".record-config.yaml"
    source.write_text(record["config"])
    cfg = load_run_config(source, ["tracking.mlflow_uri=null", "tracking.artifact_location=null",
                                      "storage.backend=local", f"versioning.remote={scratch / '.dvc-remote'}"])
    source.unlink()
    return config_to_yaml(cfg)


def compare(recorded: dict, got: dict) -> list[tuple[str, str, str]]:
    """[(folder, what, "recorded → got")] for every file hash or metric that differs (a metric NaN in both
    does not: see rla_core.diffs.metric_differences)."""
    diffs = []
    for folder, want in recorded.items():
        have = got.get(folder, {"files": {}, "metrics": {}})
        for rel in sorted(set(want["files"]) | set(have["files"])):
            a, b = want["files"].get(rel, "missing"), have["files"].get(rel, "missing")
            if a != b:
                diffs.append((folder, rel, f"{a[:12]} → {b[:12]}"))
        for key in metric_differences(want["metrics"], have["metrics"]):
            diffs.append((folder, key, f"{want['metrics'].get(key)} → {have['metrics'].get(key)}"))
    return diffs


# ------------------------------------------------------------------ how much the re-run differs
def _tracked_by(pointers: dict[str, str], rel: str) -> str | None:
    """The record's `.dvc` pointer (its path in the run) of the tracked path that is `rel` or holds it."""
    for pointer in pointers:
        tracked = pointer.removesuffix(DVC_SUFFIX)
        if rel == tracked or rel.startswith(f"{tracked}/"):
            return pointer
    return None


def fetch_recorded(record: dict, rels: list[str], target: Path, remote: str,
                   options: dict[str, str] | None = None) -> dict[str, Path]:
    """The recorded bytes of the files `rels` (paths in the run) that the record's pointers track, pulled
    from the DVC remote into `target` (a DVC project of its own): only those files, not the rest of
    their tracked folders (DVC pulls a file inside a tracked folder by itself). Returns {rel: path}."""
    wanted = {rel: pointer for rel in rels if (pointer := _tracked_by(record["pointers"], rel))}
    if not wanted:
        return {}
    init_run_repo(target, remote, options)
    for pointer in set(wanted.values()):
        atomic_write_text(target / pointer, record["pointers"][pointer])
    try:
        with _open(target.resolve()) as repo:
            repo.pull(targets=[str(target / rel) for rel in wanted], force=True)
    except DvcException as error:  # e.g. objects missing from the remote: those files get no magnitude
        logging.getLogger(__name__).warning("recorded files not pulled from %s: %s", remote, error)
    return {rel: target / rel for rel in wanted if (target / rel).is_file()}


def _recorded_files(record: dict, hashes: dict[str, str], run_dir: Path, target: Path, remote: str,
                    options: dict[str, str] | None) -> dict[str, Path]:
    """{rel: a file with the recorded bytes} for the files `hashes` ({path in the run: recorded sha256}):
    the original run folder's own file where it still has those bytes, else the DVC remote's object.
    Only a file whose sha256 is the recorded one is taken; files found neither way are left out."""
    found = {rel: run_dir / rel for rel, sha in hashes.items()
             if (run_dir / rel).is_file() and _sha256(run_dir / rel) == sha}
    pulled = fetch_recorded(record, [rel for rel in hashes if rel not in found], target, remote, options)
    found.update({rel: path for rel, path in pulled.items() if _sha256(path) == hashes[rel]})
    return found


def _records(path: Path) -> list:
    """The lines of a JSONL file (blank ones skipped), or a JSON file as one line, without timing keys."""
    text = path.read_text()
    lines = [text] if path.suffix == ".json" else [line for line in text.splitlines() if line.strip()]
    return [_untimed(json.loads(line)) for line in lines]


def _tensor_detail(recorded: Path, reproduced: Path) -> dict:
    """A checkpoint's differences: "rel" the largest over its tensors, "where" that tensor, "tensors"
    {name: relative difference (None: on one side only, or shapes differ)} of those that differ, largest
    first, and the count of equal ones."""
    diffs = safetensors_differences(recorded, reproduced)
    where, rel = largest(diffs)
    differ = {name: v for name, v in diffs.items() if v != 0.0}
    ranked = dict(sorted(differ.items(), key=lambda item: -math.inf if item[1] is None else -item[1]))
    return {"kind": "tensors", "rel": rel, "where": where, "tensors": ranked,
            "equal_tensors": len(diffs) - len(differ)}


def file_detail(recorded: Path | None, reproduced: Path | None) -> dict:
    """How much one differing output file differs: {"kind": "tensors" | "records" | "bytes", "rel":
    largest relative difference or None (no magnitude; "note" says why), ...}. `recorded` None: its
    recorded bytes could not be had; `reproduced` None: the re-run did not write it."""
    if recorded is None or reproduced is None:
        note = ("the re-run did not write it" if reproduced is None else "its recorded bytes are neither in "
                "the DVC remote (only tracked files are) nor in the run folder: only their sha256 is recorded")
        return {"kind": "bytes", "rel": None, "note": note}
    try:
        if reproduced.suffix == ".safetensors":
            return _tensor_detail(recorded, reproduced)
        if reproduced.suffix in (".json", ".jsonl"):
            return {"kind": "records", **record_differences(_records(recorded), _records(reproduced))}
    except (SafetensorError, ValueError, OSError) as error:
        return {"kind": "bytes", "rel": None, "note": f"not comparable: {error}"}
    return {"kind": "bytes", "rel": None, "note": "neither a checkpoint nor a record file"}


def _folder_rel(k: int, folder: str) -> str:
    """Where a recorded stage folder lies in a run: `seed` (iteration 0), `iterations/iter_0002/judge`."""
    return folder if k == START else f"{iteration_rel(k)}/{folder}"


def _file_rows(record: dict, got: dict, scratch: Path, run_dir: Path, remote: str,
               options: dict[str, str] | None) -> list[dict]:
    """One row per output file whose sha256 differs: folder, file, both hashes and its file_detail."""
    k, rows = record["iteration"], []
    for folder, want in record["outputs"].items():
        have = got.get(folder, {"files": {}})["files"]
        for rel in sorted(set(want["files"]) | set(have)):
            a, b = want["files"].get(rel, "missing"), have.get(rel, "missing")
            if a != b:
                rows.append({"folder": folder, "file": rel, "path": f"{_folder_rel(k, folder)}/{rel}",
                             "recorded": a, "reproduced": b})
    hashes = {row["path"]: row["recorded"] for row in rows if row["recorded"] != "missing"}
    with tempfile.TemporaryDirectory(dir=scratch, prefix=".recorded-") as fetched:
        sources = _recorded_files(record, hashes, run_dir, Path(fetched), remote, options)
        for row in rows:
            mine = None if row["reproduced"] == "missing" else scratch / row["path"]
            row.update(file_detail(sources.get(row["path"]), mine) if row["recorded"] != "missing" else
                       {"kind": "bytes", "rel": None, "note": "new: the record has no such file"})
    return rows


def _metric_rows(recorded: dict, got: dict) -> list[dict]:
    """One row per differing metric: folder, metric, recorded and reproduced value (None: absent), and
    their relative difference (None: no magnitude)."""
    rows = []
    for folder, want in recorded.items():
        have = got.get(folder, {"metrics": {}})["metrics"]
        for key, rel in metric_differences(want["metrics"], have).items():
            rows.append({"folder": folder, "metric": key, "recorded": want["metrics"].get(key),
                         "reproduced": have.get(key), "rel": rel})
    return rows


def _summary(metric_rows: list[dict], file_rows: list[dict]) -> dict:
    """{"identical", "differ", "max_rel" (the largest relative difference, 0.0 when identical, None when
    no difference has a magnitude), "where" (of it), "unmeasured" (differences without a magnitude),
    "text" (one line)}."""
    named = {f"{r['folder']} {r['metric']}": r["rel"] for r in metric_rows}
    named.update({f"{r['folder']}/{r['file']}" + (f" [{r['where']}]" if r.get("where") else ""): r["rel"]
                  for r in file_rows})
    where, rel = largest(named)
    unmeasured = sum(v is None for v in named.values())
    if not named:
        return {"identical": True, "differ": 0, "max_rel": 0.0, "where": None, "unmeasured": 0,
                "text": "identical"}
    text = f"{len(named)} differ: " + (f"largest relative difference {rel:.3g} at {where}" if rel is not None
                                      else "none with a magnitude")
    text += f"; {unmeasured} without a magnitude" if unmeasured and rel is not None else ""
    return {"identical": False, "differ": len(named), "max_rel": rel, "where": where, "unmeasured": unmeasured,
            "text": text}


def explain(record: dict, got: dict, scratch: Path, run_dir: Path, remote: str,
            options: dict[str, str] | None = None) -> dict:
    """How much the re-run (`got`: folder_outputs per stage folder, its files in `scratch`) differs from
    the record: {"summary": _summary, "metrics": _metric_rows, "files": _file_rows}."""
    metric_rows = _metric_rows(record["outputs"], got)
    file_rows = _file_rows(record, got, scratch, run_dir, remote, options)
    return {"summary": _summary(metric_rows, file_rows), "metrics": metric_rows, "files": file_rows}


def report_lines(report: dict, limit: int = 50, tensors: int = 5) -> list[str]:
    """The report as text: a line per differing metric and file (at most `limit`), the `tensors` most
    different tensors under a checkpoint, and the summary line last."""
    lines = []
    for row in report["metrics"]:
        lines.append(f"  {row['folder']:14s} {row['metric']:40s} {row['recorded']} → {row['reproduced']}  "
                     f"rel {_rel(row['rel'])}")
    for row in report["files"]:
        lines.append(f"  {row['folder']:14s} {row['file']:40s} {row['recorded'][:12]} → {row['reproduced'][:12]}  "
                     f"rel {_rel(row['rel'])}  {_file_note(row)}")
        lines += [f"      {name:52s} rel {_rel(v)}" for name, v in list(row.get("tensors", {}).items())[:tensors]]
    shown = lines[:limit] + ([f"  … {len(lines) - limit} more lines in the report file"] if len(lines) > limit
                             else [])
    return shown + [f"summary: {report['summary']['text']}"]


def _rel(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.3g}"


def _file_note(row: dict) -> str:
    """What a file row adds: the most different tensor or record field, or why it has no magnitude."""
    if row["kind"] == "tensors":
        total = len(row["tensors"]) + row["equal_tensors"]
        return f"(largest: {row['where']}; {len(row['tensors'])} of {total} tensors differ)"
    if row["kind"] == "records":
        where = f"; largest at {row['where']}" if row["where"] else ""
        return f"({row['lines_differ']} of {max(row['lines'])} lines differ{where})"
    return f"({row['note']})"
