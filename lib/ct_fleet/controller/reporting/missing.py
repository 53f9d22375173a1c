"""The end-of-run account of what did not make it: the jobs that ended without a result
(dead letters, final failures), and every job missing from the merged run, with its reason."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any

from ...protocol import mask
from ..planning import Job
from .states import JobStates

if TYPE_CHECKING:
    from ...merge import MergedTask


def last_line(text: str) -> str:
    """The line of a job's error text that says what went wrong (its last)."""
    lines = [line.strip() for line in text.strip().splitlines() if line.strip()]
    return lines[-1] if lines else ""


def rerun_command(fleet_id: str, job_id: str) -> str:
    return f"bin/ct-fleet run-job {fleet_id} {job_id}"


def dead_jobs(
    jobs: Sequence[Job], state: JobStates, *, fleet_id: str, secrets: Iterable[str] = ()
) -> list[dict[str, Any]]:
    """Jobs that ended without a result: dead letters, and final failures (fatal, timeout)."""
    by_id = {job.job_id: job for job in jobs}
    ended = dict(state.dead_errors)
    for job_id, outcome in state.outcome.items():
        if outcome == "failed" and job_id not in ended:
            ended[job_id] = state.last_error.get(job_id, ("failed", ""))
    hidden = list(secrets)
    return [
        {
            "job_id": job_id,
            "sample_id": by_id[job_id].sample_id,
            "epoch": by_id[job_id].epoch,
            "error_class": error_class,
            "error": mask(last_line(error), hidden),
            "dead": job_id in state.dead_errors,
            "rerun": rerun_command(fleet_id, job_id),
        }
        for job_id, (error_class, error) in sorted(ended.items())
    ]


def _reason(state: JobStates, job_id: str, stopped_reason: str | None) -> str:
    now = state.state.get(job_id, "pending")
    if now == "dead":
        cls, error = state.dead_errors[job_id]
        return f"dead-lettered ({cls}: {last_line(error)[:300] or 'no error reported'})"
    if now == "finished" and state.outcome.get(job_id) == "failed":
        cls, error = state.last_error.get(job_id, ("failed", ""))
        return f"failed ({cls}: {last_line(error)[:300] or 'no error reported'})"
    if now == "finished":
        return "its result could not be read by the merge"
    stopped = f" (run stopped: {stopped_reason})" if stopped_reason else ""
    return f"not finished{stopped}"


def missing_jobs(
    jobs: Sequence[Job],
    merged: Sequence[MergedTask],
    state: JobStates,
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
            "rerun": rerun_command(fleet_id, job.job_id),
        }
        for job in jobs
        if (str(job.sample_id), job.epoch) in absent
    ]
