"""The images of a plain task's compose file, made ready before local workers launch.

Inspect builds a sandbox's images (and pulls the others) on the worker when a task starts;
a failure there is one `PrerequisiteError` per job, with the cause in the job's stderr. On
this machine the workers share the controller's Docker, so the controller builds what the
compose file builds and pulls what it names and the store lacks (as Inspect does: an image
already here is not pulled), once, and a failure is one line naming the image and the
cause, before anything is launched. The workers' own builds then hit Docker's cache.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ...sandbox.docker_cli import docker

Run = Callable[[list[str]], tuple[int, str]]  # a command -> (exit status, its last line)


class ComposeImageError(Exception):
    """One line: which image of which compose file, and why it is not there."""


def ready_images(compose_file: str, run: Run) -> tuple[int, str]:
    """Build and pull the compose file's images; (how many images, a summary)."""
    path = Path(compose_file)
    shown = f"{path.parent.name}/{path.name}"
    project = "ct-fleet-prebuild-" + hashlib.sha256(compose_file.encode()).hexdigest()[:10]
    args = ["compose", "-f", compose_file, "-p", project]
    base = ["docker", *args]
    services = _services(args, shown)
    buildable = sorted(name for name, spec in services.items() if spec.get("build"))
    if buildable:
        code, last = run([*base, "build", *buildable])
        if code != 0:
            raise ComposeImageError(f"{shown}: building {', '.join(buildable)} failed: {_cause(last)}")
    present = pulled = 0
    for name, spec in sorted(services.items()):
        image = spec.get("image")
        if spec.get("build") or not image:
            continue
        if _in_store(image):
            present += 1
            continue
        code, last = run([*base, "pull", name])
        if code != 0:
            raise ComposeImageError(f"{shown}: image {image} (service {name}) could not be pulled: {_cause(last)}")
        pulled += 1
    return len(buildable) + present + pulled, f"{shown}: {len(buildable)} built, {pulled} pulled, {present} present"


def _services(args: list[str], shown: str) -> dict[str, Any]:
    proc = docker(*args, "config", "--format", "json", timeout=120)
    if proc is None or proc.returncode != 0:
        said = [line for line in (proc.stderr if proc else "").splitlines() if line.strip()]
        raise ComposeImageError(f"{shown}: docker compose cannot read it: {_cause(said[-1] if said else '')}")
    services: dict[str, Any] = json.loads(proc.stdout).get("services") or {}
    return services


def _in_store(image: str) -> bool:
    proc = docker("image", "inspect", image)
    return proc is not None and proc.returncode == 0


def _cause(line: str) -> str:
    return line.split("] ", 1)[-1].strip()[:300] or "no error text (see docker.log)"
