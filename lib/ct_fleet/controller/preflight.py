"""Checks that must pass before anything is uploaded or launched, each a one-line BadInput.

Workers receive only the git archive of this repo plus the --extra-src trees, on EC2 and
on the local fleet alike (which rehearses EC2), so every policy, sandbox, setting and
task reference is resolved against what ships (controller/shipped.py, setting_plan.py,
tasks.py), not against whatever happens to be importable on the launching machine.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from pathlib import Path

from ..errors import BadInput
from ..protocol.keys import DOCKER_PARAM_PREFIX


def check_extra_src(dirs: Sequence[Path]) -> list[Path]:
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
