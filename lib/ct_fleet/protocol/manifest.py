"""The fleet manifest ({fleet_id}/manifest.json): what a fleet is, written by the controller.

It is the durable definition of a fleet: a rerun reads it to resume, `run-job` rebuilds a
job's work message from it, `status` reads it from any machine. Every work message is
built here, from the manifest, so the queue and the record never disagree.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field, fields
from typing import Any

from .keys import result_key
from .messages import WorkMessage

MANIFEST_SCHEMA = 2


@dataclass(frozen=True)
class ManifestJob:
    job_id: str
    sample_id: str
    epoch: int


@dataclass
class Manifest:
    fleet_id: str
    setting: str
    task_spec: str
    task_args: dict[str, Any]
    policy: str
    model: str
    epochs: int
    code_sha: str
    time_limit: int
    jobs: list[ManifestJob]
    tasks: list[dict[str, Any]] = field(default_factory=list)
    config: dict[str, Any] = field(default_factory=dict)
    command: str | None = None
    sandbox: str | None = None
    launched_by: str = ""
    created_at: float = 0.0
    enqueued: bool = False
    schema: int = MANIFEST_SCHEMA

    def job(self, job_id: str) -> ManifestJob | None:
        return next((j for j in self.jobs if j.job_id == job_id), None)

    def work_message(self, job: ManifestJob) -> WorkMessage:
        return WorkMessage(
            fleet_id=self.fleet_id,
            job_id=job.job_id,
            sample_id=job.sample_id,
            epoch=job.epoch,
            task_spec=self.task_spec,
            task_args=dict(self.task_args),
            model=self.model,
            code_sha=self.code_sha,
            result_key=result_key(self.fleet_id, job.job_id),
            time_limit=self.time_limit,
            kind="command" if self.command else "inspect",
            command=self.command,
            setting=self.setting,
            sandbox=self.sandbox,
        )

    def to_json(self) -> str:
        return json.dumps(asdict(self), indent=1)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "Manifest":
        """Raises ValueError when the document is not a manifest of this schema."""
        if not isinstance(data, dict) or data.get("schema") != MANIFEST_SCHEMA:
            raise ValueError(f"not a schema-{MANIFEST_SCHEMA} fleet manifest")
        names = {f.name for f in fields(cls)}
        values = {k: v for k, v in data.items() if k in names}
        try:
            values["jobs"] = [ManifestJob(**j) for j in data["jobs"]]
            return cls(**values)
        except (KeyError, TypeError) as exc:
            raise ValueError(f"malformed fleet manifest: {exc}") from None

    @classmethod
    def from_json(cls, text: str | bytes) -> "Manifest":
        try:
            data = json.loads(text)
        except ValueError as exc:
            raise ValueError(f"fleet manifest is not JSON: {exc}") from None
        return cls.from_dict(data)
