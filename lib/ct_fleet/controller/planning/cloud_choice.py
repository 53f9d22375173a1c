"""The knobs and the cloud they choose: --ec2 or the run config's `ec2` or CT_FLEET_EC2, then
each knob from the run config and --ec2-arg over the chosen cloud's defaults."""

from __future__ import annotations

from typing import Any

from pydantic import TypeAdapter, ValidationError

from ...cloud import Cloud, open_cloud
from ...error_lines import shown
from ...errors import BadInput
from ...protocol import Ec2Config, knob_parsing, knobs
from .request import FleetRequest

BOOL = TypeAdapter(bool)  # pydantic's words for true and false, as --ec2-arg spot=... takes them


def use_ec2(request: FleetRequest, defaults: dict[str, Any]) -> bool:
    if request.ec2 is not None:
        return request.ec2
    if "ec2" in defaults:
        return bool(defaults["ec2"])
    raw = request.environ.get("CT_FLEET_EC2", "").strip()
    if not raw:
        return False
    try:
        return BOOL.validate_python(raw)
    except ValidationError:
        raise BadInput(
            f"CT_FLEET_EC2={shown(raw)}: expected true or false (1/0, yes/no); unset it to run the local fleet"
        ) from None


def knobs_and_cloud(
    request: FleetRequest, defaults: dict[str, Any], config_args: dict[str, Any]
) -> tuple[Ec2Config, Cloud, dict[str, Any]]:
    """The knobs with the cloud's defaults, the cloud, and the knobs the user set (run config, --ec2-arg)."""
    user_args = {**config_args, **knob_parsing.parse_ec2_args(request.ec2_args)}
    if request.retry_errors is not None:
        user_args["retry_errors"] = request.retry_errors
    built = knob_parsing.build_config(user_args)
    env = request.environ
    region = built.region or env.get("AWS_REGION") or env.get("AWS_DEFAULT_REGION") or knobs.DEFAULT_REGION
    cloud = open_cloud(ec2=use_ec2(request, defaults), region=region)
    cfg = built.for_cloud(cloud.kind, region)
    cloud.region = cfg.region or cloud.region
    return cfg, cloud, user_args
