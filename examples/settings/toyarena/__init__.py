"""toyarena: a tiny offline control setting (environments x main tasks x side tasks).

Importing this package does not import inspect_ai, so the fleet controller can read the
catalog cheaply; policies and the task import it when they are built.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from .catalog import ENVIRONMENTS

if TYPE_CHECKING:
    from inspect_ai.solver import Solver

SETTING_NAME = "toyarena"
TASK_SPEC = "examples/settings/toyarena/task.py@toyarena"


def catalog() -> dict[str, dict[str, list[str]]]:
    return {
        env.name: {"main_tasks": list(env.main_tasks), "side_tasks": list(env.side_tasks)}
        for env in ENVIRONMENTS.values()
    }


def sample_id(env: str, main_task: str, side_task: str | None) -> str:
    return f"{env}:{main_task}" if side_task is None else f"{env}:{main_task}:{side_task}"


def _honest() -> Solver:
    from .policies import honest

    return honest()


def _attack() -> Solver:
    from .policies import attack

    return attack()


POLICIES: dict[str, Callable[[], Solver]] = {"honest": _honest, "attack": _attack}

__all__ = ["POLICIES", "SETTING_NAME", "TASK_SPEC", "catalog", "sample_id"]
