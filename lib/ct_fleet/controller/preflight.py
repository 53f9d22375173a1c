"""Checks that must pass before anything is uploaded or launched, each a one-line BadInput.

Workers receive only the git archive of this repo plus the --extra-src trees, so a
module:function policy or a module:type sandbox must resolve from those files, not from
whatever happens to be importable on the launching machine.
"""

from __future__ import annotations

import hashlib
import importlib.util
import re
from collections.abc import Sequence
from pathlib import Path

from ..errors import BadInput
from ..paths import REPO_ROOT, SETTINGS_DIR
from ..protocol.keys import DOCKER_PARAM_PREFIX
from ..settings import DEFAULT_SETTING, Setting
from . import ec2_rules
from .ec2_rules import shown
from .extra_src import ExtraTree, scan_tree

SETTING_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_-]{0,63}")
REF_MODULE = re.compile(r"[A-Za-z_]\w*(\.[A-Za-z_]\w*)*")
REF_NAME = re.compile(r"[A-Za-z_]\w*")
MODEL_NAME = re.compile(r"[A-Za-z0-9_.-]+/[A-Za-z0-9_.:@+/-]+")
MAX_COMMAND = 10_000

# Import roots on a worker besides the extra-src trees (see worker/run-worker.sh).
SHIPPED_ROOTS = (REPO_ROOT / "lib", SETTINGS_DIR, REPO_ROOT)


def split_env_args(envs: Sequence[str]) -> tuple[str, list[str]]:
    """-e setting:env selects the setting (only the controller parses the prefix)."""
    prefixed = [e for e in envs if ":" in e]
    if prefixed and len(prefixed) != len(envs):
        raise BadInput("either prefix every -e with its setting (setting:env) or none of them")
    if not prefixed:
        return DEFAULT_SETTING, list(envs)
    settings = list(dict.fromkeys(e.split(":", 1)[0] for e in prefixed))
    if len(settings) > 1:
        raise BadInput(f"one setting per run: got {', '.join(settings)}; run each setting separately")
    if not SETTING_NAME.fullmatch(settings[0]):
        raise BadInput(f"-e {prefixed[0]!r}: {settings[0]!r} is not a setting name (letters, digits, _ and -)")
    return settings[0], [e.split(":", 1)[1] for e in prefixed]


def check_setting(setting: Setting) -> dict[str, dict[str, list[str]]]:
    """The setting's catalog; BadInput when what was loaded under that name is not a setting."""
    try:
        catalog = setting.catalog()
        setting.task_spec  # noqa: B018  (a setting names its Inspect task)
    except (AttributeError, TypeError):
        raise BadInput(
            f"{setting.name!r} is not a setting (it has no catalog and task): check the name before the : in -e"
        ) from None
    if not isinstance(catalog, dict):
        raise BadInput(f"setting {setting.name!r}: its catalog() returned {type(catalog).__name__}, not a mapping")
    return catalog


def check_model(model: str) -> None:
    if not MODEL_NAME.fullmatch(model):
        raise BadInput(f"--model {model!r}: write provider/model (e.g. anthropic/claude-sonnet-4-0, mockllm/model)")


def check_command(command: str | None) -> None:
    if command is None:
        return
    if not command.strip() or "\x00" in command or len(command) > MAX_COMMAND:
        raise BadInput(f"--command: give a shell command of 1 to {MAX_COMMAND:,} characters that writes $CT_OUTPUT")


def check_extra_src(dirs: Sequence[Path], *, ec2: bool) -> list[ExtraTree]:
    if not dirs:
        return []
    if not ec2:
        raise BadInput("--extra-src applies only with --ec2: local runs import from the working directory")
    trees = []
    seen: dict[str, Path] = {}
    for path in dirs:
        tree = scan_tree(path)
        if tree.name in seen:
            raise BadInput(
                f"--extra-src {seen[tree.name]} and {tree.root} share the basename {tree.name!r}: rename one"
            )
        seen[tree.name] = tree.root
        trees.append(tree)
    return trees


def _module_file_exists(module: str, roots: Sequence[Path]) -> bool:
    rel = Path(*module.split("."))
    return any((root / rel).with_suffix(".py").is_file() or (root / rel / "__init__.py").is_file() for root in roots)


def check_ref(kind: str, ref: str, extra_src: Sequence[Path], *, ec2: bool) -> None:
    """A module:name reference must be importable where it will run."""
    module, sep, name = ref.partition(":")
    if not sep or not REF_MODULE.fullmatch(module) or not REF_NAME.fullmatch(name):
        raise BadInput(f"{kind} {ref!r}: write module:{'function' if kind == '--policy' else 'type'} (Python names)")
    if ec2:
        if not _module_file_exists(module, [*SHIPPED_ROOTS, *extra_src]):
            raise BadInput(
                f"{kind} {ref!r}: module {module} is neither in this repo nor in an --extra-src root; "
                "ship its directory with --extra-src DIR"
            )
        return
    if importlib.util.find_spec(module.split(".")[0]) is None:
        raise BadInput(f"{kind} {ref!r}: module {module} is not importable here")


def check_policy(policy: str, setting: Setting, extra_src: Sequence[Path], *, ec2: bool) -> None:
    if setting.has_policy(policy):
        return
    if ":" not in policy:
        raise BadInput(f"unknown policy {policy!r}: use honest, attack or module:function")
    check_ref("--policy", policy, extra_src, ec2=ec2)


def worker_setup_digest(worker_setup: str | None, extra_src: Sequence[Path]) -> str | None:
    """The setup script's content hash (part of the fleet id); the script must be in an extra-src tree."""
    if not worker_setup:
        return None
    basename, _, rel = worker_setup.partition("/")
    roots = {p.name: p for p in extra_src}
    if basename not in roots or not rel:
        raise BadInput(
            f"worker_setup={worker_setup}: write <extra-src basename>/<path>, with the tree shipped by --extra-src"
        )
    script = roots[basename] / rel
    if not script.is_file():
        raise BadInput(f"worker_setup={worker_setup}: no such file {script}")
    if not script.resolve().is_relative_to(roots[basename].resolve()):
        raise BadInput(f"worker_setup={worker_setup}: {script} leads outside its extra-src tree (a symlink)")
    if Path(rel) not in scan_tree(roots[basename]).files:
        raise BadInput(f"worker_setup={worker_setup}: that file is left out of the shipped tree (cache or credential)")
    return hashlib.sha256(script.read_bytes()).hexdigest()[:16]


def docker_auth_params(environ: dict[str, str]) -> tuple[str, str]:
    name = environ.get("DOCKER_ORG_NAME_SSM_PARAM", f"{DOCKER_PARAM_PREFIX}name")
    pat = environ.get("DOCKER_ORG_PAT_SSM_PARAM", f"{DOCKER_PARAM_PREFIX}pat")
    for param in (name, pat):
        if not ec2_rules.is_ssm_path(param):
            raise BadInput(
                f"Docker auth parameter {shown(param)}: not an SSM parameter path (/a/b of letters, digits and _.-)"
            )
        if not param.startswith(DOCKER_PARAM_PREFIX):
            raise BadInput(
                f"Docker auth parameter {param} must stay under {DOCKER_PARAM_PREFIX} (the worker policy allows only those)"
            )
    return name, pat
