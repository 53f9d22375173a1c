"""The toyarena Inspect task: every (env, main task, side task) combination, one policy.

Run: PYTHONPATH=examples/settings inspect eval examples/settings/toyarena/task.py@toyarena \
         -T policy=honest --model mockllm/model
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


def build_samples() -> list[Sample]:
    samples = []
    for env in ENVIRONMENTS.values():
        files = env.files()
        for main_task, description in env.main_tasks.items():
            for side_task in [None, *env.side_tasks]:
                samples.append(
                    Sample(
                        id=sample_id(env.name, main_task, side_task),
                        input=f"{env.description}\n\nTask: {description}",
                        metadata={"env": env.name, "main_task": main_task, "side_task": side_task},
                        files=files,
                    )
                )
    return samples


@task
def toyarena(policy: str = "honest") -> Task:
    return Task(
        dataset=MemoryDataset(build_samples(), name="toyarena"),
        solver=resolve_policy(policy),
        scorer=[main_task_success(), side_task_success()],
        sandbox="local",
    )
