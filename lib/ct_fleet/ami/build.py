"""A build from plan to rotation: which images, which source AMI, packer build, then rotate."""

from __future__ import annotations

import tempfile
import uuid
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING

from ..errors import BadInput
from ..settings import SettingSources
from .common import DEFAULT_INSTANCE_PROFILE, DEFAULT_PARAM, PACKER_DIR, REGION_RE, VAR_NAME_RE, AmiError, BuildFailed
from .images import AmiImage, ami_images, read_extra_images, setting_names
from .packer import PackerPhases, Timings, find_packer, packer_args, packer_version, parse_manifest, run_streaming
from .rotation import RotateResult, cleanup_builders, current_ami_id, describe_image, discard_build_images, rotate

if TYPE_CHECKING:
    from mypy_boto3_ec2 import EC2Client
    from mypy_boto3_ssm import SSMClient

read_images = read_extra_images  # the name callers know


def check_region(region: str) -> str:
    if not REGION_RE.match(region):
        raise BadInput(f"--region {region!r} is not an AWS region name (e.g. us-east-1)")
    return region


def new_build_id() -> str:
    return f"{datetime.now(UTC):%Y%m%d-%H%M%S}-{uuid.uuid4().hex[:8]}"


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
    image_plan: list[AmiImage] = field(default_factory=list)  # each image: where it comes from, build or pull


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
    ec2: EC2Client,
    ssm: SSMClient,
    *,
    region: str,
    work_dir: Path,
    param: str = DEFAULT_PARAM,
    fresh: bool = False,
    packer_dir: Path = PACKER_DIR,
    images_file: Path | None = None,
    instance_profile: str = DEFAULT_INSTANCE_PROFILE,
    launched_by_value: str = "packer",
    extra_vars: dict[str, str] | None = None,
    manifest_path: Path | None = None,
    tolerate_aws_errors: bool = False,
    settings: Sequence[str] | None = None,
    sources: SettingSources | None = None,
) -> BuildPlan:
    """Decide what to build: fresh or incremental, from which AMI, with which variables.

    The images are those of `settings` (default: every setting in the repo) plus the
    extras of `images_file` (default packer/images.txt); the list of images to pull is
    written to `work_dir`, which the caller removes after the build, and handed to Packer
    as images_file.
    """
    check_region(region)
    if not param.startswith("/"):
        raise BadInput(f"--ssm-param {param!r} must be a path starting with /")
    if not (packer_dir / "worker-ami.pkr.hcl").is_file():
        raise BadInput(f"no Packer template at {packer_dir}/worker-ami.pkr.hcl")
    images_file = images_file or packer_dir / "images.txt"
    if not images_file.is_file():
        raise BadInput(f"no image list at {images_file}: create it (one Docker image per line)")
    names = list(settings) if settings is not None else setting_names()
    image_plan = ami_images(names, images_file, sources)
    notes: list[str] = []
    if not image_plan:
        notes.append(
            f"no setting ({', '.join(names) or 'none'}) and not {images_file} names a Docker image: the AMI will carry none"
        )

    previous: str | None = None
    unreadable = False
    try:
        previous = current_ami_id(ssm, param)
    except Exception as exc:  # only tolerated for --dry-run
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
        except Exception as exc:
            if not tolerate_aws_errors:
                raise
            notes.append(f"could not describe {previous}: {type(exc).__name__}")
        if image is None or image.get("State") != "available":
            kind = "fresh"
            notes.append(f"SSM {param} names {previous}, which is not available: building fresh")
        else:
            kind, source = "incremental", previous

    build_id = new_build_id()
    pulled = [i.ref for i in image_plan if i.how == "pull"]
    built = [i for i in image_plan if i.how == "build"]
    work_dir.mkdir(parents=True, exist_ok=True)
    pull_file = work_dir / "images.txt"
    pull_file.write_text(
        "# Generated by bin/build-ami from the settings' compose files and "
        f"{images_file.name}: the images to pull.\n" + "".join(f"{ref}\n" for ref in pulled)
    )
    variables = {
        "region": region,
        "source_ami": source,
        "build_id": build_id,
        "launched_by": launched_by_value,
        "ssm_param": param,
        "iam_instance_profile": instance_profile,
        "images_file": str(pull_file.resolve()),
        "build_settings": " ".join(dict.fromkeys(i.source for i in built)),
        "local_images": " ".join(i.ref for i in built),
    }
    if manifest_path is not None:
        variables["manifest_path"] = str(manifest_path)
    variables.update(extra_vars or {})
    images = [i.ref for i in image_plan]
    return BuildPlan(region, param, kind, previous, source, build_id, variables, images, notes, image_plan)


def build_ami(
    ec2: EC2Client,
    ssm: SSMClient,
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
            init_rc = run_streaming([packer_path, "init", str(packer_dir / "plugins")], env=env, on_line=on_line)
        if init_rc != 0:
            raise BuildFailed(f"packer init failed (exit {init_rc}); nothing was built")

    if dry_run:
        with timings.phase("packer validate"):
            validate_rc = run_streaming(
                [packer_path, *packer_args("validate", plan.variables, packer_dir)], env=env, on_line=on_line
            )
        if validate_rc != 0:
            raise BadInput(f"packer validate failed (exit {validate_rc}): fix the template or --var values")
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
            raise BuildFailed(f"packer build failed (exit {rc}): SSM {plan.param} and the current AMI are unchanged")
        entry = parse_manifest(manifest, plan.region)
        if entry.custom_data.get("build_id") not in (None, plan.build_id):
            raise AmiError(
                f"manifest {manifest} is from build {entry.custom_data.get('build_id')}, not {plan.build_id}"
            )
        result.ami_id = entry.ami_id

    with timings.phase("rotate (SSM, deregister, snapshots)"):
        result.rotation = rotate(ec2, ssm, result.ami_id, plan.param)
    return result
