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

import yaml

from ..errors import BadInput
from ..paths import TASK_SETS_DIR
from ..settings import Setting

TASK_KEYS = {"env", "main_task", "side_task"}


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
    path = Path(name).expanduser()
    if path.is_file():
        return path
    for suffix in (".yml", ".yaml", ".jsonl"):
        candidate = TASK_SETS_DIR / f"{name}{suffix}"
        if candidate.is_file():
            return candidate
    known = sorted({p.stem for p in TASK_SETS_DIR.glob("*") if p.suffix in (".yml", ".yaml", ".jsonl")})
    raise BadInput(f"unknown task set {name!r}: give a file path or one of {', '.join(known)}")


def _task_from_mapping(entry: object, where: str) -> TaskSpec:
    if not isinstance(entry, dict):
        raise BadInput(f"{where}: expected a mapping with env, main_task and optional side_task")
    unknown = set(entry) - TASK_KEYS
    if unknown:
        raise BadInput(f"{where}: unknown key(s) {', '.join(sorted(unknown))}; allowed: env, main_task, side_task")
    for key in ("env", "main_task"):
        if not isinstance(entry.get(key), str) or not entry[key]:
            raise BadInput(f"{where}: {key} must be a non-empty string")
    side = entry.get("side_task")
    if side is not None and (not isinstance(side, str) or not side):
        raise BadInput(f"{where}: side_task must be a non-empty string when given")
    return TaskSpec(entry["env"], entry["main_task"], side)


def load_task_file(path: Path) -> list[TaskSpec]:
    text = path.read_text()
    if path.suffix == ".jsonl":
        tasks = []
        for number, line in enumerate(text.splitlines(), start=1):
            if not line.strip() or line.lstrip().startswith("#"):
                continue
            try:
                entry = json.loads(line)
            except json.JSONDecodeError as exc:
                raise BadInput(f"{path}:{number}: not valid JSON ({exc.msg})") from None
            tasks.append(_task_from_mapping(entry, f"{path}:{number}"))
    else:
        try:
            data = yaml.safe_load(text)
        except yaml.YAMLError as exc:
            mark = getattr(exc, "problem_mark", None)
            line = f":{mark.line + 1}" if mark else ""
            raise BadInput(f"{path}{line}: not valid YAML ({getattr(exc, 'problem', exc)})") from None
        if isinstance(data, dict) and "tasks" in data:
            data = data["tasks"]
        if not isinstance(data, list):
            raise BadInput(f"{path}: expected a YAML list of tasks")
        tasks = [_task_from_mapping(entry, f"{path}: entry {i}") for i, entry in enumerate(data, start=1)]
    if not tasks:
        raise BadInput(f"{path}: no tasks")
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
