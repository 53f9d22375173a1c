"""What a fleet will cost, estimated before launch.

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

from ...protocol import run_layout
from .history import record_sample_seconds

# A baked worker AMI's boot to its first job; the estimate assumes one (stock Ubuntu with
# the full install takes about 240 s).
BOOT_SECONDS = 65


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
    price_source: str = "",
) -> Estimate:
    waves = math.ceil(jobs / max(1, workers * concurrency))
    hours = (waves * seconds_per_job + BOOT_SECONDS) / 3600
    total = workers * hours * price
    return Estimate(jobs, workers, concurrency, seconds_per_job, source, hours, price, total, price_source)
