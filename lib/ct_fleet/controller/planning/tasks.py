"""Plain Inspect tasks: TASK as `inspect eval` takes it, located in what ships, loaded once.

TASK is `file.py`, `file.py@name`, a registered name, or a directory or glob, which
stands for the task files under it as `inspect eval` finds them. A file inside this repo
ships with the code archive (it must be tracked); a file elsewhere ships inside the
--extra-src tree that holds it, or else its own directory (or the directory given) becomes
an extra tree. The controller then loads the task once, in a process set up like a worker
(probe.py, probe_process.py), to list its sample ids under the selection; jobs are those
ids x epochs.
"""

from __future__ import annotations

import glob
import json
import os
import re
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ...environment import inherited
from ...errors import BadInput
from ...protocol.messages import TaskRoot
from .probe_process import ProbeTimeout, run_probe
from .shipped import ShippedCode

# A directory shipped only because it holds the task file: a tree bigger than this is
# probably a home or temp directory, not a project.
IMPLICIT_TREE_MAX_FILES = 2000
PROBE_TIMEOUT = 300
PROBE_LOG_TAIL = 8192
# Inspect's dynamic task sources (`@task_source`, TaskSource): refused, as eval_set refuses them.
TASK_SOURCE = (
    "is a task source (@task_source): it makes tasks from results while its run goes, and a fleet's "
    "jobs are fixed before it starts; run it with inspect eval, or give ct-fleet the @task tasks it makes"
)


def parse_limit(text: str | None) -> int | list[int] | None:
    """--limit N or START-STOP (1-based, inclusive), as `inspect eval` reads it."""
    if text is None:
        return None
    try:
        if "-" not in text:
            value = int(text)
            if value < 1:
                raise ValueError
            return value
        start, stop = (int(p) for p in text.split("-"))
        if start < 1 or stop < start:
            raise ValueError
        return [start - 1, stop]
    except ValueError:
        raise BadInput(f"--limit {text}: write a count N or a range START-STOP") from None


def parse_sample_ids(values: Sequence[str]) -> list[str] | None:
    ids = [part.strip() for value in values for part in value.split(",") if part.strip()]
    if values and not ids:
        # Inspect reads no ids as no selection: every sample would run.
        shown = " ".join(repr(v) for v in values)[:60]
        raise BadInput(f"--sample-id {shown}: no sample ids in it; write --sample-id ID[,ID...] or leave it out")
    return ids or None


@dataclass(frozen=True)
class Located:
    """Where a task is found on a worker, and what ships it."""

    root: TaskRoot
    spec: str  # relative to the root (protocol.messages.TaskRoot)
    probe_spec: str  # the same task in the shipped image on this machine
    task_file: str | None  # what a direct `inspect eval` from here records as task_file
    implicit_tree: Path | None = None  # a directory to ship because it holds the task file
    path: Path | None = None  # the task file here (None: a registered name)


def _split(spec: str) -> tuple[str, str | None]:
    path, sep, name = spec.rpartition("@")
    return (path, name) if sep and path else (spec, None)


def cwd_relative(path: Path) -> str:
    try:
        return path.relative_to(Path.cwd()).as_posix()
    except ValueError:
        return path.as_posix()


def task_files(task: str) -> list[Path] | None:
    """TASK as a directory or a glob, expanded as `inspect eval` expands it (Inspect's own
    walk: .py and .ipynb files, leaving out names that start with . or _, and env/, venv/
    and tests/ below the directory given), keeping the files with an @task, in the order
    Inspect runs them. None when TASK is neither (a file, file@name or registered name)."""
    path = Path(task).expanduser()
    if "@" in task or not (path.is_dir() or (glob.has_magic(task) and not path.exists())):
        return None
    from ...inspect_private import inspect_task_files

    # Inspect globs relative to a root directory; an absolute TASK is globbed from "/".
    root = Path(path.anchor) if path.is_absolute() else Path.cwd()
    pattern = path.relative_to(root) if path.is_absolute() else path
    found = inspect_task_files([] if path.resolve() == root.resolve() else [pattern.as_posix()], root)
    files = sorted({Path(os.path.abspath(p)) for p in found}, key=lambda p: p.as_posix())
    odd = next((p for p in files if not p.is_file()), None)
    if odd is not None:  # a FIFO named .py would hang the reader, and Inspect with it
        raise BadInput(f"task {task}: {cwd_relative(odd)} is not a regular file")
    files = [p for p in files if _has_task(task, p)]
    if not files:
        raise BadInput(
            f"task {task}: no task file there (Inspect looks for @task in .py and .ipynb files, "
            "leaving out names that start with _ or . and env/, venv/, tests/)"
        )
    return files


def _has_task(task: str, path: Path) -> bool:
    """Whether the file has an @task, read as Inspect reads it (a file that does not parse has none)."""
    from ...inspect_private import parse_decorators

    try:
        return bool(parse_decorators(path, "task"))
    except (ValueError, OSError) as exc:  # ValueError: not UTF-8
        raise BadInput(f"task {task}: {cwd_relative(path)} cannot be read: {exc}") from None


def check_tree_size(task: str, directory: Path, named: str = "task") -> None:
    """Refuse to ship, as the tree of TASK, a directory over IMPLICIT_TREE_MAX_FILES."""
    if sum(len(files) for _, _, files in os.walk(directory)) > IMPLICIT_TREE_MAX_FILES:
        raise BadInput(
            f"{named} {task}: its directory {directory} holds over {IMPLICIT_TREE_MAX_FILES} files; "
            "put the task in a project directory and ship that with --extra-src DIR"
        )


def locate(task: str, repo: Path, extra_src: Sequence[Path], named: str = "task") -> Located:
    """Find TASK (a file, file@name or a registered name) before anything is packed; NAMED
    is what errors call it (a --solver is found as a task is)."""
    file_part, name = _split(task)
    if name == "":
        # Inspect reads an empty name as none: every task of the file would run.
        raise BadInput(
            f"{named} {task}: no task name after @; write {file_part}@NAME, or {file_part} for all its tasks"
        )
    path = Path(file_part).expanduser()
    if not (path.suffix == ".py" or path.is_file() or path.is_dir()):
        # A registered name: Inspect's registry on a worker (installed packages) must know it.
        return Located("registry", task, task, None)
    if not path.exists():
        raise BadInput(f"{named} {task}: no such file {path}")
    if not path.is_file():
        raise BadInput(f"{named} {task}: {path} is not a regular file")
    path = path.resolve()
    suffix = f"@{name}" if name else ""
    display = cwd_relative(path)
    if path.is_relative_to(repo.resolve()):
        rel = path.relative_to(repo.resolve()).as_posix()
        return Located("code", rel + suffix, rel + suffix, display, path=path)
    for tree in extra_src:
        tree = tree.resolve()
        if path.is_relative_to(tree):
            rel = (Path(tree.name) / path.relative_to(tree)).as_posix()
            return Located("extra", rel + suffix, rel + suffix, display, path=path)
    directory = path.parent
    check_tree_size(task, directory, named)
    rel = (Path(directory.name) / path.relative_to(directory)).as_posix()
    return Located("extra", rel + suffix, rel + suffix, display, implicit_tree=directory, path=path)


def _run_probe(
    request: dict[str, Any], cwd: Path, shipped: ShippedCode, display: str, keys: Mapping[str, str]
) -> dict[str, Any]:
    """The probe's answer, read from a file of its own: the task's prints go to stdout and
    stderr, which are kept apart (stderr's tail is shown if the probe dies unanswered)."""
    with tempfile.TemporaryDirectory(prefix="ct-fleet-probe-") as tmp:
        answer_path, log_path = Path(tmp) / "answer.json", Path(tmp) / "stderr.log"
        with open(log_path, "wb") as log:
            try:
                status = run_probe(
                    request, answer_path, cwd=cwd, env=_worker_like_env(shipped, keys), log=log, timeout=PROBE_TIMEOUT
                )
            except ProbeTimeout:
                raise BadInput(f"task {display}: loading it took over {PROBE_TIMEOUT}s") from None
        try:
            answer: dict[str, Any] = json.loads(answer_path.read_bytes())
        except (OSError, ValueError):
            answer = {"error": _last_line(log_path) or f"the loader exited {status} without an answer"}
    if status != 0 or "error" in answer:
        error = str(answer.get("error") or "no error text")
        raise BadInput(f"task {display} does not load from what ships: {error}{_missing_package_hint(error)}")
    return answer


def _missing_package_hint(error: str) -> str:
    missing = re.search(r"No module named '([^'.]+)", error)
    if not missing:
        return ""
    name = missing.group(1)
    return f" (a package the task needs? give it with -r {name}, a .whl or a requirements file)"


def _last_line(path: Path) -> str:
    with open(path, "rb") as fh:
        fh.seek(max(0, fh.seek(0, os.SEEK_END) - PROBE_LOG_TAIL))
        lines = [line for line in fh.read().decode(errors="replace").splitlines() if line.strip()]
    return lines[-1].strip()[:400] if lines else ""


@dataclass(frozen=True)
class ProbedTask:
    name: str
    spec: str  # relative to the located root, naming this one task
    sample_ids: list[str | int]
    epochs: int | None
    sandbox_types: list[str] = field(default_factory=list)  # the sandboxes its task and samples name
    compose_files: list[str] = field(default_factory=list)  # its Docker sandboxes' compose files (absolute)
    model: str | None = None  # the model the task names for itself, which Inspect runs it with
    model_roles: dict[str, list[str]] = field(default_factory=dict)  # Task(model_roles=...): role -> models
    cost_limit: float | None = None  # Task(cost_limit=...)


def _worker_like_env(shipped: ShippedCode, keys: Mapping[str, str]) -> dict[str, str]:
    """The probe's environment: this process's, where the shell's variables win over KEYS
    (the .env values a direct `inspect eval` here would have loaded: a task that builds its
    own model or roles' models as it loads needs the provider's key, as on a worker)."""
    env = inherited(
        {
            "PYTHONPATH": os.pathsep.join(str(p) for p in shipped.import_roots),
            "CT_EXTRA_ROOT": str(shipped.extra_dir),
            "PYTHONDONTWRITEBYTECODE": "1",
        },
        drop=("PYTHONHOME",),
    )
    return {**keys, **env}


def probe(
    located: Located,
    shipped: ShippedCode,
    *,
    task_args: dict[str, Any],
    limit: int | list[int] | None,
    sample_id: list[str] | None,
    display: str,
    shuffle: bool | int | None = None,
    keys: Mapping[str, str] | None = None,
    options: Mapping[str, Any] | None = None,
) -> list[ProbedTask]:
    """Load the task from the shipped image and list its selected sample ids; OPTIONS (the
    run's --solver, --approval, --review, --sentinel) are made there too, once its modules
    are loaded (eval_checks.probe_options)."""
    # Relative to the root it ships in: Inspect's loader globs a file given without @name.
    cwd = {"code": shipped.image, "extra": shipped.extra_dir}.get(located.root, shipped.image)
    if located.root == "code" and not (shipped.image / _split(located.spec)[0]).exists():
        raise BadInput(f"task {display}: not tracked by git, so it would not ship (git add it)")
    request = {
        "spec": located.probe_spec,
        "task_args": task_args,
        "limit": limit,
        "sample_id": sample_id,
        "shuffle": shuffle,
        "options": dict(options or {}),
    }
    answer = _run_probe(request, cwd, shipped, display, keys or {})
    if answer.get("task_source"):
        raise BadInput(f"task {display} {TASK_SOURCE}")
    if answer.get("option_error"):
        raise BadInput(f"{answer['option_error']} (as inspect eval would refuse it)")
    answers = answer["tasks"]
    if not answers and located.root == "registry":
        raise BadInput(f"task {display}: no such task (not a file here, and no installed package registers it)")
    if not answers:
        raise BadInput(f"task {display}: no @task found in it")
    base, name = _split(located.spec)
    found = []
    for answer in answers:
        if not answer["sample_ids"]:
            raise BadInput(f"task {display}: the selection leaves no samples of {answer['name']}")
        if answer.get("id_clash"):
            first, second = answer["id_clash"]
            same = "twice" if first == second else f"as {first!r} and as {second!r}"
            raise BadInput(
                f"task {display}: sample id {first!r} is in {answer['name']}'s dataset {same}; Inspect refuses "
                "such a dataset: give each sample an id of its own"
            )
        if located.root == "registry":
            one = located.spec
        else:
            # By the name it is registered under (the @task function's, or @task(name=...)):
            # Task(name=...) names the task in its log, but a loader cannot find it by that.
            one = f"{base}@{answer.get('registry_name') or answer['name'] if len(answers) > 1 or not name else name}"
        found.append(
            ProbedTask(
                answer["name"],
                one,
                list(answer["sample_ids"]),
                answer["epochs"],
                answer.get("sandbox_types", []),
                answer.get("compose_files", []),
                answer.get("model"),
                answer.get("model_roles") or {},
                answer.get("cost_limit"),
            )
        )
    return found
