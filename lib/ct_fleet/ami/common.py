"""Names, tags and errors shared by the AMI modules."""

from __future__ import annotations

import re

from botocore.exceptions import ClientError

from ..paths import REPO_ROOT

REPO = REPO_ROOT


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


class AmiError(Exception):
    """The AMI could not be built or rotated."""


class BuildFailed(AmiError):
    """Packer failed: SSM and the current AMI were left untouched."""


def _code(exc: ClientError) -> str:
    return str(exc.response.get("Error", {}).get("Code", ""))
