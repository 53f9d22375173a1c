"""Which tasks a fleet runs: each TASK located (a file, a module, a package's registry
name, with the tree it ships in), then loaded as a worker would to choose its samples; or
a setting's env x main x side tasks under a policy. --solver and --sandbox are placed here
too, as they ship and resolve as tasks do."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from ...errors import BadInput
from ...paths import REPO_ROOT
from ...settings import DEFAULT_SETTING, SettingSources
from . import inspect_request, setting_plan, tasks
from .inspect_request import InspectRequest, split_list
from .jobs import FleetTask
from .request import FleetRequest
from .shipped import ShippedCode


@dataclass
class ChosenTasks:
    """What the task step decided."""

    fleet_tasks: list[FleetTask]
    default_epochs: int = 1
    policy: str | None = None
    plain_sandboxes: set[str] = field(default_factory=set)
    plain_compose: set[str] = field(default_factory=set)
    task_roles: set[tuple[str, str]] = field(default_factory=set)  # (role, model) a task's Task(model_roles=...) names
    cost_limited: set[str] = field(default_factory=set)  # the tasks with a Task(cost_limit=...) of their own


def _locate_task(
    request: FleetRequest, task: str, defaults: dict[str, Any], extra: list[Path], setting_envs: list[str]
) -> tuple[tasks.Located, list[Path]]:
    """TASK and its selection, located; the extra trees, with the task's own directory if it needs one."""
    if request.task_file or setting_envs or request.main_tasks or request.side_tasks:
        raise BadInput("a plain Inspect task takes no --task-file or -e/-t/-s: those select a setting's tasks")
    if request.policy or defaults.get("policy"):
        raise BadInput("--policy applies to settings; a plain task takes its solver from -T arguments")
    located = tasks.locate(task, REPO_ROOT, extra)
    if located.implicit_tree is not None:
        extra = _with_tree(task, located.implicit_tree, extra)
    return located, extra


def _with_tree(task: str, tree: Path, extra: list[Path]) -> list[Path]:
    clash = next((p for p in extra if p.name == tree.name), None)
    if clash is not None:
        raise BadInput(
            f"task {task}: its directory {tree} would ship under the same name as "
            f"--extra-src {clash}: pass its directory with --extra-src instead"
        )
    return [*extra, tree]


def _directory_tree(task: str, extra: list[Path]) -> list[Path]:
    """A directory TASK outside what ships goes as one tree: its task files in subdirectories
    stay where they are relative to each other (each still imports beside itself, as in Inspect)."""
    directory = Path(task).expanduser().resolve()
    if not directory.is_dir() or any(directory.is_relative_to(p.resolve()) for p in [REPO_ROOT, *extra]):
        return extra
    tasks.check_tree_size(task, directory)
    return _with_tree(task, directory, extra)


def _locate_solver(asked: InspectRequest, extra: list[Path]) -> list[Path]:
    """--solver file.py[@name] ships as a task file does; jobs find it by its root
    (worker/inspect_job.py), a registered solver by its name. The merged logs name it as
    given, as a direct run does."""
    solver = asked.job_options.get("solver")
    if not isinstance(solver, str):
        return extra
    where = tasks.locate(solver, REPO_ROOT, extra, named="--solver")
    if where.root == "registry":
        return extra
    asked.job_options.update(solver_path=where.spec, solver_root=where.root)
    tree = where.implicit_tree
    return extra if tree is None or tree in extra else [*extra, tree]


def plain_tasks(
    request: FleetRequest,
    located: list[tuple[str, tasks.Located]],
    shipped: ShippedCode,
    task_args: dict[str, Any],
    defaults: dict[str, Any],
    shuffle: bool | int | None,
    epochs: int | None = None,
    keys: Mapping[str, str] | None = None,
    options: Mapping[str, Any] | None = None,
) -> ChosenTasks:
    """Plain Inspect tasks, each loaded once as a worker would: their samples under the
    selection, and their own epochs unless `epochs` (--epochs) overrides them."""
    limit = tasks.parse_limit(request.limit or defaults.get("limit"))
    sample_id = tasks.parse_sample_ids([*request.sample_ids, *split_list(defaults.get("sample_id"))])
    if limit is not None and sample_id is not None:
        raise BadInput("use either --limit or --sample-id, not both")
    if sample_id is not None and shuffle:
        raise BadInput("use either --sample-id or --sample-shuffle, not both (inspect eval refuses them together)")
    fleet_tasks: list[FleetTask] = []
    probed_all: list[tasks.ProbedTask] = []
    for given, where in located:
        probed = tasks.probe(
            where,
            shipped,
            task_args=task_args,
            limit=limit,
            sample_id=sample_id,
            display=given,
            shuffle=shuffle,
            keys=keys,
            options=options,
        )
        probed_all.extend(probed)
        fleet_tasks.extend(
            FleetTask(
                name=p.name,
                task_spec=p.spec,
                task_root=where.root,
                task_args=task_args,
                sample_ids=p.sample_ids,
                task_file=where.task_file,
                limit=limit,
                sample_id=sample_id,
                model=p.model or "",
                epochs=p.epochs or 1,
            )
            for p in probed
        )
    if len({t.key for t in fleet_tasks}) < len(fleet_tasks):
        raise BadInput("a task is named twice: give each TASK once")
    # Inspect runs each task its own epochs (1 where it names none): the fleet's when they are
    # all the same, else each task's own (with the most as the fleet's, its upper bound).
    task_epochs = {task.epochs or 1 for task in fleet_tasks}
    if epochs is not None or len(task_epochs) == 1:
        fleet_tasks = [replace(task, epochs=None) for task in fleet_tasks]
    return ChosenTasks(
        fleet_tasks,
        default_epochs=max(task_epochs, default=1),
        plain_sandboxes={kind for p in probed_all for kind in p.sandbox_types},
        plain_compose={path for p in probed_all for path in p.compose_files},
        task_roles={(role, model) for p in probed_all for role, names in p.model_roles.items() for model in names},
        cost_limited={p.name for p in probed_all if p.cost_limit is not None},
    )


def settings_tasks(
    request: FleetRequest,
    shipped: ShippedCode,
    sources: SettingSources,
    task_args: dict[str, Any],
    defaults: dict[str, Any],
    requirements: list[str],
    setting_envs: list[str],
) -> ChosenTasks:
    """A setting run: env x main x side tasks of one or more settings, under a policy."""
    if request.limit or request.sample_ids:
        raise BadInput("--limit and --sample-id select a plain task's samples; for settings use -e/-t/-s")
    policy = request.policy or defaults.get("policy") or "honest"
    fleet_tasks = setting_plan.setting_tasks(
        task_file=request.task_file or defaults.get("task_file"),
        envs=setting_envs or defaults.get("envs") or (),
        mains=request.main_tasks,
        sides=request.side_tasks,
        policy=policy,
        task_args=task_args,
        default_setting=defaults.get("setting") or DEFAULT_SETTING,
        sources=sources,
        shipped=shipped,
        requirements=requirements,
    )
    return ChosenTasks(fleet_tasks, policy=policy)


def given_tasks(request: FleetRequest, asked: InspectRequest, defaults: dict[str, Any]) -> list[str]:
    """The plain Inspect tasks asked for: TASK, else a run config's; none for a setting's."""
    return list(request.tasks) or split_list(defaults.get("task")) or asked.run_tasks


def locate(
    request: FleetRequest,
    asked: InspectRequest,
    defaults: dict[str, Any],
    extra: list[Path],
    setting_envs: list[str],
) -> tuple[list[tuple[str, tasks.Located]], list[Path]]:
    """Each TASK located (a directory or glob: each task file under it; a setting's tasks when
    there is no TASK), and the trees that ship with them."""
    located: list[tuple[str, tasks.Located]] = []
    for given in given_tasks(request, asked, defaults):
        files = tasks.task_files(given)
        if files is not None:
            extra = _directory_tree(given, extra)
        for task in [given] if files is None else [tasks.cwd_relative(f) for f in files]:
            where, extra = _locate_task(request, task, defaults, extra, setting_envs)
            located.append((task, where))
    return located, _locate_solver(asked, extra)


def sandbox(
    request: FleetRequest,
    asked: InspectRequest,
    chosen: ChosenTasks,
    located: list[tuple[str, tasks.Located]],
    shipped: ShippedCode,
) -> str | None:
    """--sandbox: Inspect's TYPE[:CONFIG] reaches every job; module:type is the fleet's own
    (returned), checked to resolve from what ships."""
    if request.sandbox and inspect_request.is_inspect_sandbox(request.sandbox):
        inspect_request.check_sandbox_config(request.sandbox, [w.path for _, w in located if w.path])
        asked.job_options["sandbox"] = request.sandbox
        chosen.plain_sandboxes.add(request.sandbox.partition(":")[0])
        return None
    if request.sandbox:
        setting_plan.check_ref("--sandbox", request.sandbox, shipped)
    return request.sandbox
