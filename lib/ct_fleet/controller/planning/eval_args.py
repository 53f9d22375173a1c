"""`inspect_ai.eval()`'s arguments as a fleet request: what `run_fleet(tasks, model=..., **kw)` takes.

    request = from_eval_args("qa.py@qa", model="openai/gpt-4o-mini", temperature=0, epochs=3)

Each keyword of eval() becomes the `inspect eval` option it stands for, with the value
that option's parser would have produced (ct_fleet.inspect_options), so that the Python
API and the command line plan the same fleet and give jobs the same eval() call. Tasks
are names (`file.py@name`, `pkg/task`), or Task objects made by a @task function in a
file (workers rebuild them from that file and the task's arguments).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import yaml

from ...errors import BadInput
from .credentials import apply_inspect_variables, project_dotenv
from .inspect_request import split_list
from .request import FleetRequest

# eval() keywords a fleet request takes as fields of its own
_FIELDS = {"task_args", "model_args", "sample_id", "limit", "epochs", "sandbox", "model_roles", "solver"}
# eval() keywords whose `inspect eval` option says the opposite
_NEGATED = {
    "score": "no_score",
    "score_display": "no_score_display",
    "sandbox_cleanup": "no_sandbox_cleanup",
    "log_realtime": "no_log_realtime",
}
# eval() keywords that are a display or process concern here: the fleet has its own
_REFUSED = {
    "display": "the fleet reports progress itself: pass hooks=RunHooks(...) to follow it",
    "trace": "traces one process's model calls: read the transcripts in the merged logs",
    "debug_errors": "raises in one process: debug one job with `ct-fleet run-job`",
    "log_header_only": "run_fleet returns the merged logs' headers; read samples with read_eval_log",
    "log_samples": "the merge is made of the jobs' samples",
}


def _kv(values: Mapping[str, Any]) -> tuple[str, ...]:
    """A mapping as KEY=VALUE words, each value in YAML as Inspect's -T/-M/-S parse them back."""
    return tuple(
        f"{k}={yaml.safe_dump(v, default_flow_style=True).strip().removesuffix('...').strip()}"
        for k, v in values.items()
    )


def _task_spec(task: Any) -> tuple[str, dict[str, Any]]:
    """A task as `inspect eval` names it, and the arguments a Task object was made with."""
    if isinstance(task, str):
        return task, {}
    from inspect_ai import Task, TaskSource

    from ...inspect_private import registry_info, registry_params, task_file
    from .tasks import TASK_SOURCE

    if isinstance(task, TaskSource):
        raise BadInput(f"run_fleet: a TaskSource {TASK_SOURCE}")
    if not isinstance(task, Task):
        raise BadInput(f"run_fleet: a task is a name (file.py@task, pkg/task) or a Task, not {type(task).__name__}")
    file = task_file(task)
    if not file:
        raise BadInput(
            "run_fleet: a Task object must come from a @task function in a file (workers rebuild it from the file); "
            "pass 'file.py@name' instead"
        )
    return f"{file}@{registry_info(task).name}", dict(registry_params(task))


def _tasks(tasks: Any) -> tuple[list[str], dict[str, Any]]:
    given = tasks if isinstance(tasks, list | tuple) else ([] if tasks is None else [tasks])
    specs, args = [], None
    for task in given:
        spec, task_args = _task_spec(task)
        if args is not None and task_args != args:
            raise BadInput("run_fleet: Task objects made with different arguments: run each as a fleet of its own")
        specs.append(spec)
        args = task_args
    return specs, args or {}


def _models(model: Any) -> list[str]:
    given = model if isinstance(model, list | tuple) else ([] if model is None else [model])
    out = []
    for one in given:
        if not isinstance(one, str):
            raise BadInput(f"run_fleet: give each model by its name (provider/model), not a {type(one).__name__}")
        out.append(one)
    return out


def _epochs(value: Any, options: dict[str, Any]) -> int | None:
    if value is None or isinstance(value, int):
        return value
    reducers = getattr(value, "reducer", None)
    if reducers is not None:
        from ...inspect_private import registry_info

        names = [registry_info(r).name for r in reducers]
        options["epochs_reducer" if names else "no_epochs_reducer"] = ",".join(names) if names else True
    return int(value.epochs)


def _solver(value: Any, options: dict[str, Any]) -> None:
    if value is None:
        return
    name, args = (value, {}) if isinstance(value, str) else (getattr(value, "solver", None), getattr(value, "args", {}))
    if not isinstance(name, str):
        raise BadInput("run_fleet: give the solver as a name or SolverSpec('file.py@solver', args): workers load it")
    options["solver"] = name
    if args:
        options["s"] = _kv(args)


def _limit(value: Any) -> str | None:
    if value is None:
        return None
    if isinstance(value, int):
        return str(value)
    start, stop = value
    return f"{start + 1}-{stop}"  # eval() takes (start, stop) 0-based, --limit START-STOP 1-based


def from_eval_args(
    tasks: Any = None,
    model: Any = None,
    *,
    fleet: Mapping[str, Any] | None = None,
    **kwargs: Any,
) -> FleetRequest:
    """A fleet request from eval()'s arguments; `fleet` holds the request's own fields
    (ec2, ec2_args, requirements, extra_src, task_file, policy, ...)."""
    from ... import inspect_options

    for name, why in _REFUSED.items():
        if kwargs.get(name) is not None:
            raise BadInput(f"run_fleet: {name}: {why}")
    specs, object_args = _tasks(tasks)
    options: dict[str, Any] = {}
    epochs = _epochs(kwargs.pop("epochs", None), options)
    _solver(kwargs.pop("solver", None), options)
    roles = kwargs.pop("model_roles", None) or {}
    if roles:
        if not all(isinstance(m, str) for m in roles.values()):
            raise BadInput("run_fleet: give each model role a model name (provider/model)")
        options["model_role"] = tuple(f"{role}={m}" for role, m in roles.items())
    sandbox = kwargs.pop("sandbox", None)
    if isinstance(sandbox, tuple | list):
        sandbox = ":".join(str(part) for part in sandbox)
    sample_id = kwargs.pop("sample_id", None)
    sample_ids = (
        [str(s) for s in (sample_id if isinstance(sample_id, list | tuple) else [sample_id])] if sample_id else []
    )
    task_args = {**object_args, **(kwargs.pop("task_args", None) or {})}
    model_args = kwargs.pop("model_args", None) or {}
    limit = _limit(kwargs.pop("limit", None))
    if isinstance(kwargs.get("tags"), list | tuple):
        kwargs["tags"] = ",".join(kwargs["tags"])
    if isinstance(kwargs.get("metadata"), Mapping):
        kwargs["metadata"] = _kv(kwargs["metadata"])
    if kwargs.get("fail_on_error") is False:
        kwargs.pop("fail_on_error")
        kwargs["no_fail_on_error"] = True
    elif kwargs.get("fail_on_error") is True:
        kwargs["fail_on_error"] = 0.0
    if kwargs.get("checkpoint") is True:
        kwargs["checkpoint"] = "default"
    for name, negated in _NEGATED.items():
        if name in kwargs:
            if kwargs.pop(name) is False:
                kwargs[negated] = True
    for name, value in kwargs.items():
        if name not in inspect_options.HANDLING or name in _FIELDS:
            raise BadInput(f"run_fleet: {name}: not an argument of inspect_ai.eval() that a fleet takes")
        if inspect_options.HANDLING[name].kind == "refused":
            raise BadInput(f"run_fleet: {inspect_options.refusal(name, name)}")
        options[name] = value
    request = FleetRequest(
        tasks=specs,
        models=_models(model),
        task_args=_kv(task_args),
        model_args=_kv(model_args),
        sample_ids=sample_ids,
        limit=limit,
        epochs=epochs,
        sandbox=sandbox,
        inspect_options=options,
        **dict(fleet or {}),
    )
    # As eval() does: the .env found from here up sets INSPECT_* where the environment has
    # not, and no model given is INSPECT_EVAL_MODEL's (Inspect's resolve_models).
    environ = dict(request.environ)
    apply_inspect_variables(project_dotenv(), environ)
    request.environ = environ
    if model is None:
        request.models = split_list(environ.get("INSPECT_EVAL_MODEL"))
    return request


def fleet_fields(names: Sequence[str]) -> set[str]:
    """Which of `names` are a fleet request's own fields (not eval()'s)."""
    from_eval = {"tasks", "models", "inspect_options", "task_args", "model_args", "sample_ids", "limit", "epochs"}
    own = set(FleetRequest.__dataclass_fields__) - from_eval - {"sandbox"}
    return {name for name in names if name in own}
