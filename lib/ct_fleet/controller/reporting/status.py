"""How far one fleet is, for people and scripts: what `ct-fleet status FLEET` shows (docs/json.md).

Two sources, one answer:
- an EC2 fleet from S3 and SQS (and EC2 for its worker count), so any machine with read
  access can ask, during the run or after it;
- a fleet of the embedded cloud from its run directory alone: that cloud lives only as
  long as its controller, but runs/<fleet>/ keeps the manifest and every verified result.
"""

from __future__ import annotations

import fcntl
import os
import re
from collections import Counter
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, Field

from ...errors import BadInput
from ...protocol import Manifest, manifest_key, run_layout
from ...services import instances, queues, store

STATUS_SCHEMA_VERSION: Literal[1] = 1

# Fleet ids are short hashes; the looser pattern still keeps a typed id from being a path.
FLEET_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9_-]{0,62}")


class TaskProgress(BaseModel):
    task: str
    jobs: int = Field(description="samples x epochs")
    results: int


class FleetStatus(BaseModel):
    schema_version: Literal[1] = STATUS_SCHEMA_VERSION
    fleet_id: str
    source: Literal["s3", "local"] = Field(description="s3: an EC2 fleet, read from S3 and SQS; local: runs/<fleet>/")
    state: Literal["running", "complete", "incomplete"] = Field(
        description=(
            "running: a controller drives it (local: holds its lock; EC2: renewed its lease in S3 within the"
            " lease's TTL), or, EC2 and unfinished, its workers run without one; else complete or not"
        )
    )
    jobs: int
    results: int = Field(description="jobs with a result")
    left: int
    model: str
    policy: str | None = None
    epochs: int
    tasks: list[TaskProgress]
    queues: dict[str, int] | None = Field(
        default=None, description="EC2 while its queues exist: work, work_in_flight, done, done_in_flight, dlq, ..."
    )
    workers: int | None = Field(default=None, description="EC2: instances of the fleet not yet terminated")
    merged: list[str] = Field(default=[], description="local: merged Inspect logs in runs/<fleet>/merged/")


def checked_fleet_id(fleet_id: str) -> str:
    if not FLEET_ID.fullmatch(fleet_id):
        raise BadInput(f"{fleet_id!r} is not a fleet id: give the id a run printed (e.g. `fleet 3f2a9c0d1e4b: ...`)")
    return fleet_id


def _progress(manifest: Manifest, done: set[str], *, running: bool, **kw: Any) -> FleetStatus:
    names = {t.key: t.name for t in manifest.tasks}
    jobs = Counter(names[j.task] for j in manifest.jobs)
    results = Counter(names[j.task] for j in manifest.jobs if j.job_id in done)
    total, finished = len(manifest.jobs), sum(results.values())
    return FleetStatus(
        fleet_id=manifest.fleet_id,
        state="running" if running else "complete" if finished == total else "incomplete",
        jobs=total,
        results=finished,
        left=total - finished,
        model=manifest.model,
        policy=manifest.policy,
        epochs=manifest.epochs,
        tasks=[TaskProgress(task=name, jobs=n, results=results[name]) for name, n in jobs.items()],
        **kw,
    )


def is_local_fleet(run_dir: Path) -> bool:
    """A fleet of the embedded cloud: its run directory keeps that cloud's log."""
    return (run_dir / run_layout.MANIFEST).is_file() and (run_dir / run_layout.MOTO_LOG).exists()


def local_status(run_dir: Path) -> FleetStatus:
    manifest = Manifest.from_json((run_dir / run_layout.MANIFEST).read_text())
    done = {p.name.removesuffix(run_layout.JOB_LOG_SUFFIX) for p in run_layout.job_logs(run_dir)}
    merged = sorted(str(p) for p in (run_dir / run_layout.MERGED).glob("*.eval"))
    return _progress(manifest, done, source="local", running=controller_here(run_dir), merged=merged)


def s3_status(s3: Any, sqs: Any, ec2: Any, bucket: str, fleet_id: str) -> FleetStatus:
    manifest = store.get_manifest(s3, bucket, fleet_id)
    if manifest is None:
        raise BadInput(f"no fleet {fleet_id}: s3://{bucket}/{manifest_key(fleet_id)} does not exist")
    done = store.list_result_job_ids(s3, bucket, fleet_id)
    found = queues.find_queues(sqs, fleet_id)
    depths = queues.depths(sqs, found, roles=("work", "done", "dlq")) if found else None
    workers = len(instances.live_instances(ec2, fleet_id))
    finished = {j.job_id for j in manifest.jobs} <= done
    running = remote_controller(s3, bucket, fleet_id) or (workers > 0 and not finished)
    return _progress(manifest, done, source="s3", running=running, queues=depths, workers=workers)


def remote_controller(s3: Any, bucket: str, fleet_id: str) -> bool:
    """True while a controller, on any machine, drives the EC2 fleet: its lease in S3 is
    fresh (a controller deletes it at its end; one that died stops renewing it)."""
    lease = store.read_lease(s3, bucket, fleet_id)
    return lease is not None and lease.held


def controller_here(run_dir: Path) -> bool:
    """True while a controller holds the fleet's lock (flock: gone with its process)."""
    try:
        fd = os.open(run_dir / run_layout.LOCK, os.O_RDONLY | os.O_CLOEXEC)
    except FileNotFoundError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    finally:
        os.close(fd)  # also drops a shared lock we took
    return False
