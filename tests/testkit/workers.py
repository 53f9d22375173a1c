"""A worker's settings and command jobs, for tests that run a Worker or its parts in this
process (no instance, no fleet.env)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from ct_fleet.protocol import WorkMessage
from ct_fleet.worker.settings import WorkerSettings

REPO = Path(__file__).resolve().parents[2]


def worker_settings(fleet_id: str, work_dir: Path, **given: Any) -> WorkerSettings:
    """WorkerSettings for FLEET_ID working in WORK_DIR, this repository as its code and this
    process's environment as its own; GIVEN replaces any field, the rest are these defaults."""
    fields: dict[str, Any] = {
        "bucket": "unused",
        "instance_id": "i-1",
        "code_root": REPO,
        "max_concurrency": 1,
        "idle_timeout": 60,
        "visibility_timeout": 60,
        "heartbeat_interval": 60,
        "retry_backoff": 60,
        "environ": dict(os.environ),
    }
    return WorkerSettings(fleet_id=fleet_id, work_dir=work_dir, **{**fields, **given})


def command_job(fleet_id: str, job_id: str, command: str) -> WorkMessage:
    """A job of kind "command": COMMAND in bash, its result stored as FLEET_ID/JOB_ID.eval."""
    return WorkMessage(
        fleet_id=fleet_id,
        job_id=job_id,
        sample_id=f"s-{job_id}",
        epoch=1,
        task_spec="",
        task_args={},
        model="",
        code_sha="",
        result_key=f"{fleet_id}/{job_id}.eval",
        time_limit=0,
        kind="command",
        command=command,
    )
