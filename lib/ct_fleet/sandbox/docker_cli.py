"""Running the docker CLI for the sandbox helpers: quiet, bounded, never raising."""

from __future__ import annotations

import shutil
import subprocess

TIMEOUT_S = 60


def available() -> bool:
    return shutil.which("docker") is not None


def docker(*args: str, timeout: float = TIMEOUT_S) -> subprocess.CompletedProcess[str] | None:
    """`docker ARGS`, or None when docker is missing or does not answer in time."""
    if not available():
        return None
    try:
        return subprocess.run(["docker", *args], capture_output=True, text=True, timeout=timeout)
    except (OSError, subprocess.TimeoutExpired):
        return None


def lines(*args: str) -> list[str]:
    """The non-empty output lines of a docker command that succeeded, else []."""
    result = docker(*args)
    if result is None or result.returncode != 0:
        return []
    return [line for line in result.stdout.splitlines() if line.strip()]
