"""A worker's settings: fleet.env's contract (protocol.FleetEnv) plus what the instance
itself provides (its id, the code root, a work directory)."""

from __future__ import annotations

import socket
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

import psutil

from ..protocol import START_CONCURRENCY, FleetEnv
from ..protocol.knobs import Ec2Config

# Seconds past 1.5 x its time limit before a job is killed: Inspect's own limit ends a
# sample cleanly first; this stops a job whose sandbox or event loop hangs.
KILL_GRACE = 60.0


@dataclass
class WorkerSettings:
    fleet_id: str
    bucket: str
    instance_id: str
    code_root: Path
    max_concurrency: int
    idle_timeout: float
    visibility_timeout: int
    heartbeat_interval: float
    retry_backoff: int
    work_dir: Path
    # The worker's environment as its entry read it: its jobs inherit it, and its secrets'
    # values are masked in what it reports.
    environ: Mapping[str, str]
    report_interval: float = 1.0
    imds_endpoint: str | None = None  # None: EC2's own, read only on spot instances
    spot: bool = False
    warm_runner: bool = True
    job_memory_mb: int = 0  # 0: no cap
    kill_grace: float = KILL_GRACE
    knobs: Ec2Config = field(default_factory=Ec2Config)  # every knob as fleet.env gave it

    @classmethod
    def from_env(cls, env: Mapping[str, str], knobs: type[Ec2Config] = Ec2Config) -> "WorkerSettings":
        """fleet.env's contract (protocol.FleetEnv: the knobs that reach workers, with their
        defaults) plus what the instance itself provides: its id, the code root, a work directory."""
        fleet = FleetEnv.from_env(env, knobs)
        k = fleet.knobs
        return cls(
            fleet_id=fleet.FLEET_ID,
            bucket=k.bucket,
            instance_id=env.get("INSTANCE_ID") or socket.gethostname(),
            code_root=Path(env.get("CODE_ROOT", ".")).resolve(),
            max_concurrency=k.concurrency_per_worker or START_CONCURRENCY,
            idle_timeout=float(k.idle_timeout or 0),
            visibility_timeout=k.visibility_timeout,
            heartbeat_interval=float(k.heartbeat_interval),
            retry_backoff=k.retry_backoff,
            report_interval=float(env.get("REPORT_INTERVAL", "1")),
            work_dir=Path(env.get("WORK_DIR") or tempfile.mkdtemp(prefix="ct-worker-")),
            imds_endpoint=env.get("CT_IMDS_ENDPOINT") or None,
            spot=k.spot,
            warm_runner=k.warm_runner,
            job_memory_mb=k.job_memory_mb or default_job_memory_mb(),
            knobs=k,
            environ=dict(env),
        )


def default_job_memory_mb() -> int:
    """Half the machine's memory: a leaking job is killed before the kernel's OOM killer
    picks a victim, which could be the worker itself."""
    return int(psutil.virtual_memory().total / 2**20 / 2)
