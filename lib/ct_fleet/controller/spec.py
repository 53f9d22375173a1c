"""What a fleet is (FleetSpec) and what a run returns (RunResult, Progress)."""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..protocol import Manifest, ManifestJob
from .config import Ec2Config
from .plan import Job, TaskSpec

if TYPE_CHECKING:
    from ..merge import MergedTask
    from .tracker import JobTracker


@dataclass
class FleetSpec:
    """Everything that defines a fleet; the manifest is this plus bookkeeping."""

    fleet_id: str
    setting: str
    task_spec: str
    policy: str
    model: str
    epochs: int
    tasks: list[TaskSpec]
    jobs: list[Job]
    code_sha: str
    config: Ec2Config
    task_args: dict[str, Any] = field(default_factory=dict)  # what each job's task gets, policy included
    command: str | None = None
    sandbox: str | None = None
    hourly_price: float = 0.0  # 0 where nothing bills (the embedded cloud)

    def manifest(self, *, launched_by: str = "", enqueued: bool = False) -> Manifest:
        return Manifest(
            fleet_id=self.fleet_id,
            setting=self.setting,
            task_spec=self.task_spec,
            task_args=dict(self.task_args) or {"policy": self.policy},
            policy=self.policy,
            model=self.model,
            epochs=self.epochs,
            code_sha=self.code_sha,
            time_limit=self.config.sample_time_limit,
            jobs=[ManifestJob(j.job_id, j.sample_id, j.epoch) for j in self.jobs],
            tasks=[asdict(t) for t in self.tasks],
            config={k: v for k, v in asdict(self.config).items() if v is not None},
            command=self.command,
            sandbox=self.sandbox,
            launched_by=launched_by,
            created_at=time.time(),
            enqueued=enqueued,
        )


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
    cost: float | None = None
    message: str = ""


class FleetInterrupted(Exception):
    """Ctrl-C: the fleet was stopped, or left running (leave_running) for a later resume."""

    def __init__(self, leave_running: bool) -> None:
        super().__init__("interrupted")
        self.leave_running = leave_running


@dataclass
class RunResult:
    fleet_id: str
    run_dir: Path
    merged: list[MergedTask]
    state: JobTracker
    jobs: int
    resumed: int
    workers_launched: int
    elapsed: float
    stopped_reason: str | None = None
    dead_report: list[dict[str, Any]] = field(default_factory=list)
    cost: float = 0.0
    enqueued: int = 0
    adopted_workers: int = 0
