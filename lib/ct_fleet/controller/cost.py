"""What a fleet costs: an estimate before launch, the cost so far while it runs.

Prices come from a dated table in the repo (prices.json), overridable with a file or a
knob; AWS's Pricing API is not worth a dependency for a dozen instance types. Durations
come from earlier fleets of the same setting and policy when there are any (each run
records them), else from sample_time_limit, which makes the estimate an upper bound.
"""

from __future__ import annotations

import json
import math
import os
import statistics
from dataclasses import dataclass
from pathlib import Path

from ..errors import BadInput

PRICES = Path(__file__).resolve().parent / "prices.json"
BOOT_SECONDS = {True: 65, False: 240}  # baked AMI vs stock Ubuntu with a full install


def hourly_price(instance_type: str, override: float | None = None) -> float:
    if override is not None:
        return override
    table = json.loads(Path(os.environ.get("CT_FLEET_PRICES", PRICES)).read_text())
    try:
        return float(table["on_demand"][instance_type])
    except KeyError:
        raise BadInput(
            f"no price for {instance_type} in {PRICES.name}: add it or pass --ec2-arg hourly_price=USD"
        ) from None


def seen_duration(runs_dir: Path, setting: str, policy: str) -> tuple[float, int] | None:
    """Mean seconds per job over earlier fleets of this setting and policy, and how many jobs."""
    samples: list[float] = []
    for path in runs_dir.glob("*/durations.json"):
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


def estimate(
    *, jobs: int, workers: int, concurrency: int, seconds_per_job: float, source: str, price: float, baked_ami: bool
) -> Estimate:
    waves = math.ceil(jobs / max(1, workers * concurrency))
    hours = (waves * seconds_per_job + BOOT_SECONDS[baked_ami]) / 3600
    return Estimate(jobs, workers, concurrency, seconds_per_job, source, hours, price, workers * hours * price)


def cost_so_far(
    launch_times: dict[str, float], now: float, price: float, ended: dict[str, float] | None = None
) -> float:
    """Instance-seconds so far times the hourly price (EC2 bills Linux per second)."""
    ended = ended or {}
    seconds = sum(max(0.0, ended.get(i, now) - start) for i, start in launch_times.items())
    return seconds / 3600 * price
