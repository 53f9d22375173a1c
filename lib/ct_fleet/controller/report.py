"""The end-of-run account of what did not make it: every job missing from the merged run,
named with its reason, and the jobs that succeeded after they were dead-lettered."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from .plan import Job
from .tracker import JobTracker

if TYPE_CHECKING:
    from ..merge import MergedTask


def _last_line(text: str) -> str:
    lines = text.strip().splitlines()
    return lines[-1][:300] if lines else ""


def _reason(state: JobTracker, job_id: str, stopped_reason: str | None) -> str:
    now = state.state.get(job_id, "pending")
    if now == "dead":
        cls, error = state.dead_errors[job_id]
        return f"dead-lettered ({cls}: {_last_line(error) or 'no error reported'})"
    if now == "finished" and state.outcome.get(job_id) == "failed":
        cls, error = state.last_error.get(job_id, ("failed", ""))
        return f"failed ({cls}: {_last_line(error) or 'no error reported'})"
    if now == "finished":
        return "its result could not be read by the merge"
    stopped = f" (run stopped: {stopped_reason})" if stopped_reason else ""
    return f"not finished{stopped}"


def missing_jobs(
    jobs: Sequence[Job],
    merged: Sequence[MergedTask],
    state: JobTracker,
    *,
    fleet_id: str,
    stopped_reason: str | None = None,
) -> list[dict[str, Any]]:
    """One row per job whose (sample, epoch) is not in the merged run, with its reason."""
    absent: set[tuple[str, int]]
    if merged:
        absent = {(str(sid), epoch) for task in merged for sid, epoch in task.missing}
    else:
        absent = {(str(job.sample_id), job.epoch) for job in jobs}
    return [
        {
            "job_id": job.job_id,
            "sample_id": job.sample_id,
            "epoch": job.epoch,
            "reason": _reason(state, job.job_id, stopped_reason),
            "rerun": f"bin/ct-fleet run-job {fleet_id} {job.job_id}",
        }
        for job in jobs
        if (str(job.sample_id), job.epoch) in absent
    ]
