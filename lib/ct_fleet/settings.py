"""Find a setting (a package of environments, tasks, policies and one Inspect task) by name.

A setting is found ONLY in one of three sources, in this order:
1. the code's examples/settings/<name>/ (shipped with the code archive);
2. a module <name> on an --extra-src root (shipped as its own tree);
3. an installed distribution declaring it in the entry-point group `ct_fleet.settings`
   (`name = "package.module"` or `"package.module:object"`), on workers installed from
   the fleet's setting_requirements.
An arbitrary importable module is never taken for a setting: `-e os:path` is refused.

The same lookup runs on the controller (against the code and trees that will ship) and
on workers (settings-pull, and before each job of the setting). A setting module
exports SETTING_NAME, TASK_SPEC, catalog(), sample_id(env, main_task, side_task),
POLICIES and optionally pull() (see examples/settings/README.md).

    python -m ct_fleet.settings pull NAME...     (worker/settings-pull.sh)
"""

from __future__ import annotations

import importlib
import os
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from types import ModuleType
from typing import Any

from .errors import BadInput
from .paths import SETTINGS_DIR

DEFAULT_SETTING = "toyarena"
ENTRY_POINT_GROUP = "ct_fleet.settings"
EXTRA_ROOT_ENV = "CT_EXTRA_ROOT"  # the directory holding the --extra-src trees on a worker


@dataclass(frozen=True)
class SettingSources:
    """Where settings may come from (module doc); None/empty leaves a source out."""

    examples: Path | None = SETTINGS_DIR
    extra_roots: tuple[Path, ...] = ()
    entry_points: bool = True

    @classmethod
    def under(cls, extra: Path | None) -> SettingSources:
        """The checkout's examples and the --extra-src trees unpacked under `extra` (a worker's)."""
        roots = tuple(sorted(p for p in extra.iterdir() if p.is_dir())) if extra and extra.is_dir() else ()
        return cls(SETTINGS_DIR, roots)

    @classmethod
    def here(cls, environ: Mapping[str, str]) -> SettingSources:
        """A worker process's sources, from its environment (job-env.sh's CT_EXTRA_ROOT)."""
        extra = environ.get(EXTRA_ROOT_ENV)
        return cls.under(Path(extra) if extra else None)


@dataclass(frozen=True)
class Setting:
    name: str
    module: ModuleType
    source: str = "examples"  # examples, extra-src <basename>, or the distribution's name
    distribution: str | None = None  # for entry-point settings: what workers must install

    @property
    def task_spec(self) -> str:
        return str(self.module.TASK_SPEC)

    @property
    def package_dir(self) -> Path:
        return Path(self.module.__file__ or ".").resolve().parent

    def catalog(self) -> dict[str, dict[str, list[str]]]:
        catalog: dict[str, dict[str, list[str]]] = self.module.catalog()
        return catalog

    def sample_id(self, env: str, main_task: str, side_task: str | None) -> str | int:
        sid = self.module.sample_id(env, main_task, side_task)
        return sid if isinstance(sid, int) else str(sid)

    def has_policy(self, name: str) -> bool:
        return name in getattr(self.module, "POLICIES", {})

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
        return (self.package_dir / "images.py").is_file()


def _import_from(root: Path, name: str) -> ModuleType:
    """Import `name` with `root` first on sys.path; it must come from `root`."""
    if str(root) not in sys.path:
        sys.path.insert(0, str(root))
    module = importlib.import_module(name)
    where = Path(module.__file__ or "").resolve()
    if not where.is_relative_to(root.resolve()):
        raise BadInput(f"setting {name!r}: a module of that name is already loaded from {where.parent}")
    return module


def _has_module(root: Path, name: str) -> bool:
    return (root / name / "__init__.py").is_file() or (root / f"{name}.py").is_file()


def _entry_point(name: str) -> metadata.EntryPoint | None:
    found = [ep for ep in metadata.entry_points(group=ENTRY_POINT_GROUP) if ep.name == name]
    return found[0] if found else None


def known_settings(sources: SettingSources) -> list[str]:
    names = set()
    if sources.examples and sources.examples.is_dir():
        names |= {p.name for p in sources.examples.iterdir() if (p / "__init__.py").is_file()}
    if sources.entry_points:
        names |= {ep.name for ep in metadata.entry_points(group=ENTRY_POINT_GROUP)}
    return sorted(names)


def find_setting(name: str, sources: SettingSources | None = None) -> Setting:
    """The setting `name` from its source; BadInput naming the sources when none has it."""
    sources = sources or SettingSources()
    if not name.isidentifier():
        raise BadInput(f"setting {name!r}: a setting is named like a Python module")
    try:
        if sources.examples and _has_module(sources.examples, name):
            return Setting(name, _import_from(sources.examples, name))
        for root in sources.extra_roots:
            if _has_module(root, name):
                return Setting(name, _import_from(root, name), source=f"extra-src {root.name}")
        ep = _entry_point(name) if sources.entry_points else None
        if ep is not None:
            loaded = ep.load()
            module = loaded if isinstance(loaded, ModuleType) else sys.modules[loaded.__module__]
            dist = ep.dist.name if ep.dist else None
            return Setting(name, module, source=dist or "entry point", distribution=dist)
    except BadInput:
        raise
    except Exception as exc:
        raise BadInput(f"setting {name!r} does not import: {type(exc).__name__}: {_first_line(exc)}") from None
    known = ", ".join(known_settings(sources)) or "none"
    raise BadInput(
        f"setting {name!r} found in no source: not in examples/settings, not on an --extra-src root, "
        f"and no installed distribution declares it as a `{ENTRY_POINT_GROUP}` entry point (known: {known})"
    )


def load_setting(name: str = DEFAULT_SETTING, sources: SettingSources | None = None) -> Setting:
    return find_setting(name, sources)


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else ""


def pull(names: Sequence[str], sources: SettingSources) -> int:
    """What a worker runs at boot: make each setting importable and run its own pull().

    Prints one line per setting; an unimportable setting prints "setting NAME: FAILED ..."
    (the line the controller reports) and the step fails.
    """
    for name in names:
        try:
            setting = find_setting(name, sources)
            hook = getattr(setting.module, "pull", None)
            if callable(hook):
                hook()
        except Exception as exc:  # BadInput included: the message is the report
            message = str(exc) if isinstance(exc, BadInput) else f"{type(exc).__name__}: {_first_line(exc)}"
            print(f"setting {name}: FAILED: {message}", file=sys.stderr, flush=True)
            return 1
        print(f"setting {name}: ready from {setting.source} ({len(setting.catalog())} environments)", flush=True)
    return 0


if __name__ == "__main__":
    if len(sys.argv) < 3 or sys.argv[1] != "pull":
        sys.exit("usage: python -m ct_fleet.settings pull NAME...")
    sys.exit(pull(sys.argv[2:], SettingSources.here(os.environ)))
