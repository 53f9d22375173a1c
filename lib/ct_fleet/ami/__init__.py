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

from ..errors import BadInput
from .build import (
    BuildPlan,
    BuildResult,
    build_ami,
    check_region,
    new_build_id,
    parse_vars,
    plan_build,
    read_images,
)
from .common import (
    AMI_ID_RE,
    BUILD_TAG,
    COMPONENT,
    DEFAULT_INSTANCE_PROFILE,
    DEFAULT_PARAM,
    LIVE_STATES,
    MANAGED_BY,
    PACKER_DIR,
    PARAM_TAG,
    PLUGINS_DIR,
    REGION_RE,
    REPO,
    VAR_NAME_RE,
    AmiError,
    BuildFailed,
)
from .packer import (
    AMI_STEP_TAG,
    PACKER_PHASES,
    PACKER_VERSION_RE,
    ManifestEntry,
    PackerPhases,
    Timings,
    find_packer,
    packer_args,
    packer_env,
    packer_version,
    parse_manifest,
    run_streaming,
)
from .rotation import (
    RotateResult,
    cleanup_builders,
    current_ami_id,
    describe_image,
    discard_build_images,
    image_snapshot_ids,
    launched_by,
    remove_image,
    rotate,
)

__all__ = [
    "AMI_ID_RE",
    "AMI_STEP_TAG",
    "AmiError",
    "BUILD_TAG",
    "BadInput",
    "BuildFailed",
    "BuildPlan",
    "BuildResult",
    "COMPONENT",
    "DEFAULT_INSTANCE_PROFILE",
    "DEFAULT_PARAM",
    "LIVE_STATES",
    "MANAGED_BY",
    "ManifestEntry",
    "PACKER_DIR",
    "PACKER_PHASES",
    "PACKER_VERSION_RE",
    "PARAM_TAG",
    "PLUGINS_DIR",
    "PackerPhases",
    "REGION_RE",
    "REPO",
    "RotateResult",
    "Timings",
    "VAR_NAME_RE",
    "build_ami",
    "check_region",
    "cleanup_builders",
    "current_ami_id",
    "describe_image",
    "discard_build_images",
    "find_packer",
    "image_snapshot_ids",
    "launched_by",
    "new_build_id",
    "packer_args",
    "packer_env",
    "packer_version",
    "parse_manifest",
    "parse_vars",
    "plan_build",
    "read_images",
    "remove_image",
    "rotate",
    "run_streaming",
]
