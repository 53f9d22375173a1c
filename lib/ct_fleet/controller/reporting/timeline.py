"""What the run report is drawn from, recorded in runs/<fleet_id>/ by the controller as the
run goes, so that the report of an EC2 fleet needs nothing but that directory:

attempts.jsonl  one line per done report of a job, as it arrives (every attempt: retries too)
workers.jsonl   one line per worker event: "launched" (why: first, replacement, scale_up;
                its slots and hourly price), "ended" (EC2 no longer lists it), "spot_notice"
phases.json     when the last run reached each of its phases (fleet/phases.py), epoch seconds
logs/           each worker's bootstrap log, fetched from S3 once the workers are gone

Lines are appended as events happen: a run killed mid-way leaves every line it had.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any, Literal

from ...protocol import DoneMessage, Resumed, run_layout
from ..planning import Job
from .missing import last_line
from .observe import log_keys

WorkerEvent = Literal["launched", "ended", "spot_notice", "rebalance"]


def _append(path: Path, line: dict[str, Any]) -> None:
    with open(path, "a", encoding="utf-8") as out:
        out.write(json.dumps(line, separators=(",", ":")) + "\n")


def record_attempt(run_dir: Path, report: DoneMessage, job: Job) -> None:
    """One done report of a job (its error already masked by the collector)."""
    _append(
        run_dir / run_layout.ATTEMPTS,
        {
            "job_id": job.job_id,
            "task": job.task,
            "sample_id": job.sample_id,
            "epoch": job.epoch,
            "instance_id": report.instance_id,
            "worker_id": report.worker_id,
            "outcome": report.outcome,
            "receive_count": report.receive_count,
            "received_at": report.received_at,
            "started_at": report.started_at,
            "finished_at": report.finished_at,
            "error_class": report.error_class,
            "error": last_line(report.error or "")[:300] or None,
            **_checkpoints(report),
        },
    )


def _checkpoints(report: DoneMessage) -> dict[str, Any]:
    """What the report says of the sample's checkpoints: the model calls and seconds its
    resume did not make and spend again, and what its checkpoints cost (count, seconds, bytes)."""
    out: dict[str, Any] = {}
    resumed = Resumed.of(report)
    if resumed is not None:
        out["calls_restored"] = resumed.calls_restored
        out["seconds_restored"] = resumed.seconds_restored
    cost = report.extra.get("checkpoints")
    if isinstance(cost, dict):
        out["checkpoints"] = {k: cost[k] for k in ("count", "seconds", "bytes") if isinstance(cost.get(k), int | float)}
    return out


def record_worker(run_dir: Path, event: WorkerEvent, instance_ids: list[str], **fields: Any) -> None:
    now = time.time()
    for instance_id in instance_ids:
        _append(run_dir / run_layout.WORKERS, {"event": event, "instance_id": instance_id, "at": now, **fields})


def record_phase(run_dir: Path, phase: str, *, first: bool = False) -> None:
    """The first time this run reached `phase`; `first` starts the run's record afresh."""
    path = run_dir / run_layout.PHASES
    times = {} if first else read_phases(run_dir)
    times.setdefault(phase, time.time())
    path.write_text(json.dumps(times))


def keep_boot_logs(s3: Any, bucket: str, fleet_id: str, run_dir: Path) -> int:
    """Copy the workers' bootstrap logs from S3 into runs/<fleet>/logs/; how many."""
    out = run_dir / run_layout.BOOT_LOGS
    keys = log_keys(s3, bucket, fleet_id)
    for key in keys:
        out.mkdir(exist_ok=True)
        s3.download_file(bucket, key, str(out / key.rsplit("/", 1)[-1]))
    return len(keys)


def read_lines(path: Path) -> list[dict[str, Any]]:
    """A .jsonl file's records; a line cut short by a killed controller is skipped."""
    if not path.exists():
        return []
    records = []
    for line in path.read_text(encoding="utf-8").splitlines():
        try:
            records.append(json.loads(line))
        except ValueError:
            continue
    return records


def read_phases(run_dir: Path) -> dict[str, float]:
    try:
        data = json.loads((run_dir / run_layout.PHASES).read_text())
    except (OSError, ValueError):
        return {}
    return {str(k): float(v) for k, v in data.items()} if isinstance(data, dict) else {}
