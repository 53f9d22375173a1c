"""EC2 Fleet for one fleet: its launch template, instant CreateFleet requests over pools, and their end.

A pool is one instance type in one subnet (so one AZ). A Spot RunInstances asks one pool;
one `instant` CreateFleet asks many and says, per pool that failed, why (the `Errors` of
its answer), while the instances it did launch are returned at once. The launch template
holds everything the workers share (AMI, user data, profile, tags); the fleet request
adds the pools and the market.
"""

from __future__ import annotations

import base64
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from botocore.exceptions import ClientError

from ..errors import BadInput
from .instances import MANAGED_BY, fleet_tags

if TYPE_CHECKING:
    from mypy_boto3_ec2 import EC2Client

    from ..protocol import Ec2Config

# CreateFleet takes at most this many overrides in one request (EC2 Fleet quotas).
MOST_OVERRIDES = 300


@dataclass(frozen=True)
class Pool:
    instance_type: str
    subnet: str
    zone: str

    def __str__(self) -> str:
        return f"{self.instance_type} in {self.zone}"


@dataclass(frozen=True)
class Launched:
    instance_id: str
    pool: Pool
    market: str


@dataclass(frozen=True)
class PoolError:
    pool: Pool | None  # None: the error names no pool (it holds for the whole request)
    code: str
    message: str


@dataclass(frozen=True)
class Outcome:
    launched: list[Launched]
    errors: list[PoolError]


def template_name(fleet_id: str) -> str:
    return f"ct-fleet-{fleet_id}"


def _tagged(resource: str, tags: list[dict[str, str]]) -> Any:
    return [{"ResourceType": resource, "Tags": tags}]


def _tags_filter(fleet_id: str) -> list[Any]:
    return [{"Name": "tag:FleetId", "Values": [fleet_id]}, {"Name": "tag:ManagedBy", "Values": [MANAGED_BY]}]


def put_launch_template(
    ec2: EC2Client,
    *,
    ami: str,
    config: Ec2Config,
    fleet_id: str,
    launched_by: str,
    user_data: str,
    security_group_id: str,
) -> str:
    """The fleet's launch template, made anew (a rerun's user data may differ): its id."""
    delete_launch_templates(ec2, fleet_id)
    tags = fleet_tags(fleet_id, launched_by)
    data: Any = {
        "ImageId": ami,
        # A launch template takes user data base64-encoded (RunInstances encodes it itself).
        "UserData": base64.b64encode(user_data.encode()).decode(),
        "IamInstanceProfile": {"Name": config.instance_profile},
        "SecurityGroupIds": [security_group_id],
        "InstanceInitiatedShutdownBehavior": "terminate",
        "MetadataOptions": {"HttpTokens": "required", "HttpEndpoint": "enabled"},
        "BlockDeviceMappings": [
            {
                "DeviceName": "/dev/sda1",
                "Ebs": {"VolumeSize": config.volume_gb, "VolumeType": "gp3", "DeleteOnTermination": True},
            }
        ],
        "TagSpecifications": [
            {"ResourceType": "instance", "Tags": tags},
            {"ResourceType": "volume", "Tags": tags},
        ],
    }
    made = ec2.create_launch_template(
        LaunchTemplateName=template_name(fleet_id),
        LaunchTemplateData=data,
        TagSpecifications=_tagged("launch-template", tags),
    )
    template_id: str = made["LaunchTemplate"]["LaunchTemplateId"]
    return template_id


def delete_launch_templates(ec2: EC2Client, fleet_id: str) -> int:
    """Delete the fleet's launch templates (also those a dead controller left): how many."""
    found = ec2.describe_launch_templates(Filters=_tags_filter(fleet_id))["LaunchTemplates"]
    for template in found:
        try:
            ec2.delete_launch_template(LaunchTemplateId=template["LaunchTemplateId"])
        except ClientError as exc:
            if "NotFound" not in exc.response.get("Error", {}).get("Code", ""):
                raise
    return len(found)


def create_fleet(
    ec2: EC2Client,
    *,
    template_id: str,
    pools: Sequence[Pool],
    count: int,
    market: str,
    fleet_id: str,
    launched_by: str,
) -> Outcome:
    """One instant fleet request for `count` workers over `pools` in one market."""
    by_override = {(p.instance_type, p.subnet): p for p in pools}
    # Priorities follow instance_types' order: on-demand's `prioritized` strategy launches the
    # preferred type first; spot's price-capacity-optimized weighs capacity and price instead.
    rank = {t: float(i) for i, t in enumerate(dict.fromkeys(p.instance_type for p in pools))}
    overrides: Any = [
        {"InstanceType": p.instance_type, "SubnetId": p.subnet, "Priority": rank[p.instance_type]} for p in pools
    ]
    capacity: Any = {"TotalTargetCapacity": count, "DefaultTargetCapacityType": market}
    capacity["SpotTargetCapacity" if market == "spot" else "OnDemandTargetCapacity"] = count
    answer = ec2.create_fleet(
        Type="instant",
        # A retried request whose first attempt landed must not launch a second set.
        ClientToken=f"{fleet_id}-{uuid.uuid4().hex}",
        LaunchTemplateConfigs=[
            {
                "LaunchTemplateSpecification": {"LaunchTemplateId": template_id, "Version": "$Latest"},
                "Overrides": overrides,
            }
        ],
        TargetCapacitySpecification=capacity,
        SpotOptions={"AllocationStrategy": "price-capacity-optimized", "InstanceInterruptionBehavior": "terminate"},
        OnDemandOptions={"AllocationStrategy": "prioritized"},
        TagSpecifications=_tagged("fleet", fleet_tags(fleet_id, launched_by)),
    )

    def pool_of(entry: Any) -> Pool | None:
        chosen = (entry.get("LaunchTemplateAndOverrides") or {}).get("Overrides") or {}
        return by_override.get((str(chosen.get("InstanceType")), str(chosen.get("SubnetId"))))

    launched = []
    for group in answer.get("Instances", []):
        pool = pool_of(group) or pools[0]
        launched += [Launched(i, pool, group.get("Lifecycle") or market) for i in group.get("InstanceIds", [])]
    errors = [
        PoolError(pool_of(e), e.get("ErrorCode", "Unknown"), e.get("ErrorMessage", ""))
        for e in answer.get("Errors", [])
    ]
    return Outcome(launched, errors)


def delete_fleet_requests(ec2: EC2Client, fleet_id: str) -> int:
    """Delete the fleet's EC2 Fleet requests that are not deleted yet: how many. Their
    instances go with them (EC2 deletes an instant fleet only so); teardown has already
    terminated them, and a fleet whose instances are all gone says so, which is fine."""
    ids = []
    # DescribeFleets filters by state and type, not by tag: the tags are read here.
    for page in ec2.get_paginator("describe_fleets").paginate():
        for found in page["Fleets"]:
            tags = {t.get("Key"): t.get("Value") for t in found.get("Tags", [])}
            ours = tags.get("FleetId") == fleet_id and tags.get("ManagedBy") == MANAGED_BY
            if ours and not str(found.get("FleetState", "")).startswith("deleted"):
                ids.append(found["FleetId"])
    for fleet in ids:
        try:
            ec2.delete_fleets(FleetIds=[fleet], TerminateInstances=True)
        except ClientError as exc:
            if exc.response.get("Error", {}).get("Code") not in (
                "InvalidParameterCombination",
                "InvalidFleetId.NotFound",
            ):
                raise
    return len(ids)


def pools_of(ec2: EC2Client, config: Ec2Config) -> tuple[list[Pool], str]:
    """(every type x subnet pool, the subnets' VPC): the subnets named, else the region's
    default ones; BadInput for a subnet that is not there or VPCs that differ."""
    if config.subnets:
        wanted = [s.strip() for s in config.subnets.split(",")]
        try:
            subnets = ec2.describe_subnets(SubnetIds=wanted)["Subnets"]
        except ClientError as exc:
            if "NotFound" in exc.response.get("Error", {}).get("Code", ""):
                raise BadInput(
                    f"subnets={config.subnets}: {exc.response['Error'].get('Message', 'not found')} "
                    f"in {ec2.meta.region_name}: name subnets of this region (aws ec2 describe-subnets)"
                ) from None
            raise
    else:
        subnets = ec2.describe_subnets(Filters=[{"Name": "default-for-az", "Values": ["true"]}])["Subnets"]
        if not subnets:
            raise BadInput(
                f"no default subnets in {ec2.meta.region_name}: pass --ec2-arg subnets=subnet-...,subnet-..."
            )
    vpcs = sorted({s["VpcId"] for s in subnets})
    if len(vpcs) > 1:
        raise BadInput(f"subnets={config.subnets} are in {len(vpcs)} VPCs ({', '.join(vpcs)}): name subnets of one VPC")
    subnets = sorted(subnets, key=lambda s: s["AvailabilityZone"])
    pools = [Pool(t, s["SubnetId"], s["AvailabilityZone"]) for t in config.types for s in subnets]
    if len(pools) > MOST_OVERRIDES:
        raise BadInput(
            f"{len(config.types)} instance types x {len(subnets)} subnets is {len(pools)} pools; "
            f"EC2 Fleet takes at most {MOST_OVERRIDES}: name fewer subnets or types"
        )
    return pools, vpcs[0]


def vcpus_of(ec2: EC2Client, types: Sequence[str]) -> dict[str, int]:
    """vCPUs per instance type; BadInput naming a type EC2 does not offer here."""
    try:
        found = ec2.describe_instance_types(InstanceTypes=list(types))["InstanceTypes"]  # type: ignore[arg-type]
    except ClientError as exc:
        if exc.response.get("Error", {}).get("Code") == "InvalidInstanceType":
            raise BadInput(
                f"instance types {','.join(types)}: {exc.response['Error'].get('Message', 'unknown')}: "
                "name types EC2 offers in this region (aws ec2 describe-instance-types)"
            ) from None
        raise
    return {t["InstanceType"]: int(t["VCpuInfo"]["DefaultVCpus"]) for t in found}
