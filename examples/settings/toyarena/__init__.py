"""toyarena: a tiny offline control setting (environments x main tasks x side tasks).

Importing this package does not import inspect_ai, so the fleet controller can read the
catalog cheaply; policies and the task import it when they are built.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

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


def check_task_args(task_args: dict[str, Any]) -> None:
    """The task's arguments besides the policy (-T); ValueError names what is wrong."""
    from .compose import DEFAULT_SANDBOX, SANDBOXES

    unknown = sorted(set(task_args) - {"sandbox"})
    if unknown:
        raise ValueError(f"toyarena has no task argument {', '.join(unknown)} (it takes -T sandbox=docker|local)")
    if task_args.get("sandbox", DEFAULT_SANDBOX) not in SANDBOXES:
        raise ValueError(f"-T sandbox={task_args['sandbox']}: use -T sandbox=docker or -T sandbox=local")


def compose_files(task_args: dict[str, Any] | None = None) -> list[Path]:
    """The compose files the task's sandboxes run with these arguments (all when None)."""
    from .compose import DEFAULT_SANDBOX, compose_files

    if (task_args or {}).get("sandbox", DEFAULT_SANDBOX) != "docker":
        return []
    return compose_files()


__all__ = ["POLICIES", "SETTING_NAME", "TASK_SPEC", "catalog", "check_task_args", "compose_files", "sample_id"]
