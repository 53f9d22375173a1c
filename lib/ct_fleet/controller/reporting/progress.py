"""How far a run is, as the live display shows it."""

from __future__ import annotations

from dataclasses import dataclass

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


def progress_of(
    states: JobStates,
    *,
    total: int,
    depths: dict[str, int],
    workers: int,
    elapsed: float,
    cost: float | None,
    tokens: int,
    model_cost: float,
) -> Progress:
    finished = states.finished
    rate = finished / elapsed if elapsed > 0 else 0
    remaining = total - finished
    return Progress(
        total=total,
        done=len(states.outcome) - states.failed,
        failed=states.failed,
        dead=len(states.dead_errors),
        queued=depths.get("work", remaining),
        running=depths.get("work_in_flight", 0),
        workers=workers,
        elapsed=elapsed,
        eta=remaining / rate if rate > 0 else None,
        cost=cost,
        tokens=tokens,
        model_cost=model_cost,
    )
