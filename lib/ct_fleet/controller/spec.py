"""What a fleet is (FleetSpec) and what a run returns (RunResult, Progress)."""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..protocol import Manifest, ManifestJob
from .config import Ec2Config
from .plan import FleetTask, Job

if TYPE_CHECKING:
    from ..merge import MergedTask
    from .tracker import JobTracker


@dataclass
class FleetSpec:
    """Everything that defines a fleet; the manifest is this plus bookkeeping."""

    fleet_id: str
    tasks: list[FleetTask]
    jobs: list[Job]
    model: str
    epochs: int
    code_sha: str
    config: Ec2Config
    model_args: dict[str, Any] = field(default_factory=dict)
    policy: str | None = None  # setting runs
    time_limit: int | None = None  # Inspect's per-sample limit, only when the user set one
    command: str | None = None
    sandbox: str | None = None
    setting_requirements: list[str] = field(default_factory=list)  # pip specifiers and wheel paths, as given
    wheels: list[Path] = field(default_factory=list)  # the local wheels among them, shipped to workers
    revision: dict[str, Any] | None = None
    secret_names: list[str] = field(default_factory=list)  # names only; values stay in the environment
    hourly_price: float = 0.0  # 0 where nothing bills (the embedded cloud)

    @property
    def settings(self) -> list[str]:
        return list(dict.fromkeys(t.setting for t in self.tasks if t.setting))

    @property
    def duration_group(self) -> tuple[str, str]:
        """(what, how) earlier fleets' job durations are matched on for the cost estimate."""
        return ",".join(self.settings or [t.name for t in self.tasks]), self.policy or self.model

    def task(self, key: str) -> FleetTask:
        return next(t for t in self.tasks if t.key == key)

    def manifest(
        self, *, launched_by: str = "", enqueued: bool = False, extra_src: list[str] | None = None
    ) -> Manifest:
        return Manifest(
            fleet_id=self.fleet_id,
            model=self.model,
            model_args=dict(self.model_args),
            epochs=self.epochs,
            code_sha=self.code_sha,
            tasks=[t.manifest() for t in self.tasks],
            jobs=[ManifestJob(j.job_id, j.task, j.sample_id, j.epoch) for j in self.jobs],
            time_limit=self.time_limit,
            kill_after=self.config.sample_time_limit,
            policy=self.policy,
            settings=self.settings,
            setting_requirements=list(self.setting_requirements),
            selection=[asdict(s) for t in self.tasks for s in t.selection],
            revision=self.revision,
            extra_src=list(extra_src or []),
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
    cost: float | None = None  # EC2 so far (None where nothing bills)
    tokens: int = 0  # model tokens in the results so far
    model_cost: float = 0.0  # USD of those tokens (Inspect's pricing, else the repo's table)
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
    cost: float = 0.0  # EC2
    enqueued: int = 0
    adopted_workers: int = 0
    tokens: int = 0
    model_cost: float = 0.0
    unpriced_models: list[str] = field(default_factory=list)
    unmerged: list[str] = field(default_factory=list)  # tasks without a single result
    missing: list[dict[str, Any]] = field(default_factory=list)  # jobs not in the merged run, with why
    late_successes: list[str] = field(default_factory=list)  # job ids that succeeded after a dead letter

    def problems(self) -> list[str]:
        """Why the run is not complete and successful; empty when it is."""
        reasons = [self.stopped_reason] if self.stopped_reason else []
        dead = [r for r in self.dead_report if r.get("dead")]
        failed = [r for r in self.dead_report if not r.get("dead")]
        if dead:
            reasons.append(f"{len(dead)} job(s) dead-lettered after every attempt failed")
        if failed:
            classes = ", ".join(sorted({str(r["error_class"]) for r in failed}))
            reasons.append(f"{len(failed)} job(s) failed without a result ({classes})")
        reasons += [f"{name}: no results" for name in self.unmerged]
        reasons += [f"{m.task}: {m.why}" for m in self.merged if m.status != "success"]
        return reasons
