"""Find a setting (a package of environments, tasks, policies and one Inspect task).

Settings live in examples/settings/<name>/ and are imported by name with that directory
on sys.path, on the controller and on workers alike.
"""

from __future__ import annotations

import importlib
import sys
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

from .errors import BadInput
from .paths import SETTINGS_DIR

DEFAULT_SETTING = "toyarena"


@dataclass(frozen=True)
class Setting:
    name: str
    module: ModuleType

    @property
    def task_spec(self) -> str:
        return str(self.module.TASK_SPEC)

    def catalog(self) -> dict[str, dict[str, list[str]]]:
        catalog: dict[str, dict[str, list[str]]] = self.module.catalog()
        return catalog

    def sample_id(self, env: str, main_task: str, side_task: str | None) -> str:
        return str(self.module.sample_id(env, main_task, side_task))

    def has_policy(self, name: str) -> bool:
        return name in self.module.POLICIES

    def check_task_args(self, task_args: dict[str, Any]) -> None:
        """The setting's optional check_task_args(args) of the -T pairs (ValueError -> BadInput)."""
        hook = getattr(self.module, "check_task_args", None)
        if callable(hook):
            try:
                hook(task_args)
            except ValueError as exc:
                raise BadInput(str(exc)) from None

    def compose_files(self, task_args: dict[str, Any] | None = None) -> list[Path]:
        """The Docker compose files its sandboxes run with these task args (every one when
        None); empty when the setting (or this choice of arguments) needs no Docker."""
        hook = getattr(self.module, "compose_files", None)
        return [Path(p) for p in hook(task_args)] if callable(hook) else []

    @property
    def builds_images(self) -> bool:
        """Does bin/build-images build its images (an images.py beside the package)?"""
        return (SETTINGS_DIR / self.name / "images.py").is_file()


def load_setting(name: str = DEFAULT_SETTING) -> Setting:
    if str(SETTINGS_DIR) not in sys.path:
        sys.path.insert(0, str(SETTINGS_DIR))
    try:
        module = importlib.import_module(name)
    except ModuleNotFoundError as exc:
        known = sorted(p.name for p in SETTINGS_DIR.iterdir() if (p / "__init__.py").exists())
        raise BadInput(f"unknown setting {name!r}: choose one of {', '.join(known)}") from exc
    return Setting(name=name, module=module)


def pull(name: str) -> None:
    """What a worker runs at boot for each setting: the setting's own pull(), if it has one.

    In-repo settings ship inside the code artifact, so importing them is the whole check.
    """
    setting = load_setting(name)
    hook = getattr(setting.module, "pull", None)
    if callable(hook):
        hook()
    print(f"setting {name}: ready ({len(setting.catalog())} environments)")


if __name__ == "__main__":
    import sys

    if len(sys.argv) != 3 or sys.argv[1] != "pull":
        sys.exit("usage: python -m ct_fleet.settings pull NAME")
    pull(sys.argv[2])
