"""When to launch more workers: replacements and scale-up. Pure decisions.

After its first launch (planning/estimate.py's first_launch_count) a fleet replaces
workers that died while work waits, up to max_replacements, and adds one worker at a time
while heartbeats say the fleet is CPU-bound, up to max_workers.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from ...protocol.sizing import first_launch_count

SCALE_UP_LOAD = 0.85


@dataclass(frozen=True)
class Decision:
    action: Literal["none", "replace", "scale_up", "give_up"]
    count: int = 0


def decide(
    *,
    remaining: int,
    waiting: int,
    live: int,
    replacements: int,
    max_replacements: int,
    max_workers: int | None,
    concurrency_per_worker: int | None,
    fresh_loads: Sequence[float],
    cooled: bool,
) -> Decision:
    """What to launch now, given the work left and what the fleet reports.

    Workers leave only when the queue is empty, so visible work with too few workers
    means some died (a failed bootstrap, a kill, a spot interruption).
    """
    if remaining <= 0:
        return Decision("none")
    wanted = first_launch_count(remaining, max_workers=max_workers, concurrency_per_worker=concurrency_per_worker)
    if waiting and live < wanted:
        if replacements >= max_replacements:
            return Decision("give_up") if not live else Decision("none")
        return Decision("replace", min(wanted - live, max_replacements - replacements))
    if live < (max_workers or 0) and waiting and cooled and fresh_loads:
        if sum(fresh_loads) / len(fresh_loads) >= SCALE_UP_LOAD:
            return Decision("scale_up", 1)
    return Decision("none")
