"""Done reports as a worker sends them, for the controller's pure parts and the reporter."""

from __future__ import annotations

from ct_fleet.protocol import DoneMessage


def done(
    job_id: str,
    outcome: str = "success",
    *,
    fleet_id: str = "f",
    receive_count: int = 1,
    error_class: str | None = None,
    error: str | None = None,
) -> DoneMessage:
    """A done report of `job_id` from worker i-1/1 (started at 10.0, finished at 12.5)."""
    return DoneMessage(
        type="done",
        fleet_id=fleet_id,
        instance_id="i-1",
        worker_id="i-1/1",
        job_id=job_id,
        outcome=outcome,  # type: ignore[arg-type]
        receive_count=receive_count,
        started_at=10.0,
        finished_at=12.5,
        error_class=error_class,  # type: ignore[arg-type]
        error=error,
    )
