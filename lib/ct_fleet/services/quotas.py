"""The account's vCPU quotas for standard instances, and how many vCPUs already run.

EC2 counts vCPUs per account and region, per market, over the standard families (A, C, D,
H, I, M, R, T, Z); other families (G, P, Inf, Trn, ...) have quotas of their own, which
the fleet does not read.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any, cast

from botocore.exceptions import ClientError

if TYPE_CHECKING:
    from mypy_boto3_ec2 import EC2Client
    from mypy_boto3_ec2.literals import InstanceTypeType
    from mypy_boto3_ec2.type_defs import TagTypeDef

QUOTA_CODES = {"on-demand": "L-1216C47A", "spot": "L-34B43A08"}
QUOTA_NAMES = {
    "on-demand": "Running On-Demand Standard (A, C, D, H, I, M, R, T, Z) instances",
    "spot": "All Standard (A, C, D, H, I, M, R, T, Z) Spot Instance Requests",
}
_STANDARD = re.compile(r"(?!inf|dl|hpc|trn|u-)[acdhimrtz]")
# Service Quotas answers these where it has no value to give (a region or partition without
# it, an account that may not ask): the quota is then unknown, and not enforced here.
_UNKNOWN = {"NoSuchResourceException", "AccessDeniedException", "UnknownOperationException", "IllegalArgumentException"}


def standard(instance_type: str) -> bool:
    return bool(_STANDARD.match(instance_type))


def vcpu_quota(quotas: Any, market: str) -> float | None:
    """The market's standard vCPU quota, or None when Service Quotas does not say.
    (`quotas` is untyped: the lock holds no stubs for Service Quotas.)"""
    try:
        value = quotas.get_service_quota(ServiceCode="ec2", QuotaCode=QUOTA_CODES[market])["Quota"]["Value"]
    except ClientError as exc:
        if exc.response.get("Error", {}).get("Code") in _UNKNOWN:
            return None
        raise
    return float(value)


def vcpus_in_use(ec2: EC2Client, market: str, *, besides_fleet: str) -> int:
    """vCPUs of the account's standard instances of `market` that run now, not counting
    fleet `besides_fleet` (its own workers count against max_workers instead)."""
    filters: Any = [{"Name": "instance-state-name", "Values": ["pending", "running"]}]
    if market == "spot":
        filters.append({"Name": "instance-lifecycle", "Values": ["spot"]})
    used = 0
    untold: dict[str, int] = {}  # type -> instances whose CPU options the listing left out
    for page in ec2.get_paginator("describe_instances").paginate(Filters=filters):
        for reservation in page["Reservations"]:
            for inst in reservation["Instances"]:
                if market == "on-demand" and inst.get("InstanceLifecycle") in ("spot", "scheduled", "capacity-block"):
                    continue
                if _fleet_of(inst.get("Tags", [])) == besides_fleet or not standard(inst["InstanceType"]):
                    continue
                cpu = inst.get("CpuOptions") or {}
                if cpu.get("CoreCount"):
                    used += int(cpu["CoreCount"]) * int(cpu.get("ThreadsPerCore", 1))
                else:
                    untold[inst["InstanceType"]] = untold.get(inst["InstanceType"], 0) + 1
    types = sorted(untold)
    for start in range(0, len(types), 100):  # DescribeInstanceTypes takes up to 100 types
        batch = cast("list[InstanceTypeType]", types[start : start + 100])
        for found in ec2.describe_instance_types(InstanceTypes=batch)["InstanceTypes"]:
            used += untold[found["InstanceType"]] * int(found["VCpuInfo"]["DefaultVCpus"])
    return used


def _fleet_of(tags: Iterable[TagTypeDef]) -> str | None:
    return next((t.get("Value") for t in tags if t.get("Key") == "FleetId"), None)


def raise_command(market: str, region: str, wanted: float) -> str:
    return (
        f"aws service-quotas request-service-quota-increase --region {region} --service-code ec2 "
        f"--quota-code {QUOTA_CODES[market]} --desired-value {wanted:.0f}"
    )
