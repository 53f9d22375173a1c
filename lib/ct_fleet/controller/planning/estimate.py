"""What a fleet will cost, estimated before launch, and the workers it starts with.

Durations come from earlier fleets of the same setting and policy when there are any (each
run records them in runs/<fleet>/durations.json), else from sample_time_limit, which makes
the estimate an upper bound.
"""

from __future__ import annotations

import json
import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from ...protocol import START_CONCURRENCY, run_layout
from .history import record_sample_seconds

BOOT_SECONDS = {True: 65, False: 240}  # baked AMI vs stock Ubuntu with a full install
FIRST_LAUNCH_CAP = 24


def first_launch_count(pending: int, *, max_workers: int | None, concurrency_per_worker: int | None) -> int:
    """The workers a fleet starts with: up to 24, fewer when max_workers or the pending work
    (at the starting concurrency) is smaller."""
    per_worker = min(START_CONCURRENCY, concurrency_per_worker or START_CONCURRENCY)
    return max(1, min(FIRST_LAUNCH_CAP, max_workers or 1, math.ceil(pending / per_worker)))


def record_durations(run_dir: Path, group: tuple[str, str], seconds: Sequence[float]) -> None:
    """Seconds per job of this run, for the estimates of later fleets of the same tasks and
    policy (or model): `group` is FleetSpec.duration_group."""
    record_sample_seconds(run_dir)
    if seconds:
        setting, policy = group
        data = {"setting": setting, "policy": policy, "seconds": list(seconds)}
        (run_dir / run_layout.DURATIONS).write_text(json.dumps(data))


def seen_duration(runs_dir: Path, setting: str, policy: str) -> tuple[float, int] | None:
    """Mean seconds per job over earlier fleets of this setting and policy, and how many jobs."""
    samples: list[float] = []
    for path in runs_dir.glob(f"*/{run_layout.DURATIONS}"):
        try:
            data = json.loads(path.read_text())
        except (OSError, ValueError):
            continue
        if data.get("setting") == setting and data.get("policy") == policy:
            samples.extend(float(s) for s in data.get("seconds", []))
    if not samples:
        return None
    return statistics.fmean(samples), len(samples)


@dataclass(frozen=True)
class Estimate:
    jobs: int
    workers: int
    concurrency: int
    seconds_per_job: float
    duration_source: str
    hours: float
    price: float
    total: float
    price_source: str = ""


def estimate(
    *,
    jobs: int,
    workers: int,
    concurrency: int,
    seconds_per_job: float,
    source: str,
    price: float,
    baked_ami: bool,
    price_source: str = "",
) -> Estimate:
    waves = math.ceil(jobs / max(1, workers * concurrency))
    hours = (waves * seconds_per_job + BOOT_SECONDS[baked_ami]) / 3600
    total = workers * hours * price
    return Estimate(jobs, workers, concurrency, seconds_per_job, source, hours, price, total, price_source)
