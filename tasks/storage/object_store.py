"""Where a run's outputs live besides its local folder: `local` (the run folder is the store) or `s3`.

With `s3`, every completed folder of the run is mirrored under `s3://<bucket>/<prefix>/<run name>/`
with the same relative paths: iteration stages (`iterations/iter_0001/rollout/...`) and run-level
folders (`seed/`, `models/init/`, `models/bootstrap/`, `baseline/`, `eval/iter_k/`). A folder is
uploaded right after its `_DONE` marker is written, and the marker is uploaded last, so a folder is
complete in S3 exactly when its marker key exists. Small run files (`config.yaml`,
`mlflow_run_id.txt`, the `COMPLETE` markers, DVC's `*.dvc` pointers) are uploaded as they appear.

A machine that lacks completed outputs fetches them before a stage runs (`hydrate`): a stage whose
marker is in S3 is downloaded and then skipped, so a run resumes on another machine. Only what later
stages read is fetched: the run-level folders, the current iteration's stages, and from earlier
iterations the latest task store and checkpoints (plus the folder a not-trained model points to).
"""
from __future__ import annotations

import functools
import os
import time
from pathlib import Path
from typing import Callable, Protocol

from rla_core.config import Config, StorageConfig
from rla_core.errors import UserError
from rla_core.fileio import atomic_file
from rla_core.registry import Registry
from tasks.paths import COMPLETE, CONFIG_FILE, ITERATIONS, RUN_ID_FILE, parse_iteration, run_config
from tasks.storage.files import DONE_MARKER, done_summary, is_done

RUN_FILES = (CONFIG_FILE, RUN_ID_FILE)  # the id lets another machine re-attach to the MLflow run
# what later iterations read (the store, the models): the stages declared @stage(carried=True), listed here
# because every stage imports this module (tests/tasks/test_paths_storage.py checks that the two agree)
CARRIED_STAGES = ("adapt", "train_policy", "train_judge")


class StorageError(UserError, RuntimeError):
    """The object store cannot be used (missing bucket, bad credentials, unreachable endpoint)."""


# Back-off between our attempts at one S3 call, on top of botocore's own (3 attempts, standard mode):
# a brief outage or throttling is ridden out; a store that stays down fails in ~1 minute, in one line.
RETRY_DELAYS_S = (2.0, 8.0, 30.0)
_TRANSIENT_CODES = {"500", "502", "503", "504", "InternalError", "ServiceUnavailable", "SlowDown", "Throttling",
                    "ThrottlingException", "RequestTimeout", "RequestTimeTooSkewed"}


def _transient(error: BaseException) -> bool:
    """Worth another attempt: connection trouble, timeouts, 5xx and throttling; not 403/404 and the like."""
    from boto3.exceptions import S3TransferFailedError, S3UploadFailedError
    from botocore.exceptions import BotoCoreError, ClientError

    if isinstance(error, ClientError):
        return str(error.response.get("Error", {}).get("Code", "")) in _TRANSIENT_CODES
    if isinstance(error, (S3UploadFailedError, S3TransferFailedError)):
        return not any(code in str(error) for code in ("403", "404", "NoSuchBucket", "AccessDenied"))
    return isinstance(error, (BotoCoreError, ConnectionError, TimeoutError))


def with_retries(what: str, call: Callable[[], object], delays: tuple[float, ...] | None = None) -> object:
    """`call()`, retried after each of `delays` (default RETRY_DELAYS_S) while its error is transient;
    then StorageError naming `what`. Non-transient errors are raised at once, unchanged."""
    delays = RETRY_DELAYS_S if delays is None else delays
    for attempt in range(len(delays) + 1):
        try:
            return call()
        except Exception as error:  # noqa: BLE001 - classified right below
            if not _transient(error):
                raise
            if attempt == len(delays):
                raise StorageError(f"{what} failed after {attempt + 1} attempts: {error}") from error
            time.sleep(delays[attempt])
    raise AssertionError("unreachable")


def is_run_file(rel: str) -> bool:
    """Small files kept in sync outside the folder protocol: the config, COMPLETE markers, DVC pointers."""
    name = rel.rsplit("/", 1)[-1]
    return rel in RUN_FILES or name == COMPLETE or name.endswith(".dvc")


def _files(folder: Path) -> list[Path]:
    """Files under `folder`, temp files (hidden names) left out, the _DONE marker last."""
    found = [p for p in folder.rglob("*") if p.is_file() and not any(part.startswith(".")
                                                                    for part in p.relative_to(folder).parts)]
    return sorted(found, key=lambda p: (p.name == DONE_MARKER, p.as_posix()))


class ObjectStore(Protocol):
    def check(self) -> None: ...
    def push_dir(self, folder: Path, run_files_under: Path | None = None) -> int: ...
    def ensure_pushed(self, folder: Path, run_files_under: Path | None = None) -> int: ...
    def pull_dir(self, folder: Path) -> bool: ...
    def push_file(self, path: Path) -> None: ...
    def pull_file(self, rel: str) -> bool: ...
    def hydrate(self, iteration: int | None = None) -> int: ...


class LocalStore:
    """The run folder is the store: nothing to upload or download."""

    def __init__(self, root: Path) -> None:
        self.root = root

    def check(self) -> None:
        return None

    def push_dir(self, folder: Path, run_files_under: Path | None = None) -> int:
        return 0

    def ensure_pushed(self, folder: Path, run_files_under: Path | None = None) -> int:
        return 0

    def pull_dir(self, folder: Path) -> bool:
        return is_done(folder)

    def push_file(self, path: Path) -> None:
        return None

    def pull_file(self, rel: str) -> bool:
        return (self.root / rel).is_file()

    def hydrate(self, iteration: int | None = None) -> int:
        return 0


@functools.lru_cache(maxsize=8)
def s3_client(endpoint_url: str | None, region: str | None):
    """One boto3 client per (endpoint, region): clients are thread-safe and slow to create (~0.1 s)."""
    import boto3
    from botocore.config import Config as BotoConfig

    # Few quick retries: a wrong endpoint must fail in seconds, not after minutes of back-off.
    boto_config = BotoConfig(retries={"max_attempts": 3, "mode": "standard"}, connect_timeout=5, read_timeout=60)
    return boto3.session.Session().client("s3", endpoint_url=endpoint_url, region_name=region, config=boto_config)


class S3Store:
    """A run folder mirrored under s3://bucket/prefix/<run name>/ (see the module docstring)."""

    def __init__(self, root: Path, config: StorageConfig, run_name: str) -> None:
        self.root, self.config = root, config
        self.bucket = str(config.bucket)
        self.base = "/".join(part.strip("/") for part in (config.prefix, run_name) if part.strip("/"))
        self.client = s3_client(config.endpoint_url, config.region)

    @property
    def where(self) -> str:
        return f"s3://{self.bucket}/{self.base} (endpoint {self.config.endpoint_url or 'AWS default'})"

    def key(self, path: Path) -> str:
        return f"{self.base}/{Path(path).resolve().relative_to(self.root).as_posix()}"

    def check(self) -> None:
        """Fail fast, in one line, when the bucket is missing or unreachable or the credentials are bad."""
        from botocore.exceptions import BotoCoreError, ClientError

        try:
            self.client.head_bucket(Bucket=self.bucket)
        except ClientError as error:
            code = error.response.get("Error", {}).get("Code", "?")
            why = {"404": "does not exist", "NoSuchBucket": "does not exist",
                   "403": "is not accessible with these credentials"}.get(code, f"cannot be used ({code})")
            raise StorageError(f"S3 bucket '{self.bucket}' {why} at {self.where}") from None
        except BotoCoreError as error:
            raise StorageError(f"S3 bucket '{self.bucket}' at {self.where}: {error}") from None

    # --- primitives -------------------------------------------------------------------------

    def upload(self, path: Path) -> None:
        key = self.key(path)
        with_retries(f"upload of {path} to s3://{self.bucket}/{key}",
                     lambda: self.client.upload_file(str(path), self.bucket, key))

    def download(self, rel: str) -> Path:
        """Fetch one object into the run folder atomically (temp file + rename); a failed attempt
        leaves nothing behind and the next starts afresh."""
        target = self.root / rel

        def fetch() -> None:
            with atomic_file(target) as temp:
                self.client.download_file(self.bucket, f"{self.base}/{rel}", str(temp))

        with_retries(f"download of s3://{self.bucket}/{self.base}/{rel}", fetch)
        return target

    def exists(self, rel: str) -> bool:
        from botocore.exceptions import ClientError

        def head() -> bool:
            try:
                self.client.head_object(Bucket=self.bucket, Key=f"{self.base}/{rel}")
                return True
            except ClientError as error:
                if error.response.get("Error", {}).get("Code") in ("404", "NoSuchKey", "NotFound"):
                    return False
                raise

        return bool(with_retries(f"lookup of s3://{self.bucket}/{self.base}/{rel}", head))

    def listing(self, under: str = "") -> dict[str, int]:
        """{path relative to the run folder: size} of every object under `under` (a relative folder)."""
        prefix = f"{self.base}/{under.strip('/')}/" if under.strip("/") else f"{self.base}/"

        def list_all() -> dict[str, int]:
            found: dict[str, int] = {}
            for page in self.client.get_paginator("list_objects_v2").paginate(Bucket=self.bucket, Prefix=prefix):
                for item in page.get("Contents", []):
                    found[item["Key"][len(self.base) + 1:]] = item["Size"]
            return found

        return with_retries(f"listing of s3://{self.bucket}/{prefix}", list_all)

    # --- folders and run files ----------------------------------------------------------------

    def push_dir(self, folder: Path, run_files_under: Path | None = None) -> int:
        """Upload every file of a completed folder, then the run files (COMPLETE, *.dvc: tiny, always
        re-sent) under `run_files_under`, then the folder's _DONE marker. Returns files uploaded."""
        files = _files(folder)
        marker = files.pop() if files and files[-1].name == DONE_MARKER else None
        if run_files_under is not None:
            files += [p for p in _files(run_files_under) if is_run_file(p.relative_to(self.root).as_posix())
                      and p not in files]
        for path in files + ([marker] if marker else []):
            self.upload(path)
        return len(files) + (marker is not None)

    def ensure_pushed(self, folder: Path, run_files_under: Path | None = None) -> int:
        """A folder done here whose marker is not in S3 (its upload failed after _DONE was written, e.g.
        the store was down): upload it now. Returns files uploaded (0 when S3 already has it)."""
        rel = folder.resolve().relative_to(self.root).as_posix()
        if not is_done(folder) or self.exists(f"{rel}/{DONE_MARKER}"):
            return 0
        return self.push_dir(folder, run_files_under)

    def push_file(self, path: Path) -> None:
        self.upload(path)

    def pull_file(self, rel: str) -> bool:
        """True when the file is here, or was in S3 and is now downloaded."""
        if (self.root / rel).is_file():
            return True
        if not self.exists(rel):
            return False
        self.download(rel)
        return True

    def pull_dir(self, folder: Path) -> bool:
        """True when `folder` is complete locally, or was complete in S3 and is now downloaded."""
        if is_done(folder):
            return True
        rel = folder.resolve().relative_to(self.root).as_posix()
        remote = self.listing(rel)
        if f"{rel}/{DONE_MARKER}" not in remote:
            return False
        self._download_folder(rel, remote)
        return True

    def _download_folder(self, rel: str, remote: dict[str, int]) -> None:
        keys = [k for k in remote if k.startswith(f"{rel}/")]
        # marker last: an interrupted download leaves the folder not done here
        for key in sorted(keys, key=lambda k: (k.endswith(f"/{DONE_MARKER}"), k)):
            self.download(key)

    def hydrate(self, iteration: int | None = None) -> int:
        """Download what this machine lacks of the completed run (see `needed_folders`); returns the
        number of folders fetched. `iteration` None: run files and run-level folders only."""
        remote = self.listing()
        for rel in remote:
            if is_run_file(rel) and not (self.root / rel).is_file():
                self.download(rel)
        fetched = 0
        for folder in needed_folders(remote, iteration, self._summary):
            if not is_done(self.root / folder):
                self._download_folder(folder, remote)
                fetched += 1
        return fetched

    def _summary(self, folder: str) -> dict:
        """The _DONE summary of a remote folder (fetched with the folder if needed)."""
        if not is_done(self.root / folder):
            self._download_folder(folder, self.listing(folder))
        return done_summary(self.root / folder)


def _iteration_of(folder: str) -> int | None:
    parts = folder.split("/")
    if len(parts) == 3 and parts[0] == ITERATIONS:
        return parse_iteration(parts[1])
    return None


def needed_folders(remote: dict[str, int], iteration: int | None, summary) -> list[str]:
    """Completed remote folders that stages of `iteration` may read: every run-level folder; every
    stage of `iteration`; of earlier iterations only the latest adapt/train_policy/train_judge, plus
    the folder a not-trained model stage points to (its summary's model_dir)."""
    done = sorted(rel.removesuffix(f"/{DONE_MARKER}") for rel in remote if rel.endswith(f"/{DONE_MARKER}"))
    chosen = [f for f in done if _iteration_of(f) is None]
    if iteration is None:
        return chosen
    chosen += [f for f in done if _iteration_of(f) == iteration]
    for stage in CARRIED_STAGES:
        earlier = [f for f in done if f.endswith(f"/{stage}") and (_iteration_of(f) or 0) < iteration]
        if not earlier:
            continue
        latest = max(earlier, key=_iteration_of)
        chosen.append(latest)
        model_dir = summary(latest).get("model_dir", "") if stage != "adapt" else ""
        owner = "/".join(model_dir.split("/")[:3])
        if owner in done and owner not in chosen:
            chosen.append(owner)
    return chosen


# storage.backend -> (run root, config) -> store
STORES: Registry[Callable[[Path, Config], "ObjectStore"]] = Registry("object store", "storage.backend")
STORES.add("local", lambda root, cfg: LocalStore(root))
STORES.add("s3", lambda root, cfg: S3Store(root, cfg.storage, cfg.run.name))


def open_run_store(run_dir: str | Path) -> ObjectStore:
    """The store of an existing run folder, from its config.yaml."""
    return open_store(run_config(run_dir), run_dir)


def fetch_done(run_dir: str | Path, folder: Path) -> bool:
    """True when `folder` is complete here, or complete in the store and now downloaded."""
    return is_done(folder) or open_run_store(run_dir).pull_dir(folder)


def publish(run_dir: str | Path, folder: Path) -> None:
    """Upload a folder whose _DONE marker was just written (no-op for the local store)."""
    open_run_store(run_dir).push_dir(folder)


def open_store(cfg: Config, run_dir: str | Path) -> ObjectStore:
    """The object store of a run, chosen by `storage.backend` (local | s3)."""
    return STORES.get(cfg.storage.backend)(Path(run_dir).resolve(), cfg)


def configure_mlflow_s3(storage: StorageConfig) -> None:
    """MLflow's S3 artifact store reads its endpoint from MLFLOW_S3_ENDPOINT_URL: default it to
    storage.endpoint_url (a value set by the user wins)."""
    if storage.endpoint_url:
        os.environ.setdefault("MLFLOW_S3_ENDPOINT_URL", storage.endpoint_url)


def dvc_remote_options(cfg: Config) -> dict[str, str]:
    """Options of an s3:// DVC remote: the endpoint (and region) of storage, for S3-compatible stores."""
    remote = cfg.versioning.remote or ""
    if not remote.startswith("s3://"):
        return {}
    options = {}
    if cfg.storage.endpoint_url:
        options["endpointurl"] = cfg.storage.endpoint_url
    if cfg.storage.region:
        options["region"] = cfg.storage.region
    return options
