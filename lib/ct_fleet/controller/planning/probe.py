"""Load a plain Inspect task once, as a worker would, and list its samples under a selection.

    python -m ct_fleet.controller.planning.probe ANSWER.json < request.json

Run by controller/tasks.py in a process of its own (probe_process.py: forked from the
controller on Linux, else this command), whose working directory is the shipped code image
and whose sys.path is a worker's (the code's lib, examples/settings, the unpacked
--extra-src trees), so a task that loads here loads on the workers; the user's code runs
in that throwaway process, not in the controller.

Request: {"spec": ..., "task_args": {...}, "limit": N | [start, stop] | null,
"sample_id": [patterns] | null, "shuffle": true | seed | null, "options": {"solver",
"solver_args", "approval", "review", "sentinel", "sentinel_arg"} | null}. Answer, written to the
file named on the command line: {"tasks": [{"name", "sample_ids", "epochs",
"registry_name", "model", "model_roles", "cost_limit", "sandbox_types", "compose_files",
"id_clash"}]} with each task's selected ids in dataset order, with their types, the model
the task names for itself (Task(model=...), else null), the models its roles name
(Task(model_roles=...): {role: [model, ...]}), its own cost limit, the compose files its
Docker sandboxes use (absolute paths, found as Inspect finds them), and the first
two ids of its dataset that are the same id (1 and "1" too: Inspect refuses such a dataset);
or {"option_error": one line} when the request's "options" (--solver with its args,
--approval, --review, --sentinel) cannot be made once the task is loaded; or {"error": one
line}, with exit status 1. The answer has a file of its own because the user's code may
print anything on stdout and stderr.

Inspect's task loader and `slice_dataset` (private, through ct_fleet/inspect_private.py)
make the selection exactly the one `inspect eval` makes.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from ...errors import plain


def _sandbox(holder: Any) -> tuple[str | None, Any]:
    """(type, config) of the sandbox a task or sample names: a spec, a bare type, or a
    (type, config) pair."""
    spec = getattr(holder, "sandbox", None)
    if spec is None or isinstance(spec, str):
        return spec, None
    if isinstance(spec, tuple | list):
        return (str(spec[0]) if spec else None), (spec[1] if len(spec) > 1 else None)
    kind = getattr(spec, "type", None)
    return (str(kind) if kind else None), getattr(spec, "config", None)


def _sandbox_type(holder: Any) -> str | None:
    return _sandbox(holder)[0]


def _compose_files(task: Any, holders: list[Any]) -> list[str]:
    """The compose files of the Docker sandboxes named: a config path is relative to the
    task's directory, and without one Inspect takes that directory's compose file, if any.
    (A Dockerfile alone, or a config object, is left to Inspect on the worker.)"""
    from ...inspect_private import find_compose_file, task_run_dir

    run_dir = Path(task_run_dir(task))
    found = set()
    for holder in holders:
        kind, config = _sandbox(holder)
        if kind != "docker":
            continue
        if config is None:
            name = find_compose_file(str(run_dir))
            path = run_dir / name if name else None
        elif isinstance(config, str) and config.endswith((".yaml", ".yml")):
            path = run_dir / config
        else:
            path = None
        if path is not None and path.is_file():
            found.add(str(path.resolve()))
    return sorted(found)


def probe(request: dict[str, Any]) -> dict[str, Any]:
    from ...inspect_private import load_tasks, refers_to_task_source, slice_dataset

    if refers_to_task_source([request["spec"]]):
        return {"tasks": [], "task_source": True}
    limit = request.get("limit")
    tasks = load_tasks([request["spec"]], request.get("task_args") or {})
    if request.get("options") and (said := _options_error(request["options"])):
        return {"tasks": [], "option_error": said}
    answers = []
    shuffle = request.get("shuffle")
    for task in tasks:
        dataset = task.dataset
        if shuffle and not dataset.shuffled:  # --sample-shuffle: before the selection, as Inspect's loader does
            dataset.shuffle(None if shuffle is True else int(shuffle))
        # Inspect numbers samples without an id from 1 before it selects (eval's run setup).
        for index, sample in enumerate(dataset):
            if sample.id is None:
                sample.id = index + 1
        seen: dict[str, Any] = {}
        clash = None
        for sample in dataset:
            key = str(sample.id)
            if key in seen and clash is None:
                clash = [seen[key], sample.id]
            seen.setdefault(key, sample.id)
        chosen = slice_dataset(dataset, tuple(limit) if isinstance(limit, list) else limit, request.get("sample_id"))
        answers.append(
            {
                "name": task.name,
                "sample_ids": [s.id for s in chosen],
                "epochs": task.epochs,
                "registry_name": task.registry_name,
                "model": str(task.model) if task.model is not None else None,
                "model_roles": {
                    role: [str(m) for m in (models if isinstance(models, list) else [models])]
                    for role, models in (task.model_roles or {}).items()
                },
                "cost_limit": task.cost_limit,
                "sandbox_types": sorted({t for t in map(_sandbox_type, [task, *chosen]) if t}),
                "compose_files": _compose_files(task, [task, *chosen]),
                "id_clash": clash,
            }
        )
    if not tasks:
        _why_no_tasks(str(request["spec"]))
    return {"tasks": answers}


def _options_error(options: dict[str, Any]) -> str | None:
    """The run's --solver, --approval, --review and --sentinel made as a job's eval() makes
    them, now that the task's modules (which may register what they name) are loaded: what
    fails, or None."""
    from ...inspect_private import (
        ApprovalPolicyConfig,
        ReviewPolicyConfig,
        SolverSpec,
        resolve_approval,
        resolve_review,
        resolve_sentinel_spec,
        sentinel_with_args,
        solver_from_spec,
    )

    def solver() -> Any:
        args = options.get("solver_args") or {}
        return solver_from_spec(SolverSpec(options["solver"], args, args))

    def policy(name: str, config: Any, resolve: Any) -> Any:
        value = options[name]  # a config file's content, or a name
        return resolve(config.model_validate(value) if isinstance(value, dict) else value)

    def sentinel() -> Any:
        return resolve_sentinel_spec(sentinel_with_args(options["sentinel"], tuple(options.get("sentinel_arg") or ())))

    steps = {
        "solver": solver,
        "approval": lambda: policy("approval", ApprovalPolicyConfig, resolve_approval),
        "review": lambda: policy("review", ReviewPolicyConfig, resolve_review),
        "sentinel": sentinel,
    }
    for name, make in steps.items():
        if not options.get(name):
            continue
        try:
            make()
        except Exception as exc:
            text = " ".join(line.strip() for line in plain(str(exc)).splitlines() if line.strip())
            return f"--{name}: {type(exc).__name__}: {text[:400]}"
    return None


def _why_no_tasks(spec: str) -> None:
    """Inspect finds tasks by parsing a file, and skips a file that does not parse: a
    syntax error would read as "no @task in it". Compile what was named to show it."""
    path = Path(spec.rpartition("@")[0] or spec)
    files = sorted(path.rglob("*.py")) if path.is_dir() else [path] if path.suffix == ".py" else []
    for file in files:
        if file.is_file():
            compile(file.read_bytes(), str(file), "exec")


def answer_to(request: dict[str, Any], answer_path: Path) -> int:
    """Probe, write the answer (or the one-line error) to ANSWER_PATH; 0, or 1 on an error."""
    code = 0
    try:
        answer = probe(request)
    except BaseException as exc:  # the user's code: anything may come out of it
        text = " ".join(line.strip() for line in plain(str(exc)).splitlines() if line.strip())
        answer, code = {"error": f"{type(exc).__name__}: {text[:400]}".rstrip(": ")}, 1
    answer_path.write_text(json.dumps(answer))
    return code


def main() -> int:
    return answer_to(json.load(sys.stdin), Path(sys.argv[1]))


if __name__ == "__main__":
    sys.exit(main())
