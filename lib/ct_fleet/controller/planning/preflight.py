"""Checks that must pass before anything is uploaded or launched, each a one-line BadInput.

Workers receive only the git archive of this repo plus the --extra-src trees, on EC2 and
on the local fleet alike (which rehearses EC2), so every policy, sandbox, setting and
task reference is resolved against what ships (controller/shipped.py, setting_plan.py,
tasks.py), not against whatever happens to be importable on the launching machine.
"""

from __future__ import annotations

import hashlib
import os
import re
import subprocess
from collections.abc import Sequence
from pathlib import Path

from ... import restic
from ...error_lines import shown
from ...errors import BadInput
from ...protocol import knob_rules as ec2_rules
from ...protocol.keys import DOCKER_PARAM_PREFIX
from .extra_src import ExtraTree, scan_tree

MODEL_NAME = re.compile(r"[A-Za-z0-9_.-]+/[A-Za-z0-9_.:@+/-]+")
NO_MODEL = "none"  # Inspect's --model none: a task that calls no model
MAX_COMMAND = 10_000
# A registry as `docker login` takes it: host (a DNS name or IPv4) and an optional port.
REGISTRY = re.compile(
    r"(?:[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?\.)*[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?(?::[0-9]{1,5})?"
)


def check_runs_dir(runs: Path, environ: dict[str, str]) -> None:
    """The runs directory is a directory this user may write, or can be made one."""
    named = f"CT_FLEET_RUNS={runs}" if environ.get("CT_FLEET_RUNS") else f"the runs directory {runs}"
    fix = "point CT_FLEET_RUNS at a directory you can write" if environ.get("CT_FLEET_RUNS") else "make it writable"
    existing = runs
    while not existing.exists() and existing.parent != existing:
        existing = existing.parent
    if not existing.is_dir():
        where = "is" if existing == runs else f"is under {existing}, which is"
        raise BadInput(f"{named} {where} not a directory: {fix}")
    if not os.access(existing, os.W_OK | os.X_OK):
        where = "is not writable" if existing == runs else f"cannot be made: {existing} is not writable"
        raise BadInput(f"{named} {where}: {fix}")


def check_restic(environ: dict[str, str]) -> None:
    """--checkpoint on workers of this machine: a restic that Inspect's checkpoints can use,
    found without a download (ct_fleet.restic), or refused before anything is made."""
    try:
        restic.find(environ.get("PATH"))
    except restic.NoRestic as exc:
        raise BadInput(str(exc)) from None


def check_model(model: str, given: str | None = None) -> None:
    if model != NO_MODEL and not MODEL_NAME.fullmatch(model):
        named = given or f"--model {model!r}"
        raise BadInput(f"{named}: write provider/model (e.g. anthropic/claude-sonnet-4-0, mockllm/model)")


def check_command(command: str | None) -> None:
    if command is None:
        return
    if not command.strip() or "\x00" in command or len(command) > MAX_COMMAND:
        raise BadInput(f"--command: give a shell command of 1 to {MAX_COMMAND:,} characters that writes $CT_OUTPUT")
    # Workers run it with `bash -c`: bash itself parses it here (given as an argument,
    # never put into a script), so a quoting slip stops the run before it starts.
    parsed = subprocess.run(["bash", "-n", "-c", command], capture_output=True, text=True, timeout=30, check=False)
    if parsed.returncode != 0:
        said = [line for line in parsed.stderr.splitlines() if line.strip()]
        why = (said[0] if said else f"bash -n exit {parsed.returncode}").removeprefix("bash: -c: ")
        raise BadInput(f"--command is not valid bash ({why}): fix its quoting")


def check_extra_src(dirs: Sequence[Path]) -> list[ExtraTree]:
    """The --extra-src trees, scanned: they ship on EC2 and on the local fleet alike."""
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


def docker_registry(environ: dict[str, str]) -> str:
    """DOCKER_REGISTRY, the private registry workers log in to (empty: Docker Hub)."""
    registry = environ.get("DOCKER_REGISTRY", "").strip()
    if registry and not REGISTRY.fullmatch(registry):
        raise BadInput(f"DOCKER_REGISTRY={shown(registry)}: write a registry host, optionally :port (e.g. ghcr.io)")
    return registry


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
