"""Docker for a fleet whose tasks run Docker sandboxes and whose workers share this machine.

Local instances (the embedded cloud, or --ec2 against a loopback endpoint) use this
machine's Docker daemon, so before they launch the controller runs bin/ensure-docker
(install when missing and root, start the daemon when down) and bin/build-images for the
settings (content-hashed, so a warm run builds nothing). At the end it stops the daemon
only if this run started it. Workers on EC2 bring their own Docker and images (the AMI).

Every line of the two scripts goes to runs/<fleet>/docker.log; the slow ones (installs,
debootstrap, builds) and the summary are shown as they come.
"""

from __future__ import annotations

import os
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from ...errors import BadInput
from ...paths import REPO_ROOT
from ..planning import DockerNeeds
from .compose_images import ComposeImageError, ready_images

ENSURE_DOCKER = REPO_ROOT / "bin" / "ensure-docker"
BUILD_IMAGES = REPO_ROOT / "bin" / "build-images"
# Lines of the scripts worth showing while they run; the rest only go to the log.
SHOWN = ("missing:", "installing", "installed:", "start dockerd", "debootstrap", "built ", "ERROR", "FAILED", "waiting")
LOCAL_HINT = "or pass -T sandbox=local to run without Docker"


@dataclass
class DockerLease:
    """Docker made ready for one run; release() stops the daemon if this run started it."""

    owner: str
    log_path: Path

    def release(self) -> None:
        _run([str(ENSURE_DOCKER), "stop", "--owner", self.owner], self.log_path, lambda line: None)


def _run(cmd: list[str], log_path: Path, show: Callable[[str], None]) -> tuple[int, str]:
    """Run a script, appending its output to the log; (exit status, its last line)."""
    last = ""
    with open(log_path, "a", encoding="utf-8") as log:
        log.write(f"$ {' '.join(cmd)}\n")
        log.flush()
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=REPO_ROOT)
        assert proc.stdout is not None
        for line in proc.stdout:
            log.write(line)
            log.flush()
            line = line.rstrip()
            if line:
                last = line
            if any(word in line for word in SHOWN):
                show(line)
        return proc.wait(), last


def prepare(needs: DockerNeeds, log_path: Path, info: Callable[[str], None]) -> DockerLease:
    """Docker up, the settings' images built and the plain tasks' compose images built or
    pulled; BadInput (one line) when that cannot be."""
    log_path.parent.mkdir(parents=True, exist_ok=True)
    lease = DockerLease(owner=f"ct-fleet-{os.getpid()}", log_path=log_path)
    start = time.monotonic()

    def show(line: str) -> None:
        info(f"  docker: {line}")

    code, last = _run([str(ENSURE_DOCKER), "start", "--owner", lease.owner], log_path, show)
    if code != 0:
        # exit 2: cannot install (not root) or may not start; the line says what to do.
        raise BadInput(f"the Docker sandbox needs Docker: {last.split('] ', 1)[-1]} ({LOCAL_HINT})")
    summaries = []
    for name in needs.builders:
        code, last = _run([str(BUILD_IMAGES), name], log_path, show)
        if code != 0:
            lease.release()
            raise BadInput(f"bin/build-images {name} failed: {last.split('] ', 1)[-1]} (log: {log_path})")
        summaries.append(f"{name}: {_summary(log_path, name)}")
    count = len(needs.images)
    for compose_file in needs.compose_files:
        try:
            ready, summary = ready_images(compose_file, lambda cmd: _run(cmd, log_path, show))
        except ComposeImageError as exc:
            lease.release()
            raise BadInput(f"the Docker sandbox's images are not ready: {exc} (log: {log_path})") from None
        count += ready
        summaries.append(summary)
    summary = "; ".join(summaries) or "images not built here"
    info(f"docker ready for {count} sandbox image(s) ({summary}) in {time.monotonic() - start:.1f}s")
    return lease


def _summary(log_path: Path, setting: str) -> str:
    """build-images' own count line ("toyarena: 0 built, 4 reused")."""
    lines = [line for line in log_path.read_text(encoding="utf-8").splitlines() if f"{setting}: " in line]
    return lines[-1].split(f"{setting}: ", 1)[-1] if lines else "built"
