"""How far a run is, as the live display shows it."""

from __future__ import annotations

from dataclasses import dataclass

from ...error_lines import one_line
from .missing import last_line
from .states import JobStates


@dataclass
class Progress:
    total: int
    done: int
    failed: int
    dead: int
    queued: int
    running: int
    workers: int
    elapsed: float
    eta: float | None
    cost: float | None = None  # EC2 so far (None where nothing bills)
    tokens: int = 0  # model tokens in the results so far
    model_cost: float = 0.0  # USD of those tokens (Inspect's pricing, else the repo's table)
    message: str = ""
    failures: str = ""
    wanted: int = 0  # workers asked for; more than `workers` while EC2 gives fewer
    limit: str = ""  # what holds the fleet back now: CPU, model API, quota, capacity, max_workers
    fewer_why: str = ""  # why fewer run than wanted (capacity in which pools, quota, throttling)  # the jobs that ended without a result so far, grouped, in their own words


def progress_of(
    states: JobStates,
    *,
    total: int,
    depths: dict[str, int],
    workers: int,
    slots: int,
    elapsed: float,
    cost: float | None,
    tokens: int,
    model_cost: float,
    wanted: int = 0,
    fewer_why: str = "",
    limit: str = "",
) -> Progress:
    finished = states.finished
    rate = finished / elapsed if elapsed > 0 else 0
    remaining = total - finished
    # SQS counts as in flight what waits out a retry's backoff too: no more than the
    # workers' slots can be running, the rest is waiting.
    in_flight = depths.get("work_in_flight", 0)
    running = min(in_flight, slots)
    return Progress(
        total=total,
        done=len(states.outcome) - states.failed,
        failed=states.failed,
        dead=len(states.dead_errors),
        queued=depths.get("work", remaining) + in_flight - running,
        running=running,
        workers=workers,
        elapsed=elapsed,
        eta=remaining / rate if rate > 0 else None,
        cost=cost,
        tokens=tokens,
        model_cost=model_cost,
        failures=failures_of(states),
        wanted=max(wanted, workers),
        fewer_why=fewer_why if wanted > workers else "",
        limit=limit,
    )


def failures_of(states: JobStates) -> str:
    """`N x class: last line` of the jobs that failed without a result or were dead-lettered."""
    ended = [states.last_error.get(job_id, ("failed", "")) for job_id in states.failed_jobs]
    ended += states.dead_errors.values()
    return one_line((f"{cls}: {last_line(error)}" for cls, error in ended), kinds=2, width=160)
