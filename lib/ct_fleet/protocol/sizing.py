"""How many workers a fleet starts with: one rule for the estimate shown before launch and
for the pool that launches them (and relaunches after losses)."""

from __future__ import annotations

import math

from .fleet_env import START_CONCURRENCY

FIRST_LAUNCH_CAP = 24


def first_launch_count(pending: int, *, max_workers: int | None, concurrency_per_worker: int | None) -> int:
    """The workers a fleet starts with: up to 24, fewer when max_workers or the pending work
    (at the starting concurrency) is smaller."""
    per_worker = min(START_CONCURRENCY, concurrency_per_worker or START_CONCURRENCY)
    return max(1, min(FIRST_LAUNCH_CAP, max_workers or 1, math.ceil(pending / per_worker)))
