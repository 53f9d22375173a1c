"""How far one fleet is, for people and scripts: what `ct-fleet status FLEET` shows (docs/json.md).

Two sources, one answer:
- an EC2 fleet from S3 and SQS (and EC2 for its worker count), so any machine with read
  access can ask, during the run or after it;
- a fleet of the embedded cloud from its run directory alone: that cloud lives only as
  long as its controller, but runs/<fleet>/ keeps the manifest and every verified result.

Each task of the manifest is one task x model, shown with its own model and, where a
merged log of it is on this machine, its metrics (merged.py). `ct-fleet fleets` is
local_status of every run directory here.
"""

from __future__ import annotations

import fcntl
import os
import re
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, Field

from ...errors import BadInput
from ...protocol import Manifest, manifest_key, run_layout
from ...services import instances, queues, store
from .merged import by_task, merged_results, policy_of

STATUS_SCHEMA_VERSION: Literal[1] = 1

# Fleet ids are short hashes; the looser pattern still keeps a typed id from being a path.
FLEET_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9_-]{0,62}")


class TaskProgress(BaseModel):
    """One task x model of the fleet: a task of its manifest, with a merged log of its own."""

    task: str
    model: str = Field(description="the model this task runs with")
    policy: str | None = Field(default=None, description="setting runs: the policy the task runs under")
    jobs: int = Field(description="samples x epochs")
    epochs: int = Field(description="the epochs each of its samples runs: its own (Task(epochs=...)) or the fleet's")
    results: int
    status: str | None = Field(
        default=None,
        description='its merged log\'s status: "success", "error", "started" (the results so far); null: none yet',
    )
    metrics: dict[str, dict[str, float]] | None = Field(
        default=None,
        description="scorer -> metric -> value of its merged log (the results so far while it runs); null: none here",
    )
    log: str | None = Field(default=None, description="its merged Inspect log, where there is one on this machine")


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
    model: str = Field(description="the manifest's model: the fleet's first; each task's own is tasks[].model")
    models: list[str] = Field(default=[], description="every model of the fleet, in the order of its tasks")
    policy: str | None = Field(default=None, description="setting runs: the policy their tasks run under")
    epochs: int = Field(
        description="the fleet's epochs; where its tasks run their own, the most of any (tasks[].epochs)"
    )
    created_at: float | None = Field(
        default=None, description="epoch seconds its manifest was last written: when its last run enqueued its jobs"
    )
    cloud: Literal["embedded", "ec2"] | None = Field(
        default=None, description="embedded: ran on this machine's embedded AWS; ec2: on AWS"
    )
    tasks: list[TaskProgress] = Field(description="one per task x model")
    queues: dict[str, int] | None = Field(
        default=None, description="EC2 while its queues exist: work, work_in_flight, done, done_in_flight, dlq, ..."
    )
    workers: int | None = Field(default=None, description="EC2: instances of the fleet not yet terminated")
    merged: list[str] = Field(default=[], description="local: merged Inspect logs in runs/<fleet>/merged/")


def checked_fleet_id(fleet_id: str) -> str:
    if not FLEET_ID.fullmatch(fleet_id):
        raise BadInput(f"{fleet_id!r} is not a fleet id: give the id a run printed (e.g. `fleet 3f2a9c0d1e4b: ...`)")
    return fleet_id


def _progress(
    manifest: Manifest, done: set[str], *, running: bool, run_dir: Path | None = None, **kw: Any
) -> FleetStatus:
    """Counted per task of the manifest (a task x model), never per name: a grid's tasks share theirs."""
    jobs = Counter(j.task for j in manifest.jobs)
    results = Counter(j.task for j in manifest.jobs if j.job_id in done)
    total, finished = len(manifest.jobs), sum(results.values())
    merged = by_task(manifest, merged_results(run_dir)) if run_dir is not None else {}
    tasks = []
    for task in manifest.tasks:
        log = merged.get(task.key)
        tasks.append(
            TaskProgress(
                task=task.name,
                model=manifest.model_of(task),
                policy=policy_of(manifest, task.setting),
                jobs=jobs[task.key],
                epochs=manifest.epochs_of(task),
                results=results[task.key],
                status=log.status if log else None,
                metrics=log.metrics if log else None,
                log=log.log if log else None,
            )
        )
    return FleetStatus(
        fleet_id=manifest.fleet_id,
        state="running" if running else "complete" if finished == total else "incomplete",
        jobs=total,
        results=finished,
        left=total - finished,
        model=manifest.model,
        models=manifest.models,
        policy=manifest.policy,
        epochs=manifest.epochs,
        created_at=manifest.created_at or None,
        tasks=tasks,
        **kw,
    )


def is_local_fleet(run_dir: Path) -> bool:
    """A fleet of the embedded cloud: its run directory keeps that cloud's log."""
    return (run_dir / run_layout.MANIFEST).is_file() and (run_dir / run_layout.MOTO_LOG).exists()


def local_status(run_dir: Path) -> FleetStatus:
    """A fleet from its run directory alone: runs/<fleet>/ of the embedded cloud, or of an
    EC2 fleet run from this machine (its results as fetched here)."""
    manifest = Manifest.from_json((run_dir / run_layout.MANIFEST).read_text())
    done = {p.name.removesuffix(run_layout.JOB_LOG_SUFFIX) for p in run_layout.job_logs(run_dir)}
    merged = sorted(str(p) for p in (run_dir / run_layout.MERGED).glob("*.eval"))
    return _progress(
        manifest,
        done,
        source="local",
        running=controller_here(run_dir),
        run_dir=run_dir,
        merged=merged,
        cloud="embedded" if is_local_fleet(run_dir) else "ec2",
    )


def s3_status(s3: Any, sqs: Any, ec2: Any, bucket: str, fleet_id: str, run_dir: Path | None = None) -> FleetStatus:
    """An EC2 fleet from S3 and SQS; its metrics from run_dir's merged logs, when it ran from here."""
    manifest = store.get_manifest(s3, bucket, fleet_id)
    if manifest is None:
        raise BadInput(f"no fleet {fleet_id}: s3://{bucket}/{manifest_key(fleet_id)} does not exist")
    done = store.list_result_job_ids(s3, bucket, fleet_id)
    found = queues.find_queues(sqs, fleet_id)
    depths = queues.depths(sqs, found, roles=("work", "done", "dlq")) if found else None
    workers = len(instances.live_instances(ec2, fleet_id))
    finished = {j.job_id for j in manifest.jobs} <= done
    running = remote_controller(s3, bucket, fleet_id) or (workers > 0 and not finished)
    return _progress(
        manifest, done, source="s3", running=running, run_dir=run_dir, queues=depths, workers=workers, cloud="ec2"
    )


def local_fleets(runs: Path, on_skip: Callable[[Path, str], None] | None = None) -> list[FleetStatus]:
    """Every fleet this machine keeps a run directory of (runs/<fleet_id>/ with a manifest),
    the newest first. on_skip(run_dir, why) hears of each one whose manifest this version
    cannot read."""
    fleets = []
    for run_dir in sorted(runs.iterdir()) if runs.is_dir() else ():
        if not FLEET_ID.fullmatch(run_dir.name) or not (run_dir / run_layout.MANIFEST).is_file():
            continue
        try:
            fleets.append(local_status(run_dir))
        except (OSError, ValueError) as exc:
            if on_skip:
                on_skip(run_dir, str(exc))
    return sorted(fleets, key=lambda f: -(f.created_at or 0.0))


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
