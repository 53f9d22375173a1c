"""Setting runs: -e setting:env (repeatable, several settings), task files, a policy.

Each setting named gives one Inspect task of the fleet (its TASK_SPEC, with the policy
as task argument) whose samples are the selected env x main task x side task combinations.
Settings are looked up only in their three sources (ct_fleet.settings), checked against
what ships: an examples setting must be tracked, an extra-src setting is in its tree, and
an installed distribution's setting must be installable on workers (setting_requirements).
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from packaging.requirements import InvalidRequirement, Requirement

from ...error_lines import shown
from ...errors import BadInput
from ...settings import DEFAULT_SETTING, Setting, SettingSources, find_setting
from .jobs import FleetTask, TaskSpec, dedupe, load_task_file, resolve_task_file, select_tasks, validate_tasks
from .shipped import ShippedCode
from .task_args import merge_policy
from .tasks import cwd_relative


def split_env_args(envs: Sequence[str], default: str = DEFAULT_SETTING) -> list[tuple[str, str]]:
    """-e setting:env picks the setting; bare envs use the default. Mixing the forms is refused."""
    prefixed = [e for e in envs if ":" in e]
    if prefixed and len(prefixed) != len(envs):
        raise BadInput("either prefix every -e with its setting (setting:env) or none of them")
    pairs = []
    for env in envs:
        setting, sep, name = env.rpartition(":")
        if sep and (not setting or not name):
            raise BadInput(f"-e {env!r}: write setting:env")
        pairs.append((setting or default, name))
    return list(dict.fromkeys(pairs))


def _canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def requirement_names(requirements: Sequence[str]) -> set[str]:
    """Distribution names of pip requirements (specifiers, or wheel files by their name)."""
    names = set()
    for req in requirements:
        path = Path(req)
        if path.suffix == ".whl":
            names.add(_canonical(path.name.split("-", 1)[0]))
        else:
            match = re.match(r"\s*([A-Za-z0-9][A-Za-z0-9._-]*)", req)
            if match:
                names.add(_canonical(match.group(1)))
    return names


@dataclass(frozen=True)
class Requirements:
    """A fleet's pip requirements: specifiers for uv, and local wheels that ship with the fleet."""

    specs: list[str]
    wheels: list[Path]

    @property
    def identity(self) -> list[str]:
        """What enters the fleet id: the specifiers, and each wheel by name and content."""
        digests = [f"{w.name}:{hashlib.sha256(w.read_bytes()).hexdigest()[:16]}" for w in self.wheels]
        return [*self.specs, *digests]


def plan_requirements(requirements: Sequence[str]) -> Requirements:
    specs, wheels = [], []
    for req in requirements:
        if any(c.isspace() for c in req):
            raise BadInput(f"setting requirement {req!r}: write it without spaces (pkg>=1.0)")
        if req.endswith(".whl"):
            path = Path(req).expanduser()
            if not path.is_file():
                raise BadInput(f"setting requirement {req}: no such wheel file")
            wheels.append(path.resolve())
        else:
            specs.append(_requirement(req))
    return Requirements(specs, wheels)


# A requirement crosses a shell on workers as a word; PEP 508 allows more than a word
# needs (URLs, markers with quotes and spaces), which are refused here rather than quoted.
WORD = re.compile(r"[A-Za-z0-9._\-\[\],<>=!~]+")


def _requirement(req: str) -> str:
    try:
        Requirement(req)
    except InvalidRequirement as exc:
        reason = str(exc).splitlines()[0]
        raise BadInput(
            f"setting requirement {shown(req)}: not a pip requirement ({reason}); write name[extras]>=version"
        ) from None
    if not WORD.fullmatch(req):
        raise BadInput(f"setting requirement {shown(req)}: write name[extras] and versions only (no URLs or markers)")
    return req


def locked_names(lock: Path) -> set[str]:
    if not lock.is_file():
        return set()
    return {_canonical(m.group(1)) for m in re.finditer(r"^([A-Za-z0-9][A-Za-z0-9._-]*)==", lock.read_text(), re.M)}


def check_shipped(setting: Setting, shipped: ShippedCode, requirements: Sequence[str]) -> None:
    if setting.source == "examples":
        if not (shipped.settings_dir / setting.name / "__init__.py").is_file():
            raise BadInput(
                f"setting {setting.name!r} is not tracked by git, so it would not ship (git add examples/settings/{setting.name})"
            )
    elif setting.distribution:
        wanted = _canonical(setting.distribution)
        if wanted not in requirement_names(requirements) | locked_names(shipped.image / "requirements.lock"):
            raise BadInput(
                f"setting {setting.name!r} comes from the installed distribution {setting.distribution}, which workers "
                f"do not have: add it with --ec2-arg setting_requirements={setting.distribution} (or a wheel path)"
            )


def task_ref(setting: Setting, shipped: ShippedCode) -> tuple[str, str]:
    """(root, spec) of the setting's Inspect task as workers find it."""
    spec = setting.task_spec
    file, sep, name = spec.rpartition("@")
    file = file if sep else spec
    if (setting.package_dir / file).is_file():
        return "setting", spec
    if file.endswith(".py"):
        if (shipped.image / file).is_file():
            return "code", spec
        raise BadInput(
            f"setting {setting.name!r}: TASK_SPEC {spec} is neither in the setting's package nor in the repo"
        )
    return "registry", spec


def check_ref(kind: str, ref: str, shipped: ShippedCode) -> None:
    """A module:name reference must import from what ships (the repo and --extra-src trees)."""
    module, sep, name = ref.partition(":")
    if not sep or not module or not name:
        raise BadInput(f"{kind} {ref!r}: write module:{'function' if kind == '--policy' else 'type'}")
    if not shipped.has_module(module):
        raise BadInput(
            f"{kind} {ref!r}: module {module} is neither tracked in this repo nor in an --extra-src root; "
            "git add it, or ship its directory with --extra-src DIR"
        )


def check_policy(policy: str, setting: Setting, shipped: ShippedCode) -> None:
    if setting.has_policy(policy):
        return
    if ":" not in policy:
        known = ", ".join(sorted(getattr(setting.module, "POLICIES", {}))) or "none"
        raise BadInput(f"unknown policy {policy!r} for setting {setting.name}: use one of {known} or module:function")
    check_ref("--policy", policy, shipped)


def setting_tasks(
    *,
    task_file: str | None,
    envs: Sequence[str],
    mains: Sequence[str],
    sides: Sequence[str],
    policy: str,
    task_args: dict[str, Any],
    default_setting: str,
    sources: SettingSources,
    shipped: ShippedCode,
    requirements: Sequence[str],
) -> list[FleetTask]:
    job_args = merge_policy(policy, task_args)
    if task_file:
        if envs or mains or sides:
            raise BadInput("use either --task-file or -e/-t/-s, not both")
        selected = load_task_file(resolve_task_file(task_file))
        by_setting: dict[str, list[TaskSpec]] = {}
        for t in selected:
            by_setting.setdefault(t.setting or default_setting, []).append(t)
    else:
        pairs = split_env_args(envs, default_setting)
        if not pairs:
            select_tasks({}, [], mains, sides)  # names the ways to choose tasks
        envs_of: dict[str, list[str]] = {}
        for setting_name, env in pairs:
            envs_of.setdefault(setting_name, []).append(env)
        by_setting = {}
        for setting_name, names in envs_of.items():
            catalog = find_setting(setting_name, sources).catalog()
            by_setting[setting_name] = select_tasks(catalog, names, mains, sides, setting_name)
    tasks = []
    for setting_name, chosen in by_setting.items():
        setting = find_setting(setting_name, sources)
        check_shipped(setting, shipped, requirements)
        validate_tasks(chosen, setting.catalog())
        check_policy(policy, setting, shipped)
        setting.check_task_args(task_args)
        chosen = dedupe(TaskSpec(t.env, t.main_task, t.side_task, setting_name) for t in chosen)
        root, spec = task_ref(setting, shipped)
        name = spec.rpartition("@")[2] if "@" in spec else setting_name
        # Workers record the file where they unpacked it; the merged header names it as here.
        task_file = cwd_relative(setting.package_dir / spec.rpartition("@")[0]) if root == "setting" else None
        tasks.append(
            FleetTask(
                name=name,
                task_spec=spec,
                task_root=root,  # type: ignore[arg-type]
                task_args=dict(job_args),
                sample_ids=list(dict.fromkeys(setting.sample_id(t.env, t.main_task, t.side_task) for t in chosen)),
                setting=setting_name,
                task_file=task_file,
                selection=chosen,
            )
        )
    return tasks
