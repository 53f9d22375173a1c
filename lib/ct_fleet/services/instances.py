"""EC2 for one fleet: AMI lookup, security group, tags, listing, termination (launching: launching.py)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, cast

from botocore.exceptions import ClientError

from ..errors import BadInput

if TYPE_CHECKING:
    from mypy_boto3_ec2 import EC2Client
    from mypy_boto3_ec2.type_defs import FilterTypeDef, InstanceTypeDef
    from mypy_boto3_ssm import SSMClient

    from ..protocol import Ec2Config

MANAGED_BY = "ct-fleet"
LIVE_STATES = ["pending", "running", "stopping", "stopped", "shutting-down"]


def _ssm_value(ssm: SSMClient, name: str) -> str | None:
    try:
        value: str = ssm.get_parameter(Name=name)["Parameter"]["Value"]
        return value
    except ClientError as exc:
        if exc.response.get("Error", {}).get("Code") == "ParameterNotFound":
            return None
        raise


def resolve_ami(ec2: EC2Client, ssm: SSMClient, config: Ec2Config) -> tuple[str, bool]:
    """(AMI id, baked?): an explicit id or SSM path, else the baked worker AMI, else stock Ubuntu."""
    if config.ami and config.ami.startswith("ami-"):
        return config.ami, True
    if config.ami:
        value = _ssm_value(ssm, config.ami)
        if not value:
            raise BadInput(
                f"AMI parameter {config.ami} not found in SSM: build one with bin/build-ami or pass --ec2-arg ami=ami-..."
            )
        return value, True
    baked = _ssm_value(ssm, config.ami_param)
    if baked:
        return baked, True
    stock = _ssm_value(ssm, config.stock_ami_param)
    if not stock:
        raise BadInput(
            f"no worker AMI: {config.ami_param} and {config.stock_ami_param} are both missing; "
            "run bin/build-ami or pass --ec2-arg ami=ami-..."
        )
    return stock, False


def ensure_security_group(ec2: EC2Client, name: str, vpc_id: str | None = None) -> str:
    """The workers' group in their VPC: outbound only. Workers are reached through the queues, never inbound."""
    filters: list[FilterTypeDef] = [{"Name": "group-name", "Values": [name]}]
    if vpc_id:
        filters.append({"Name": "vpc-id", "Values": [vpc_id]})
    found = ec2.describe_security_groups(Filters=filters)["SecurityGroups"]
    if found:
        existing: str = found[0]["GroupId"]
        return existing
    group_id: str = ec2.create_security_group(
        GroupName=name,
        Description="ct-fleet workers: outbound only",
        TagSpecifications=[{"ResourceType": "security-group", "Tags": [{"Key": "ManagedBy", "Value": MANAGED_BY}]}],
        **cast(dict[str, Any], {"VpcId": vpc_id} if vpc_id else {}),
    )["GroupId"]
    return group_id


def fleet_tags(fleet_id: str, launched_by: str) -> list[dict[str, str]]:
    return [
        {"Key": "FleetId", "Value": fleet_id},
        {"Key": "LaunchedBy", "Value": launched_by},
        {"Key": "ManagedBy", "Value": MANAGED_BY},
        {"Key": "Name", "Value": f"ct-fleet-{fleet_id}"},
    ]


def live_instances(ec2: EC2Client, fleet_id: str | None = None, launched_by: str | None = None) -> list[dict[str, Any]]:
    filters: list[FilterTypeDef] = [
        {"Name": "instance-state-name", "Values": LIVE_STATES},
        {"Name": "tag:ManagedBy", "Values": [MANAGED_BY]},
    ]
    if fleet_id:
        filters.append({"Name": "tag:FleetId", "Values": [fleet_id]})
    if launched_by:
        filters.append({"Name": "tag:LaunchedBy", "Values": [launched_by]})
    out: list[InstanceTypeDef] = []
    for page in ec2.get_paginator("describe_instances").paginate(Filters=filters):
        for reservation in page["Reservations"]:
            out.extend(reservation["Instances"])
    # As plain dicts: the controller keeps them in records of its own (controller/observe.py).
    return cast(list[dict[str, Any]], out)


def terminate(ec2: EC2Client, instance_ids: Sequence[str]) -> None:
    if instance_ids:
        ec2.terminate_instances(InstanceIds=list(instance_ids))


def console_link(region: str, fleet_id: str) -> str:
    return (
        f"https://{region}.console.aws.amazon.com/ec2/home?region={region}"
        f"#Instances:tag:FleetId={fleet_id};instanceState=running,pending"
    )
