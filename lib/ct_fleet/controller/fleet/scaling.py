"""When to launch more workers: replacements and scale-up. Pure decisions.

After its first launch (protocol/sizing.py's first_launch_count) a fleet replaces
workers that died while work waits, up to max_replacements, and adds one worker at a time
while heartbeats say the fleet is CPU-bound, up to max_workers, unless the model API is
the limit: a model budget (--max-connections) whose whole total is granted, or rate-limit
retries. A fleet whose every model has a budget wants no more workers than hold it.

limit_of names the limit the fleet is at while work waits, for the live line and the report.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Literal

from ...protocol.sizing import first_launch_count

Limit = Literal["", "CPU", "model API", "quota", "capacity", "max_workers"]

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
    model_bound: bool = False,
    budget_workers: int | None = None,
) -> Decision:
    """What to launch now, given the work left and what the fleet reports.

    Workers leave only when the queue is empty, so visible work with too few workers
    means some died (a failed bootstrap, a kill, a spot interruption).
    """
    if remaining <= 0:
        return Decision("none")
    wanted = first_launch_count(remaining, max_workers=max_workers, concurrency_per_worker=concurrency_per_worker)
    if budget_workers:
        wanted = min(wanted, budget_workers)
    if waiting and live < wanted:
        if replacements >= max_replacements:
            return Decision("give_up") if not live else Decision("none")
        return Decision("replace", min(wanted - live, max_replacements - replacements))
    most = min(max_workers or 0, budget_workers or max_workers or 0)
    if live < most and waiting and cooled and fresh_loads and not model_bound:
        if sum(fresh_loads) / len(fresh_loads) >= SCALE_UP_LOAD:
            return Decision("scale_up", 1)
    return Decision("none")


def limit_of(
    waiting: int,
    live: int,
    max_workers: int | None,
    clamped: str | None,
    launch_limited: str | None,
    model_bound: bool,
    fresh_loads: Sequence[float],
) -> Limit:
    """What holds the fleet back while work waits ("" when nothing waits, or nothing is
    known to): the model API first (more workers would not help), then what keeps workers
    from launching, then the CPU of those that run."""
    if not waiting:
        return ""
    if model_bound:
        return "model API"
    if launch_limited:
        return "quota" if "quota" in launch_limited.lower() else "capacity"
    if max_workers is not None and live >= max_workers:
        return "quota" if clamped else "max_workers"
    if fresh_loads and sum(fresh_loads) / len(fresh_loads) >= SCALE_UP_LOAD:
        return "CPU"
    return ""


@dataclass
class LimitClock:
    """The limit the fleet is at now, and the seconds it spent at each (for the report)."""

    now: str = ""
    since: float | None = None
    seconds: dict[str, float] = field(default_factory=dict)

    def at(self, limit: str, when: float) -> None:
        if self.since is not None and self.now:
            self.seconds[self.now] = self.seconds.get(self.now, 0.0) + when - self.since
        self.now, self.since = limit, when
