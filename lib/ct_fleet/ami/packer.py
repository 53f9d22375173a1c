"""The Packer driver: find and run packer, follow its phases and step timings, read its manifest."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from ..environment import inherited
from ..errors import BadInput
from ..protocol import steplog
from .common import AMI_ID_RE, AmiError

if TYPE_CHECKING:
    import boto3

# The tag of every line the provisioning scripts log (CT_TAG in packer/scripts/lib.sh).
AMI_STEP_TAG = "ct-fleet-ami"


PACKER_VERSION_RE = re.compile(r"(\d+)\.(\d+)\.(\d+)")


# Packer (amazon-ebs) messages that open a phase of the build, in order of appearance.
PACKER_PHASES: list[tuple[str, str]] = [
    ("Launching a source AWS instance", "packer: launch builder"),
    ("Provisioning with", "packer: provision"),
    ("Stopping the source instance", "packer: stop builder"),
    ("Creating AMI", "packer: create AMI + snapshots"),
    ("Terminating the source AWS instance", "packer: terminate builder"),
    ("Running post-processor", "packer: post-process"),
]


@dataclass
class Timings:
    """Named phases and their durations, in order; printed as a table at the end."""

    phases: list[tuple[str, float]] = field(default_factory=list)

    @contextmanager
    def phase(self, name: str) -> Iterator[None]:
        start = time.monotonic()
        try:
            yield
        finally:
            self.add(name, time.monotonic() - start)

    def add(self, name: str, seconds: float) -> None:
        self.phases.append((name, seconds))

    def seconds(self, name: str) -> float | None:
        return next((s for n, s in self.phases if n == name), None)


class PackerPhases:
    """Turns Packer's output into phases: a marker line closes the open phase and opens
    the next one; the provisioning scripts' own "step X: ok in Ns" lines (steplog) are kept
    as sub-phases of `packer: provision`."""

    def __init__(self, timings: Timings, clock: Callable[[], float] = time.monotonic) -> None:
        self.timings = timings
        self.clock = clock
        self.current = "packer: prepare"
        self.started = clock()
        self.steps: list[tuple[str, float]] = []

    def feed(self, line: str) -> None:
        step = steplog.parse_step(line)
        if step and step.tag == AMI_STEP_TAG:
            if step.event == "ok" and step.seconds is not None:
                self.steps.append((f"  step {step.name}", float(step.seconds)))
            return
        for marker, name in PACKER_PHASES:
            if marker in line and name != self.current:
                self._close()
                self.current = name
                return

    def _close(self) -> None:
        now = self.clock()
        self.timings.add(self.current, now - self.started)
        if self.current == "packer: provision":
            for name, seconds in self.steps:
                self.timings.add(name, seconds)
            self.steps = []
        self.started = now

    def finish(self) -> None:
        self._close()


@dataclass(frozen=True)
class ManifestEntry:
    ami_id: str
    region: str
    packer_run_uuid: str
    custom_data: dict[str, str]


def parse_manifest(path: str | Path, region: str | None = None) -> ManifestEntry:
    """The AMI of the last Packer run recorded in a manifest.

    The manifest post-processor appends one entry per build and run; the last run is
    named by `last_run_uuid`. `artifact_id` is `region:ami-...`, comma-separated when an
    AMI is copied to several regions: `region` picks one (default: the first).
    """
    try:
        data = json.loads(Path(path).read_text())
    except (OSError, ValueError) as exc:
        raise AmiError(f"cannot read Packer manifest {path}: {exc}") from exc
    run = data.get("last_run_uuid")
    builds = [b for b in data.get("builds", []) if b.get("packer_run_uuid") == run]
    if not run or not builds:
        raise AmiError(f"Packer manifest {path} has no build for its last run ({run})")
    build = builds[-1]
    artifacts: dict[str, str] = {}
    for part in str(build.get("artifact_id", "")).split(","):
        where, _, ami = part.strip().partition(":")
        if AMI_ID_RE.match(ami):
            artifacts.setdefault(where, ami)
    if not artifacts:
        raise AmiError(f"Packer manifest {path}: no AMI in artifact_id {build.get('artifact_id')!r}")
    if region is None:
        region, ami_id = next(iter(artifacts.items()))
    elif region in artifacts:
        ami_id = artifacts[region]
    else:
        raise AmiError(f"Packer manifest {path}: no AMI for {region} (have {', '.join(artifacts)})")
    return ManifestEntry(ami_id, region, run, dict(build.get("custom_data") or {}))


def find_packer(packer: str = "packer") -> str:
    path = shutil.which(packer)
    if path is None:
        raise BadInput(f"{packer} not found: apt-get install packer (1.6.6), or install Packer >= 1.7")
    return path


def packer_version(packer: str) -> tuple[int, int, int]:
    out = subprocess.run([packer, "version"], capture_output=True, text=True, check=False)
    match = PACKER_VERSION_RE.search(out.stdout + out.stderr)
    if out.returncode != 0 or not match:
        raise BadInput(f"`{packer} version` failed: install Packer (apt-get install packer) or set --packer")
    major, minor, patch = (int(g) for g in match.groups())
    return major, minor, patch


def packer_args(command: str, variables: dict[str, str], packer_dir: Path) -> list[str]:
    args = [command]
    if command == "build":
        # cleanup is Packer's default; spelled out because the builder must not outlive
        # a failed build (abort would keep it for debugging).
        args += ["-color=false", "-on-error=cleanup"]
    for key, value in variables.items():
        args.append(f"-var={key}={value}")
    args.append(str(packer_dir))
    return args


def run_streaming(cmd: list[str], *, env: dict[str, str] | None = None, on_line: Callable[[str], None] = print) -> int:
    """Run a command, passing each output line (stdout and stderr) to on_line."""
    proc = subprocess.Popen(
        cmd,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        stdin=subprocess.DEVNULL,
        text=True,
        bufsize=1,
        env=env,
    )
    assert proc.stdout is not None
    try:
        for line in proc.stdout:
            on_line(line.rstrip("\n"))
    finally:
        # On Ctrl-C Packer gets the signal too (same process group) and cleans up.
        proc.wait()
    return proc.returncode


def packer_env(session: boto3.Session | None, region: str, base: dict[str, str] | None = None) -> dict[str, str]:
    """Environment for Packer: the caller's resolved credentials as plain variables.

    Packer 1.6.6's AWS SDK predates SSO profiles, so boto3 resolves them (profile, SSO,
    role) and Packer gets the resulting temporary keys; the profile itself is dropped."""
    env = dict(base) if base is not None else inherited()
    env["AWS_REGION"] = env["AWS_DEFAULT_REGION"] = region
    credentials = session.get_credentials() if session is not None else None
    frozen = credentials.get_frozen_credentials() if credentials is not None else None
    # botocore resolves credentials only with both keys; the stubs allow None for either.
    if frozen is not None and frozen.access_key and frozen.secret_key:
        env.pop("AWS_PROFILE", None)
        env["AWS_ACCESS_KEY_ID"] = frozen.access_key
        env["AWS_SECRET_ACCESS_KEY"] = frozen.secret_key
        if frozen.token:
            env["AWS_SESSION_TOKEN"] = frozen.token
        else:
            env.pop("AWS_SESSION_TOKEN", None)
    return env
