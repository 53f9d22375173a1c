"""What a fleet will cost, estimated before launch.

Durations come from earlier fleets of the same setting and policy when there are any (each
run records them in runs/<fleet>/durations.json), else from sample_time_limit, which makes
the estimate an upper bound.

A --checkpoint fleet's estimate says what a checkpoint costs: the agent's seconds waiting
for it and the bytes it stores, from the run reports of earlier fleets of the same setting
and policy (report.json "checkpoints", as Inspect's checkpoint events said it), else from
the drill's measure (bench/checkpoint_drill.py).
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

# bench/RESULTS.md section 16 (bench/checkpoint_drill.py on the local fleet): a checkpoint of
# a small agent's context, to its copy in S3; Inspect's events said 24.3 KB added each. A
# Docker sandbox captured too: 3.6 s (section 21, bench/checkpoint_sandbox_drill.py).
DRILL_CHECKPOINT_SECONDS = 1.0
DRILL_CHECKPOINT_BYTES = 24_300
DRILL_SOURCE = (
    "measured by bench/checkpoint_drill.py with no sandbox captured, bench/RESULTS.md section 16;"
    " a Docker sandbox's ~3.6 s, section 21"
)

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
class CheckpointCost:
    seconds_each: float  # the agent's wait for one checkpoint
    bytes_each: float  # what one adds to the sample's restic repositories
    per_sample: float | None  # checkpoints a sample took, when earlier runs say it
    source: str

    def __str__(self) -> str:
        each = f"~{self.seconds_each:.1f} s of the agent's time and {self.bytes_each / 1000:,.0f} KB stored each"
        if self.per_sample is not None:
            each += f", {self.per_sample:.0f} per sample (~{self.per_sample * self.seconds_each:.0f} s)"
        return f"checkpoints: {each} ({self.source})"


def _same_group(run_dir: Path, setting: str, policy: str) -> bool:
    try:
        data = json.loads((run_dir / run_layout.DURATIONS).read_text())
    except (OSError, ValueError):
        return False
    return isinstance(data, dict) and data.get("setting") == setting and data.get("policy") == policy


def checkpoint_cost(runs_dir: Path, setting: str, policy: str) -> CheckpointCost:
    """What a checkpoint costs, from earlier fleets' run reports of this setting and policy,
    else the drill's measure."""
    count = samples = 0
    seconds = size = 0.0
    for path in runs_dir.glob(f"*/{run_layout.REPORT_JSON}"):
        if not _same_group(path.parent, setting, policy):
            continue
        try:
            figures = json.loads(path.read_text()).get("checkpoints") or {}
            n, s, b, k = (
                figures.get(f) or 0 for f in ("checkpoints", "seconds", "bytes_added", "samples_checkpointed")
            )
            count, seconds, size, samples = count + int(n), seconds + float(s), size + float(b), samples + int(k)
        except (OSError, ValueError, TypeError, AttributeError):
            continue
    if not count:
        return CheckpointCost(DRILL_CHECKPOINT_SECONDS, DRILL_CHECKPOINT_BYTES, None, DRILL_SOURCE)
    where = f"mean of {count} checkpoints of earlier runs' samples, to their local commit (the copy to S3 not included)"
    return CheckpointCost(seconds / count, size / count, count / samples if samples else None, where)


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
    checkpoints: CheckpointCost | None = None  # a --checkpoint fleet's


def estimate(
    *,
    jobs: int,
    workers: int,
    concurrency: int,
    seconds_per_job: float,
    source: str,
    price: float,
    price_source: str = "",
    checkpoints: CheckpointCost | None = None,
) -> Estimate:
    waves = math.ceil(jobs / max(1, workers * concurrency))
    hours = (waves * seconds_per_job + BOOT_SECONDS) / 3600
    total = workers * hours * price
    return Estimate(jobs, workers, concurrency, seconds_per_job, source, hours, price, total, price_source, checkpoints)
