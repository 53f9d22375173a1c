"""The worker AMI: build it with Packer, then rotate its id in SSM, keeping exactly one.

The pure steps take boto3 clients made by the caller (tests pass clients to a moto
server) and are usable on their own:

- `parse_manifest(path)`: the AMI id from Packer's manifest post-processor
- `rotate(ec2, ssm, new_ami_id, param)`: SSM -> new id, then deregister the previous
  AMI and delete its snapshots (in that order, the only safe one)
- `cleanup_builders(ec2, build_id)`: terminate builder instances a build left behind
- `discard_build_images(ec2, build_id)`: remove the AMI a failed build may have registered

`build_ami(...)` strings them around the `packer build` subprocess. A failed build changes
nothing: SSM and the current AMI are only touched after Packer has succeeded and its
AMI is available. The builder is terminated by Packer itself (also on failure, since we
never pass -on-error=abort), and in any case by `cleanup_builders` once Packer exits: the
builder carries this build's unique CtFleetBuildId tag (a Packer variable put into
run_tags).

Tags written by packer/worker-ami.pkr.hcl on the AMI and its snapshots, read here:
ManagedBy=ct-fleet, Component=worker-ami, CtFleetBuildId=<build id>,
CtFleetAmiParam=<SSM parameter>, BuildKind=fresh|incremental.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import tempfile
import time
import uuid
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from botocore.exceptions import ClientError

from ct_fleet.errors import BadInput

REPO = Path(__file__).resolve().parents[2]
PACKER_DIR = REPO / "packer"
PLUGINS_DIR = PACKER_DIR / "plugins"
DEFAULT_PARAM = "/linuxbench/worker-ami-id"
DEFAULT_INSTANCE_PROFILE = "linuxbench-worker"

BUILD_TAG = "CtFleetBuildId"
PARAM_TAG = "CtFleetAmiParam"
COMPONENT = "worker-ami"
MANAGED_BY = "ct-fleet"
LIVE_STATES = ["pending", "running", "stopping", "stopped"]

AMI_ID_RE = re.compile(r"^ami-[0-9a-f]{8,17}$")
REGION_RE = re.compile(r"^[a-z]{2}(-[a-z]+)+-\d$")
VAR_NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
# Printed by packer/scripts/lib.sh run_step; Packer prefixes it with the build name.
STEP_DONE_RE = re.compile(r"\[ct-fleet-ami\] step (\S+): done in (\d+)s")
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


class AmiError(Exception):
    """The AMI could not be built or rotated."""


class BuildFailed(AmiError):
    """Packer failed: SSM and the current AMI were left untouched."""


# --------------------------------------------------------------------------- timings


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
    the next one; the provisioning scripts' own "step X: done in Ns" lines are kept as
    sub-phases of `packer: provision`."""

    def __init__(self, timings: Timings, clock: Callable[[], float] = time.monotonic) -> None:
        self.timings = timings
        self.clock = clock
        self.current = "packer: prepare"
        self.started = clock()
        self.steps: list[tuple[str, float]] = []

    def feed(self, line: str) -> None:
        step = STEP_DONE_RE.search(line)
        if step:
            self.steps.append((f"  step {step.group(1)}", float(step.group(2))))
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


# --------------------------------------------------------------------------- manifest


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


# --------------------------------------------------------------------------- AWS steps


def _code(exc: ClientError) -> str:
    return str(exc.response.get("Error", {}).get("Code", ""))


def current_ami_id(ssm: Any, param: str = DEFAULT_PARAM) -> str | None:
    """The AMI id stored in SSM, or None when there is none yet."""
    try:
        value = ssm.get_parameter(Name=param)["Parameter"]["Value"].strip()
    except ClientError as exc:
        if _code(exc) == "ParameterNotFound":
            return None
        raise
    return value or None


def describe_image(ec2: Any, ami_id: str, *, own: bool = False) -> dict[str, Any] | None:
    """The image, or None when it does not exist (or is not ours when own=True)."""
    kwargs: dict[str, Any] = {"ImageIds": [ami_id]}
    if own:
        kwargs["Owners"] = ["self"]
    try:
        images = ec2.describe_images(**kwargs).get("Images", [])
    except ClientError as exc:
        if _code(exc).startswith("InvalidAMIID"):
            return None
        raise
    images = [i for i in images if i.get("State") != "deregistered"]
    return images[0] if images else None


def image_snapshot_ids(ec2: Any, image: dict[str, Any]) -> list[str]:
    """Every EBS snapshot behind an image: its block device mappings, the snapshots
    CreateImage described as "... for ami-...", and those tagged with its build id."""
    ids: list[str] = []

    def add(snapshot_id: str | None) -> None:
        if snapshot_id and snapshot_id not in ids:
            ids.append(snapshot_id)

    for mapping in image.get("BlockDeviceMappings", []):
        add(mapping.get("Ebs", {}).get("SnapshotId"))
    filters = [[{"Name": "description", "Values": [f"*{image['ImageId']}*"]}]]
    build_id = _tags(image).get(BUILD_TAG)
    if build_id:
        filters.append([{"Name": f"tag:{BUILD_TAG}", "Values": [build_id]}])
    paginator = ec2.get_paginator("describe_snapshots")
    for flt in filters:
        for page in paginator.paginate(OwnerIds=["self"], Filters=flt):
            for snapshot in page.get("Snapshots", []):
                add(snapshot["SnapshotId"])
    return ids


def _tags(resource: dict[str, Any]) -> dict[str, str]:
    return {t["Key"]: t["Value"] for t in resource.get("Tags", []) or []}


def _images_tagged(ec2: Any, **tags: str) -> list[dict[str, Any]]:
    filters = [{"Name": f"tag:{k}", "Values": [v]} for k, v in tags.items()]
    images = ec2.describe_images(Owners=["self"], Filters=filters).get("Images", [])
    return [i for i in images if i.get("State") != "deregistered"]


@dataclass
class RotateResult:
    new_ami_id: str
    previous_ami_id: str | None
    deregistered: list[str] = field(default_factory=list)
    deleted_snapshots: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)


def remove_image(
    ec2: Any, image: dict[str, Any], result: RotateResult, *, snapshot_wait: float = 60.0
) -> None:
    """Deregister an image, then delete its snapshots (AWS refuses to delete a snapshot
    while a registered image uses it; moto never deletes them on deregistration)."""
    ami_id = image["ImageId"]
    snapshots = image_snapshot_ids(ec2, image)  # before deregistering: the mapping goes with it
    try:
        ec2.deregister_image(ImageId=ami_id)
        result.deregistered.append(ami_id)
    except ClientError as exc:
        if not _code(exc).startswith("InvalidAMIID"):
            result.errors.append(f"deregister {ami_id}: {exc}")
            return
    for snapshot_id in snapshots:
        deadline = time.monotonic() + snapshot_wait
        while True:
            try:
                ec2.delete_snapshot(SnapshotId=snapshot_id)
                result.deleted_snapshots.append(snapshot_id)
                break
            except ClientError as exc:
                code = _code(exc)
                if code == "InvalidSnapshot.NotFound":
                    break
                if code == "InvalidSnapshot.InUse" and time.monotonic() < deadline:
                    time.sleep(5)  # deregistration takes a moment to release it
                    continue
                result.errors.append(f"delete snapshot {snapshot_id} of {ami_id}: {exc}")
                break


def rotate(
    ec2: Any, ssm: Any, new_ami_id: str, param: str = DEFAULT_PARAM, *, sweep: bool = True
) -> RotateResult:
    """Make `new_ami_id` the worker AMI and keep only it.

    Order: check the new AMI is available -> write it to SSM (Overwrite) -> deregister
    the previous AMI -> delete its snapshots. Workers launched at any moment read an id
    that exists. With `sweep`, older AMIs tagged for the same parameter (left by a build
    that failed between registering and rotating) go too; newer ones, from a build still
    running elsewhere, are spared.
    """
    new = describe_image(ec2, new_ami_id)
    if new is None or new.get("State") != "available":
        state = new.get("State") if new else "missing"
        raise AmiError(f"new AMI {new_ami_id} is {state}: SSM {param} left unchanged")
    previous = current_ami_id(ssm, param)
    ssm.put_parameter(
        Name=param,
        Value=new_ami_id,
        Type="String",
        Overwrite=True,
        Description="ct-fleet worker AMI (written by bin/build-ami)",
    )
    result = RotateResult(new_ami_id, previous)
    doomed: dict[str, dict[str, Any]] = {}
    if previous and previous != new_ami_id:
        old = describe_image(ec2, previous, own=True)
        if old is None:
            result.warnings.append(
                f"previous AMI {previous} is gone or not owned by this account: left alone"
            )
        else:
            doomed[previous] = old
    if sweep:
        for image in _images_tagged(ec2, ManagedBy=MANAGED_BY, Component=COMPONENT, **{PARAM_TAG: param}):
            if image["ImageId"] != new_ami_id and image.get("CreationDate", "") <= new.get(
                "CreationDate", ""
            ):
                doomed.setdefault(image["ImageId"], image)
    for image in doomed.values():
        remove_image(ec2, image, result)
    return result


def discard_build_images(ec2: Any, build_id: str, keep: Iterable[str] = ()) -> RotateResult:
    """Remove AMIs (and snapshots) registered by a build that then failed."""
    result = RotateResult(new_ami_id="", previous_ami_id=None)
    keep = set(keep)
    images = {i["ImageId"]: i for i in _images_tagged(ec2, **{BUILD_TAG: build_id})}
    # Packer tags the AMI only once it is available; its description names the build
    # from the start (ami_description in packer/worker-ami.pkr.hcl).
    untagged = ec2.describe_images(
        Owners=["self"], Filters=[{"Name": "description", "Values": [f"*build {build_id})"]}]
    ).get("Images", [])
    for image in untagged:
        images.setdefault(image["ImageId"], image)
    for ami_id, image in images.items():
        if ami_id not in keep and image.get("State") != "deregistered":
            remove_image(ec2, image, result)
    return result


def cleanup_builders(ec2: Any, build_id: str) -> list[str]:
    """Terminate every live instance tagged with this build's id; returns their ids."""
    ids: list[str] = []
    paginator = ec2.get_paginator("describe_instances")
    filters = [
        {"Name": f"tag:{BUILD_TAG}", "Values": [build_id]},
        {"Name": "instance-state-name", "Values": LIVE_STATES},
    ]
    for page in paginator.paginate(Filters=filters):
        for reservation in page.get("Reservations", []):
            ids.extend(i["InstanceId"] for i in reservation.get("Instances", []))
    if ids:
        ec2.terminate_instances(InstanceIds=ids)
    return ids


def launched_by(sts: Any) -> str:
    """The caller's LaunchedBy value: the last segment of its ARN (IAM user name, or the
    session name of an assumed role, which Identity Center sets to the user name)."""
    arn = sts.get_caller_identity()["Arn"]
    return arn.rsplit("/", 1)[-1]


# --------------------------------------------------------------------------- packer


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


def run_streaming(
    cmd: list[str], *, env: dict[str, str] | None = None, on_line: Callable[[str], None] = print
) -> int:
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


def read_images(path: Path) -> list[str]:
    """Image references listed in an images file (see packer/images.txt)."""
    images: list[str] = []
    for number, raw in enumerate(path.read_text().splitlines(), 1):
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        if len(line.split()) > 1:
            raise BadInput(f"{path}:{number}: one image per line, got {raw.strip()!r}")
        if line not in images:
            images.append(line)
    return images


def check_region(region: str) -> str:
    if not REGION_RE.match(region):
        raise BadInput(f"--region {region!r} is not an AWS region name (e.g. us-east-1)")
    return region


def new_build_id() -> str:
    return f"{datetime.now(timezone.utc):%Y%m%d-%H%M%S}-{uuid.uuid4().hex[:8]}"


def parse_vars(pairs: Iterable[str]) -> dict[str, str]:
    out: dict[str, str] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not VAR_NAME_RE.match(key):
            raise BadInput(f"--var {pair!r}: expected KEY=VALUE with a Packer variable name")
        out[key] = value
    return out


@dataclass
class BuildPlan:
    region: str
    param: str
    kind: str  # fresh | incremental
    previous_ami_id: str | None
    source_ami: str
    build_id: str
    variables: dict[str, str]
    images: list[str]
    notes: list[str] = field(default_factory=list)


@dataclass
class BuildResult:
    plan: BuildPlan
    timings: Timings
    ami_id: str | None = None
    rotation: RotateResult | None = None
    terminated_builders: list[str] = field(default_factory=list)
    discarded: RotateResult | None = None
    dry_run: bool = False


def plan_build(
    ec2: Any,
    ssm: Any,
    *,
    region: str,
    param: str = DEFAULT_PARAM,
    fresh: bool = False,
    packer_dir: Path = PACKER_DIR,
    images_file: Path | None = None,
    instance_profile: str = DEFAULT_INSTANCE_PROFILE,
    launched_by_value: str = "packer",
    extra_vars: dict[str, str] | None = None,
    manifest_path: Path | None = None,
    tolerate_aws_errors: bool = False,
) -> BuildPlan:
    """Decide what to build: fresh or incremental, from which AMI, with which variables."""
    check_region(region)
    if not param.startswith("/"):
        raise BadInput(f"--ssm-param {param!r} must be a path starting with /")
    if not (packer_dir / "worker-ami.pkr.hcl").is_file():
        raise BadInput(f"no Packer template at {packer_dir}/worker-ami.pkr.hcl")
    images_file = images_file or packer_dir / "images.txt"
    if not images_file.is_file():
        raise BadInput(f"no image list at {images_file}: create it (one Docker image per line)")
    images = read_images(images_file)
    notes: list[str] = []
    if not images:
        notes.append(f"{images_file} lists no Docker images: the AMI will carry none")

    previous: str | None = None
    unreadable = False
    try:
        previous = current_ami_id(ssm, param)
    except Exception as exc:  # noqa: BLE001 - only tolerated for --dry-run
        if not tolerate_aws_errors:
            raise
        unreadable = True
        notes.append(f"could not read SSM {param} ({type(exc).__name__}: {exc}): planning a fresh build")
    source = ""
    if fresh or unreadable:
        kind = "fresh"
    elif previous is None:
        kind = "fresh"
        notes.append(f"no AMI id in SSM {param}: building fresh from stock Ubuntu 22.04")
    else:
        image = None
        try:
            image = describe_image(ec2, previous)
        except Exception as exc:  # noqa: BLE001
            if not tolerate_aws_errors:
                raise
            notes.append(f"could not describe {previous}: {type(exc).__name__}")
        if image is None or image.get("State") != "available":
            kind = "fresh"
            notes.append(f"SSM {param} names {previous}, which is not available: building fresh")
        else:
            kind, source = "incremental", previous

    build_id = new_build_id()
    variables = {
        "region": region,
        "source_ami": source,
        "build_id": build_id,
        "launched_by": launched_by_value,
        "ssm_param": param,
        "iam_instance_profile": instance_profile,
        "images_file": str(images_file.resolve()),
    }
    if manifest_path is not None:
        variables["manifest_path"] = str(manifest_path)
    variables.update(extra_vars or {})
    return BuildPlan(region, param, kind, previous, source, build_id, variables, images, notes)


def build_ami(
    ec2: Any,
    ssm: Any,
    plan: BuildPlan,
    *,
    packer: str = "packer",
    packer_dir: Path = PACKER_DIR,
    env: dict[str, str] | None = None,
    dry_run: bool = False,
    on_line: Callable[[str], None] = print,
    timings: Timings | None = None,
) -> BuildResult:
    """Run Packer for `plan`, then rotate. Raises BuildFailed (nothing changed) when
    Packer fails; the builder is terminated either way."""
    timings = timings or Timings()
    result = BuildResult(plan, timings, dry_run=dry_run)
    packer_path = find_packer(packer)
    version = packer_version(packer_path)
    if version >= (1, 7, 0):
        with timings.phase("packer init (amazon plugin)"):
            rc = run_streaming([packer_path, "init", str(packer_dir / "plugins")], env=env, on_line=on_line)
        if rc != 0:
            raise BuildFailed(f"packer init failed (exit {rc}); nothing was built")

    if dry_run:
        with timings.phase("packer validate"):
            rc = run_streaming(
                [packer_path, *packer_args("validate", plan.variables, packer_dir)], env=env, on_line=on_line
            )
        if rc != 0:
            raise BadInput(f"packer validate failed (exit {rc}): fix the template or --var values")
        return result

    with tempfile.TemporaryDirectory(prefix="ct-fleet-ami-") as tmp:
        variables = dict(plan.variables)
        manifest = Path(variables.setdefault("manifest_path", str(Path(tmp) / "manifest.json")))
        phases = PackerPhases(timings)

        def feed(line: str) -> None:
            phases.feed(line)
            on_line(line)

        rc: int | None = None
        try:
            rc = run_streaming([packer_path, *packer_args("build", variables, packer_dir)], env=env, on_line=feed)
        finally:
            # Also on Ctrl-C (rc stays None): Packer terminates its builder itself unless
            # it was killed; this is the safety net. An AMI the failed build may have
            # registered is removed so that nothing but the current AMI remains.
            phases.finish()
            with timings.phase("terminate leftover builders"):
                result.terminated_builders = cleanup_builders(ec2, plan.build_id)
            if rc != 0:
                with timings.phase("discard partial AMI"):
                    result.discarded = discard_build_images(ec2, plan.build_id)
        if rc != 0:
            raise BuildFailed(
                f"packer build failed (exit {rc}): SSM {plan.param} and the current AMI are unchanged"
            )
        entry = parse_manifest(manifest, plan.region)
        if entry.custom_data.get("build_id") not in (None, plan.build_id):
            raise AmiError(f"manifest {manifest} is from build {entry.custom_data.get('build_id')}, not {plan.build_id}")
        result.ami_id = entry.ami_id

    with timings.phase("rotate (SSM, deregister, snapshots)"):
        result.rotation = rotate(ec2, ssm, result.ami_id, plan.param)
    return result


def packer_env(session: Any, region: str, base: dict[str, str] | None = None) -> dict[str, str]:
    """Environment for Packer: the caller's resolved credentials as plain variables.

    Packer 1.6.6's AWS SDK predates SSO profiles, so boto3 resolves them (profile, SSO,
    role) and Packer gets the resulting temporary keys; the profile itself is dropped."""
    env = dict(base if base is not None else os.environ)
    env["AWS_REGION"] = env["AWS_DEFAULT_REGION"] = region
    credentials = session.get_credentials() if session is not None else None
    if credentials is not None:
        frozen = credentials.get_frozen_credentials()
        env.pop("AWS_PROFILE", None)
        env["AWS_ACCESS_KEY_ID"] = frozen.access_key
        env["AWS_SECRET_ACCESS_KEY"] = frozen.secret_key
        if frozen.token:
            env["AWS_SESSION_TOKEN"] = frozen.token
        else:
            env.pop("AWS_SESSION_TOKEN", None)
    return env
