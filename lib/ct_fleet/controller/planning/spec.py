"""What a fleet is: FleetSpec, the planned fleet that its manifest and run are made from."""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from ...protocol import Manifest, ManifestJob
from ...protocol.knobs import Ec2Config
from .jobs import FleetTask, Job


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
    inspect_options: dict[str, Any] = field(default_factory=dict)  # every job's, by Inspect's names
    policy: str | None = None  # setting runs
    time_limit: int | None = None  # Inspect's per-sample limit, only when the user set one
    command: str | None = None
    sandbox: str | None = None
    setting_requirements: list[str] = field(default_factory=list)  # pip specifiers and wheel paths, as given
    wheels: list[Path] = field(default_factory=list)  # the local wheels among them, shipped to workers
    revision: dict[str, Any] | None = None
    secret_names: list[str] = field(default_factory=list)  # names only; values stay in the environment
    hourly_price: float = 0.0  # 0 where nothing bills (the embedded cloud)
    price_source: str = ""  # where hourly_price came from, for the estimate

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
            inspect_options=dict(self.inspect_options),
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
