"""On the embedded cloud, a --checkpoint fleet's checkpoints outlive its moto server, as
its results do: kept on disk under runs/<fleet>/checkpoints/ and put back in S3 when a
rerun starts a new server.

The embedded cloud's S3 lives in the moto server's memory. A controller that is killed
alone leaves the server (and its workers) running for a rerun to adopt, and nothing is
lost; but once the server is gone too (its lease ran out, the machine restarted, it was
killed) a rerun starts on an empty S3, and its jobs would start their samples again. So
while the fleet runs a thread makes the copy on disk what S3 holds, every two seconds,
and a rerun on a new server puts the copy of the jobs still to run back before it
enqueues them.

The copy must be one a resume can use whenever it is cut short (the controller killed
mid-copy): a commit marker (ckpt-NNNNN.json) on disk without the restic snapshot it
commits makes Inspect's hydrate fail the sample. So each look fetches in the order
Inspect ships a checkpoint (restic's data, indexes and snapshots, then the markers) and
the attempts' started logs after everything else: a log on disk proves its attempt's
checkpoint dirs were whole in S3 (Inspect copies them before it writes the log) and are
on disk too. What went from S3 is removed only after that, in the reverse order (logs,
markers, then data). Putting the copy back follows the same order.

On EC2 the checkpoints stay in the fleet's S3 prefix and nothing here runs.
"""

from __future__ import annotations

import contextlib
import shutil
import threading
from collections.abc import Iterable
from pathlib import Path, PurePosixPath
from types import TracebackType
from typing import TYPE_CHECKING

from botocore.exceptions import BotoCoreError, ClientError

from ...cloud import Cloud
from ...protocol import Manifest, run_layout
from ...protocol.keys import checkpoints_prefix

if TYPE_CHECKING:
    from mypy_boto3_s3 import S3Client

LOOK_EVERY = 2.0  # seconds: S3 is the moto server on loopback, a listing costs milliseconds
PART = ".part"  # a file being fetched, renamed to its name once whole


def for_fleet(cloud: Cloud, manifest: Manifest, bucket: str, run_dir: Path) -> CheckpointMirror | None:
    """The fleet's mirror, when it checkpoints on a cloud whose S3 dies with it."""
    if cloud.storage_outlives_it() or not manifest.inspect_options.get("checkpoint"):
        return None
    return CheckpointMirror(cloud.client("s3"), bucket, manifest.fleet_id, run_dir)


def _relative(key: str, prefix: str) -> PurePosixPath | None:
    """The key's path below the prefix, None for one that would leave the copy's directory."""
    rel = PurePosixPath(key[len(prefix) :])
    if not key.startswith(prefix) or rel.is_absolute() or ".." in rel.parts or not rel.parts:
        return None
    return rel


def ship_order(paths: Iterable[PurePosixPath]) -> list[PurePosixPath]:
    """Inspect's checkpoint shipping order, each job's started logs (<job>/<attempt>.eval) last."""
    from ...inspect_private import checkpoint_ship_order

    logs = sorted(p for p in paths if len(p.parts) == 2 and p.suffix == ".eval")
    rest = [str(p) for p in paths if p not in logs]
    return [PurePosixPath(p) for p in checkpoint_ship_order(rest)] + logs


class CheckpointMirror:
    def __init__(self, s3: S3Client, bucket: str, fleet_id: str, run_dir: Path, interval: float = LOOK_EVERY) -> None:
        self.s3, self.bucket, self.interval = s3, bucket, interval
        self.prefix = checkpoints_prefix(fleet_id)
        self.root = run_layout.checkpoints_dir(run_dir)
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def _listing(self) -> dict[PurePosixPath, int]:
        out = {}
        for page in self.s3.get_paginator("list_objects_v2").paginate(Bucket=self.bucket, Prefix=self.prefix):
            for obj in page.get("Contents", []):
                rel = _relative(obj["Key"], self.prefix)
                if rel is not None:
                    out[rel] = obj["Size"]
        return out

    def kept(self) -> dict[PurePosixPath, Path]:
        """The copy on disk: each file by its path below the fleet's checkpoints prefix."""
        if not self.root.is_dir():
            return {}
        files = (p for p in self.root.rglob("*") if p.is_file() and not p.name.endswith(PART))
        return {PurePosixPath(p.relative_to(self.root).as_posix()): p for p in files}

    def _clear_parts(self) -> None:
        """Fetches a killed controller left half done."""
        if self.root.is_dir():
            for part in self.root.rglob(f"*{PART}"):
                part.unlink(missing_ok=True)

    def sync(self) -> None:
        """Make the copy on disk what S3 holds now: what is new fetched first, in shipping
        order; then what S3 no longer holds removed, in the reverse order."""
        stored = self._listing()
        self._clear_parts()
        local = self.kept()
        for rel in ship_order([r for r, size in stored.items() if r not in local or local[r].stat().st_size != size]):
            path = self.root / rel
            path.parent.mkdir(parents=True, exist_ok=True)
            part = path.with_name(path.name + PART)
            try:
                body = self.s3.get_object(Bucket=self.bucket, Key=self.prefix + str(rel))["Body"]
            except self.s3.exceptions.NoSuchKey:
                continue  # deleted since the listing
            with part.open("wb") as f:
                shutil.copyfileobj(body, f)
            part.replace(path)
        for rel in reversed(ship_order([r for r in local if r not in stored])):
            local[rel].unlink(missing_ok=True)
        self._prune()

    def _prune(self) -> None:
        if not self.root.is_dir():
            return
        for folder in sorted((p for p in self.root.rglob("*") if p.is_dir()), key=lambda p: -len(p.parts)):
            if not any(folder.iterdir()):
                folder.rmdir()
        if not any(self.root.iterdir()):
            self.root.rmdir()

    def restore(self, job_ids: Iterable[str]) -> int:
        """Put these jobs' copies back in a new, empty S3 (in shipping order) and drop the
        copies of every other job (it has its result). The files put back."""
        wanted = set(job_ids)
        if not self.root.is_dir():
            return 0
        self._clear_parts()
        for job_dir in self.root.iterdir():
            if job_dir.name not in wanted:
                shutil.rmtree(job_dir, ignore_errors=True)
        local = self.kept()
        for rel in ship_order(list(local)):
            self.s3.upload_file(str(local[rel]), self.bucket, self.prefix + str(rel))
        self._prune()
        return len(local)

    def __enter__(self) -> CheckpointMirror:
        self._thread = threading.Thread(target=self._loop, name="checkpoint-mirror", daemon=True)
        self._thread.start()
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=60)
        if kind is None:
            # Every job has its outcome: a stored result's checkpoints are gone from S3 (the
            # worker deletes them before its report), so they go from disk too. What is
            # left is a failed job's, for a rerun, or one kept on purpose (retention: retain).
            with contextlib.suppress(BotoCoreError, ClientError, OSError):
                self.sync()

    def _loop(self) -> None:
        while not self._stop.wait(self.interval):
            try:
                self.sync()
            except (BotoCoreError, ClientError, OSError):
                continue  # the next look retries; a dead server is the run's own news
