"""Checks that must pass before anything is uploaded or launched, each a one-line BadInput.

Workers receive only the git archive of this repo plus the --extra-src trees, so a
module:function policy or a module:type sandbox must resolve from those files, not from
whatever happens to be importable on the launching machine.
"""

from __future__ import annotations

import hashlib
import importlib.util
from collections.abc import Sequence
from pathlib import Path

from ..errors import BadInput
from ..paths import REPO_ROOT, SETTINGS_DIR
from ..protocol.keys import DOCKER_PARAM_PREFIX
from ..settings import DEFAULT_SETTING, Setting

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
    return settings[0], [e.split(":", 1)[1] for e in prefixed]


def check_extra_src(dirs: Sequence[Path], *, ec2: bool) -> list[Path]:
    if not dirs:
        return []
    if not ec2:
        raise BadInput("--extra-src applies only with --ec2: local runs import from the working directory")
    resolved = []
    seen: dict[str, Path] = {}
    for path in dirs:
        path = path.expanduser().resolve()
        if not path.is_dir():
            raise BadInput(f"--extra-src {path}: not a directory")
        if path.name in seen:
            raise BadInput(f"--extra-src {seen[path.name]} and {path} share the basename {path.name!r}: rename one")
        seen[path.name] = path
        resolved.append(path)
    return resolved


def _module_file_exists(module: str, roots: Sequence[Path]) -> bool:
    rel = Path(*module.split("."))
    return any((root / rel).with_suffix(".py").is_file() or (root / rel / "__init__.py").is_file() for root in roots)


def check_ref(kind: str, ref: str, extra_src: Sequence[Path], *, ec2: bool) -> None:
    """A module:name reference must be importable where it will run."""
    module, sep, name = ref.partition(":")
    if not sep or not module or not name:
        raise BadInput(f"{kind} {ref!r}: write module:{'function' if kind == '--policy' else 'type'}")
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
    return hashlib.sha256(script.read_bytes()).hexdigest()[:16]


def docker_auth_params(environ: dict[str, str]) -> tuple[str, str]:
    name = environ.get("DOCKER_ORG_NAME_SSM_PARAM", f"{DOCKER_PARAM_PREFIX}name")
    pat = environ.get("DOCKER_ORG_PAT_SSM_PARAM", f"{DOCKER_PARAM_PREFIX}pat")
    for param in (name, pat):
        if not param.startswith(DOCKER_PARAM_PREFIX):
            raise BadInput(
                f"Docker auth parameter {param} must stay under {DOCKER_PARAM_PREFIX} (the worker policy allows only those)"
            )
    return name, pat
