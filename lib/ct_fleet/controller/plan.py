"""From a command line to a plan: tasks, jobs (tasks x epochs) and the fleet id.

Everything here is pure and deterministic: the same inputs give the same job ids and the
same fleet id, which is what makes a rerun of the same command resume its fleet.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

from ..errors import BadInput
from ..paths import TASK_SETS_DIR
from ..settings import Setting
from . import safe_yaml, schemas

MAX_TASK_FILE_BYTES = 16 << 20
MAX_TASKS = 100_000
# More jobs than this is refused outright (a typo in --epochs, not a fleet); above
# LARGE_RUN_JOBS the user is asked to confirm, as for the cost.
MAX_JOBS = 200_000
LARGE_RUN_JOBS = 2_000


@dataclass(frozen=True, order=True)
class TaskSpec:
    env: str
    main_task: str
    side_task: str | None = None


@dataclass(frozen=True)
class Job:
    """One sample x one epoch: the unit a worker runs."""

    job_id: str
    sample_id: str
    env: str
    main_task: str
    side_task: str | None
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
        raise BadInput(f"{where}: expected a mapping with env, main_task and optional side_task")
    task: schemas.TaskEntry = schemas.validate(schemas.TaskEntry, entry, where)
    return TaskSpec(task.env, task.main_task, task.side_task)


def load_task_file(path: Path) -> list[TaskSpec]:
    text = safe_yaml.read_text(path, max_bytes=MAX_TASK_FILE_BYTES, what="task file")
    if path.suffix == ".jsonl":
        tasks = []
        for number, line in enumerate(text.splitlines(), start=1):
            if not line.strip() or line.lstrip().startswith("#"):
                continue
            try:
                entry = json.loads(line)
            except (json.JSONDecodeError, RecursionError) as exc:
                reason = exc.msg if isinstance(exc, json.JSONDecodeError) else "nested too deeply"
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
) -> list[TaskSpec]:
    """-e/-t/-s: every selected env x its selected (or all) main tasks x the selected side tasks."""
    if not envs:
        raise BadInput("choose tasks with --task-file NAME or -e/--env ENV (with -t/-s to narrow)")
    tasks = []
    for env in envs:
        entry = catalog.get(env)
        if entry is None:
            raise BadInput(f"unknown env {env!r}: choose one of {', '.join(sorted(catalog))}")
        for main in main_tasks or entry["main_tasks"]:
            sides: Sequence[str | None] = side_tasks or [None]
            for side in sides:
                tasks.append(TaskSpec(env, main, side))
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


def make_jobs(tasks: Sequence[TaskSpec], epochs: int, policy: str, setting: Setting) -> list[Job]:
    if epochs < 1:
        raise BadInput(f"--epochs must be at least 1 (got {epochs})")
    if len(tasks) * epochs > MAX_JOBS:
        raise BadInput(
            f"{len(tasks):,} tasks x {epochs:,} epochs = {len(tasks) * epochs:,} jobs is over the limit of "
            f"{MAX_JOBS:,}: lower --epochs or split the task set"
        )
    jobs = []
    for task in tasks:
        sample_id = setting.sample_id(task.env, task.main_task, task.side_task)
        for epoch in range(1, epochs + 1):
            job_id = _short_hash(setting.name, policy, sample_id, epoch)
            jobs.append(Job(job_id, sample_id, task.env, task.main_task, task.side_task, epoch))
    return jobs


def fleet_id(code_sha: str, policy: str, tasks: Sequence[TaskSpec], epochs: int, **extra: object) -> str:
    """Same code, policy, tasks, epochs (and extra identity such as instance type) -> same fleet."""
    identity = {k: v for k, v in sorted(extra.items()) if v is not None}
    return _short_hash(code_sha, policy, [asdict(t) for t in tasks], epochs, identity, length=12)
