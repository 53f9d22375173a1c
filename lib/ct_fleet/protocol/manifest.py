"""The fleet manifest ({fleet_id}/manifest.json): what a fleet is, written by the controller.

It is the durable definition of a fleet: a rerun reads it to resume, `run-job` rebuilds a
job's work message from it, `status` reads it from any machine. Every work message is
built here, from the manifest, so the queue and the record never disagree.

Schema 3: a fleet runs one or more Inspect tasks (`tasks`: one per plain task, or one per
setting of a setting run), each with its own spec, arguments and selected sample ids (in
dataset order, with their types); `jobs` are those ids x epochs. The model and its
arguments are fleet-wide. No secret is ever written here: secrets travel in SSM.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field, fields
from typing import Any

from pydantic import TypeAdapter, ValidationError

from .keys import result_key
from .messages import TaskRoot, WorkMessage

MANIFEST_SCHEMA = 3


class BadManifest(ValueError):
    """A manifest that does not read as one: hand-edited, damaged, or of another version."""


@dataclass(frozen=True)
class ManifestTask:
    """One Inspect task of the fleet: what each of its jobs runs, and how to present the merge."""

    key: str  # short hash of the task's identity; jobs name their task by it
    name: str  # the task's name (the merged log's file stem)
    task_spec: str
    task_args: dict[str, Any]
    sample_ids: list[str | int]
    task_root: TaskRoot = "code"
    setting: str | None = None
    # What the merged header shows, as a direct `inspect eval` would record it.
    task_file: str | None = None
    limit: int | list[int] | None = None
    sample_id: list[str] | None = None  # the user's --sample-id patterns
    # The model this task runs with: a fleet runs each task x model of the command as a task
    # of its own (one merged log each). Empty in manifests written before the grid: the
    # manifest's model.
    model: str = ""
    # Its own epochs (Task(epochs=...)) where the fleet's tasks name different ones and no
    # --epochs overrides them, as Inspect runs each; None: the manifest's epochs.
    epochs: int | None = None


@dataclass(frozen=True)
class ManifestJob:
    job_id: str
    task: str  # ManifestTask.key
    sample_id: str | int
    epoch: int


@dataclass
class Manifest:
    fleet_id: str
    model: str
    epochs: int
    code_sha: str
    tasks: list[ManifestTask]
    jobs: list[ManifestJob]
    model_args: dict[str, Any] = field(default_factory=dict)
    # Inspect's eval options every job gets, by Inspect's names, as click parsed them (with
    # the config files they name read): ct_fleet.inspect_options.eval_kwargs reads them.
    inspect_options: dict[str, Any] = field(default_factory=dict)
    time_limit: int | None = None  # Inspect's sample time limit, when the user set one
    kill_after: int | None = None
    policy: str | None = None  # setting runs: the policy every setting task runs
    settings: list[str] = field(default_factory=list)
    setting_requirements: list[str] = field(default_factory=list)
    selection: list[dict[str, Any]] = field(default_factory=list)  # setting runs: env/main/side tasks
    revision: dict[str, Any] | None = None  # the tasks' git revision (ShippedCode.revision_of)
    extra_src: list[str] = field(default_factory=list)  # artifact keys of the --extra-src trees
    config: dict[str, Any] = field(default_factory=dict)
    command: str | None = None
    sandbox: str | None = None
    launched_by: str = ""
    created_at: float = 0.0
    enqueued: bool = False
    schema: int = MANIFEST_SCHEMA

    def job(self, job_id: str) -> ManifestJob | None:
        return next((j for j in self.jobs if j.job_id == job_id), None)

    def task(self, key: str) -> ManifestTask:
        return next(t for t in self.tasks if t.key == key)

    def model_of(self, task: ManifestTask) -> str:
        return task.model or self.model

    def epochs_of(self, task: ManifestTask) -> int:
        return task.epochs or self.epochs

    @property
    def models(self) -> list[str]:
        """The fleet's models, in the order of its tasks."""
        return list(dict.fromkeys(self.model_of(t) for t in self.tasks)) or [self.model]

    def work_message(self, job: ManifestJob) -> WorkMessage:
        task = self.task(job.task)
        return WorkMessage(
            fleet_id=self.fleet_id,
            job_id=job.job_id,
            sample_id=job.sample_id,
            epoch=job.epoch,
            task_spec=task.task_spec,
            task_args=dict(task.task_args),
            model=self.model_of(task),
            code_sha=self.code_sha,
            result_key=result_key(self.fleet_id, job.job_id),
            time_limit=self.time_limit,
            kind="command" if self.command else "inspect",
            command=self.command,
            setting=task.setting,
            sandbox=self.sandbox,
            task_root=task.task_root,
            model_args=dict(self.model_args),
            inspect_options=dict(self.inspect_options),
            kill_after=self.kill_after,
        )

    def to_json(self) -> str:
        return json.dumps(asdict(self), indent=1)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "Manifest":
        """Raises BadManifest (a ValueError) when the document is not a manifest of this schema."""
        if not isinstance(data, dict) or data.get("schema") != MANIFEST_SCHEMA:
            raise BadManifest(f"not a schema-{MANIFEST_SCHEMA} fleet manifest")
        names = {f.name for f in fields(cls)}
        try:
            manifest: Manifest = _ADAPTER.validate_python({k: v for k, v in data.items() if k in names})
        except ValidationError as exc:
            first = exc.errors()[0]
            where = ".".join(str(p) for p in first.get("loc", ())) or "manifest"
            raise BadManifest(f"malformed fleet manifest: {where}: {first.get('msg', 'invalid')}") from None
        keys = {t.key for t in manifest.tasks}
        if not manifest.tasks or len(keys) < len(manifest.tasks):
            raise BadManifest("malformed fleet manifest: no tasks, or a task key twice")
        stray = next((j for j in manifest.jobs if j.task not in keys), None)
        if stray is not None:
            raise BadManifest(f"malformed fleet manifest: job {stray.job_id} names no task of the fleet")
        if manifest.epochs < 1 or any(t.epochs is not None and t.epochs < 1 for t in manifest.tasks):
            raise BadManifest("malformed fleet manifest: epochs must be at least 1")
        return manifest

    @classmethod
    def from_json(cls, text: str | bytes) -> "Manifest":
        try:
            data = json.loads(text)
        except ValueError as exc:
            raise BadManifest(f"fleet manifest is not JSON: {exc}") from None
        return cls.from_dict(data)


# Every field checked against its type: a manifest is read back from S3 and from runs/,
# where anything holding the worker role, or a hand edit, may have changed it.
_ADAPTER: TypeAdapter[Manifest] = TypeAdapter(Manifest)
