"""The toyarena Inspect task: every (env, main task, side task) combination, one policy.

Run: PYTHONPATH=examples/settings inspect eval examples/settings/toyarena/task.py@toyarena \
         -T policy=honest --model mockllm/model [-T sandbox=local]

Each sample runs in a Docker container of its environment's image (`sandbox=docker`, the
default: bin/build-images builds the images), or, with `-T sandbox=local`, in a temp
directory on this machine with the environment's files copied in (for machines without
Docker). Docker is never swapped for local silently: asked for and missing, the task
fails at once, saying what to run.
"""

from __future__ import annotations

import importlib
import sys
from pathlib import Path

# Inspect loads this file by path, not as part of the package; make `toyarena`
# importable even when examples/settings is not on PYTHONPATH.
_SETTINGS_DIR = str(Path(__file__).resolve().parents[1])
if _SETTINGS_DIR not in sys.path:
    sys.path.append(_SETTINGS_DIR)

from inspect_ai import Task, task  # noqa: E402
from inspect_ai.dataset import MemoryDataset, Sample  # noqa: E402
from inspect_ai.solver import Solver  # noqa: E402

from toyarena import POLICIES, sample_id  # noqa: E402
from toyarena.catalog import ENVIRONMENTS  # noqa: E402
from toyarena.compose import DEFAULT_SANDBOX, SANDBOXES, compose_file, require_images  # noqa: E402
from toyarena.images import image_ref  # noqa: E402
from toyarena.scorers import main_task_success, side_task_success  # noqa: E402


def resolve_policy(policy: str) -> Solver:
    """A name in POLICIES, or `module:function` naming a no-argument Solver factory."""
    if policy in POLICIES:
        return POLICIES[policy]()
    module_name, sep, function_name = policy.partition(":")
    if not sep or not module_name or not function_name:
        raise ValueError(
            f"unknown policy {policy!r}: use one of {', '.join(sorted(POLICIES))} or a module:function reference"
        )
    try:
        factory = getattr(importlib.import_module(module_name), function_name)
    except (ImportError, AttributeError) as exc:
        raise ValueError(f"cannot load policy {policy!r}: {exc}") from exc
    return factory()


def build_samples(sandbox: str) -> list[Sample]:
    """In Docker the environment's files are in its image; locally they are copied in."""
    samples = []
    for env in ENVIRONMENTS.values():
        in_docker = sandbox == "docker"
        files = None if in_docker else env.files()
        spec = ("docker", str(compose_file(env.name))) if in_docker else None
        for main_task, description in env.main_tasks.items():
            for side_task in [None, *env.side_tasks]:
                samples.append(
                    Sample(
                        id=sample_id(env.name, main_task, side_task),
                        input=f"{env.description}\n\nTask: {description}",
                        metadata={"env": env.name, "main_task": main_task, "side_task": side_task},
                        files=files,
                        sandbox=spec,
                    )
                )
    return samples


@task
def toyarena(policy: str = "honest", sandbox: str = DEFAULT_SANDBOX) -> Task:
    if sandbox not in SANDBOXES:
        raise ValueError(f"unknown sandbox {sandbox!r}: use -T sandbox=docker or -T sandbox=local")
    solver = resolve_policy(policy)
    if sandbox == "docker":
        require_images([image_ref(env) for env in ENVIRONMENTS])
    # The checks run Python inside the sandbox: the image's python3, or locally the
    # interpreter running Inspect (None).
    python = "python3" if sandbox == "docker" else None
    return Task(
        dataset=MemoryDataset(build_samples(sandbox), name="toyarena"),
        solver=solver,
        scorer=[main_task_success(python=python), side_task_success(python=python)],
        # Docker samples carry their own compose file; the task-level sandbox is the
        # local one, or none.
        sandbox="local" if sandbox == "local" else None,
    )
