"""From a command line to a plan: tasks, jobs (samples x epochs) and the fleet id.

Everything here is pure and deterministic: the same inputs give the same job ids and the
same fleet id, which is what makes a rerun of the same command resume its fleet.

A fleet runs one or more Inspect tasks (FleetTask): a plain task (TASK, -T), or the task
of each setting a setting run names (-e setting:env, task files), with the policy as its
task argument. Each task's jobs are its selected sample ids x epochs.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ...errors import BadInput
from ...paths import TASK_SETS_DIR
from ...protocol import ManifestTask
from ...protocol.messages import TaskRoot
from . import safe_yaml, schemas

MAX_TASK_FILE_BYTES = 16 << 20
MAX_TASKS = 100_000
# More jobs than this is refused outright (a typo in --epochs, not a fleet); above
# LARGE_RUN_JOBS the user is asked to confirm, as for the cost.
MAX_JOBS = 200_000
LARGE_RUN_JOBS = 2_000


@dataclass(frozen=True, order=True)
class TaskSpec:
    """One env x main task x side task of a setting (None: the run's default setting)."""

    env: str
    main_task: str
    side_task: str | None = None
    setting: str | None = None


@dataclass(frozen=True)
class FleetTask:
    """One Inspect task of a fleet, as its jobs run it (the manifest's ManifestTask)."""

    name: str
    task_spec: str
    task_root: TaskRoot
    task_args: dict[str, Any]
    sample_ids: list[str | int]
    setting: str | None = None
    task_file: str | None = None  # shown in the merged header
    limit: int | list[int] | None = None
    sample_id: list[str] | None = None
    selection: list[TaskSpec] = field(default_factory=list)
    # Each task x model of a fleet is a task of its own; before the grid, the model the task
    # names for itself (Task(model=...)), if any.
    model: str = ""
    epochs: int | None = None  # its own, where the fleet's tasks differ (ManifestTask.epochs)

    @property
    def key(self) -> str:
        return _short_hash(self.task_spec, self.task_root, self.task_args, self.setting, self.model)

    def epochs_in(self, fleet_epochs: int) -> int:
        """The epochs it runs in a fleet of `fleet_epochs`: its own, else the fleet's (the
        manifest's Manifest.epochs_of, before there is a manifest)."""
        return self.epochs or fleet_epochs

    def manifest(self) -> ManifestTask:
        return ManifestTask(
            key=self.key,
            name=self.name,
            task_spec=self.task_spec,
            task_args=dict(self.task_args),
            sample_ids=list(self.sample_ids),
            task_root=self.task_root,
            setting=self.setting,
            task_file=self.task_file,
            limit=self.limit,
            sample_id=self.sample_id,
            model=self.model,
            epochs=self.epochs,
        )


@dataclass(frozen=True)
class Job:
    """One sample x one epoch of one task: the unit a worker runs."""

    job_id: str
    task: str  # FleetTask.key
    sample_id: str | int
    epoch: int


def _short_hash(*parts: object, length: int = 16) -> str:
    blob = json.dumps(parts, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(blob.encode()).hexdigest()[:length]


def resolve_task_file(name: str) -> Path:
    """A bare name is a set in examples/task_sets/ (.yml, .yaml or .jsonl); anything else a path."""
    if not name or "\x00" in name:
        raise BadInput("--task-file needs a name or a path")
    path = Path(name).expanduser()
    if path.is_file():
        return path
    if path.exists():
        raise BadInput(f"--task-file {name}: not a file")
    for suffix in (".yml", ".yaml", ".jsonl"):
        candidate = TASK_SETS_DIR / f"{name}{suffix}"
        if candidate.is_file():
            return candidate
    known = sorted({p.stem for p in TASK_SETS_DIR.glob("*") if p.suffix in (".yml", ".yaml", ".jsonl")})
    raise BadInput(f"unknown task set {name!r}: give a file path or one of {', '.join(known)}")


def _task_from_mapping(entry: object, where: str) -> TaskSpec:
    if not isinstance(entry, dict):
        raise BadInput(f"{where}: expected a mapping with env, main_task and optional side_task, setting")
    task: schemas.TaskEntry = schemas.validate(schemas.TaskEntry, entry, where)
    return TaskSpec(task.env, task.main_task, task.side_task, task.setting)


def _json_int(text: str) -> int:
    # Past 4,300 digits int() raises a ValueError of its own, after a slow parse.
    if len(text) > safe_yaml.INT_MAX_CHARS:
        raise ValueError(f"a number of {len(text):,} digits")
    return int(text)


def load_task_file(path: Path) -> list[TaskSpec]:
    text = safe_yaml.read_text(path, max_bytes=MAX_TASK_FILE_BYTES, what="task file")
    if path.suffix == ".jsonl":
        tasks = []
        for number, line in enumerate(text.splitlines(), start=1):
            if not line.strip() or line.lstrip().startswith("#"):
                continue
            try:
                entry = json.loads(line, parse_int=_json_int)
            except (ValueError, RecursionError) as exc:
                if isinstance(exc, RecursionError):
                    reason = "nested too deeply"
                else:
                    reason = exc.msg if isinstance(exc, json.JSONDecodeError) else str(exc)
                raise BadInput(f"{path}:{number}: not valid JSON ({reason})") from None
            tasks.append(_task_from_mapping(entry, f"{path}:{number}"))
    else:
        data = safe_yaml.load(text, str(path))
        if isinstance(data, dict) and set(data) == {"tasks"}:
            data = data["tasks"]
        if not isinstance(data, list):
            raise BadInput(f"{path}: expected a YAML list of tasks (or a mapping with one key, tasks)")
        tasks = [_task_from_mapping(entry, f"{path}: entry {i}") for i, entry in enumerate(data, start=1)]
    if not tasks:
        raise BadInput(f"{path}: no tasks")
    if len(tasks) > MAX_TASKS:
        raise BadInput(f"{path}: {len(tasks):,} tasks is over the limit of {MAX_TASKS:,}; split the file")
    return tasks


def select_tasks(
    catalog: dict[str, dict[str, list[str]]],
    envs: Sequence[str],
    main_tasks: Sequence[str],
    side_tasks: Sequence[str],
    setting: str | None = None,
) -> list[TaskSpec]:
    """-e/-t/-s: every selected env x its selected (or all) main tasks x the selected side tasks."""
    if not envs:
        raise BadInput("choose tasks with TASK, --task-file NAME or -e/--env ENV (with -t/-s to narrow)")
    tasks = []
    for env in envs:
        entry = catalog.get(env)
        if entry is None:
            raise BadInput(f"unknown env {env!r}: choose one of {', '.join(sorted(catalog))}")
        for main in main_tasks or entry["main_tasks"]:
            sides: Sequence[str | None] = side_tasks or [None]
            for side in sides:
                tasks.append(TaskSpec(env, main, side, setting))
    return tasks


def validate_tasks(tasks: Iterable[TaskSpec], catalog: dict[str, dict[str, list[str]]]) -> None:
    for task in tasks:
        entry = catalog.get(task.env)
        if entry is None:
            raise BadInput(f"unknown env {task.env!r}: choose one of {', '.join(sorted(catalog))}")
        if task.main_task not in entry["main_tasks"]:
            raise BadInput(
                f"unknown main task {task.main_task!r} in env {task.env!r}: "
                f"choose one of {', '.join(entry['main_tasks'])}"
            )
        if task.side_task is not None and task.side_task not in entry["side_tasks"]:
            raise BadInput(
                f"unknown side task {task.side_task!r} in env {task.env!r}: "
                f"choose one of {', '.join(entry['side_tasks'])}"
            )


def dedupe(tasks: Iterable[TaskSpec]) -> list[TaskSpec]:
    return list(dict.fromkeys(tasks))


def make_jobs(tasks: Sequence[FleetTask], epochs: int, *, code_sha: str, model_args: dict[str, Any]) -> list[Job]:
    """Each task's sample ids x epochs; a job id names the task (with its model), the sample and the epoch."""
    if epochs < 1:
        raise BadInput(f"--epochs must be at least 1 (got {epochs})")
    samples = sum(len(task.sample_ids) for task in tasks)
    total = sum(len(task.sample_ids) * task.epochs_in(epochs) for task in tasks)
    if total > MAX_JOBS:
        each = "their own epochs" if any(task.epochs for task in tasks) else f"{epochs:,} epochs"
        raise BadInput(
            f"{samples:,} samples x {each} = {total:,} jobs is over the limit of "
            f"{MAX_JOBS:,}: lower --epochs or split the task set"
        )
    jobs = []
    for task in tasks:
        for sample_id in task.sample_ids:
            for epoch in range(1, task.epochs_in(epochs) + 1):
                job_id = _short_hash(code_sha, task.key, task.model, model_args, sample_id, epoch)
                jobs.append(Job(job_id, task.key, sample_id, epoch))
    return jobs


def fleet_id(code_sha: str, tasks: Sequence[FleetTask], epochs: int, **extra: object) -> str:
    """Same code, tasks (spec, arguments, selection), epochs and extra identity -> same fleet."""
    identity = {k: v for k, v in sorted(extra.items()) if v is not None}
    described = [[t.key, t.sample_ids, t.limit, t.sample_id, *([t.epochs] if t.epochs else [])] for t in tasks]
    return _short_hash(code_sha, described, epochs, identity, length=12)
