"""Before anything is created: the pools workers launch into, and how many the quota lets run.

Bad instance types or subnets, and a quota no single worker fits in, are refused here
(BadInput, exit 2); a quota that fits fewer workers than max_workers clamps it, with a
warning. An unknown quota (Service Quotas has none to give) is not enforced.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from ...cloud import Cloud
from ...errors import BadInput
from ...protocol import Ec2Config
from ...services import launching, quotas
from ...services.launching import Pool


@dataclass(frozen=True)
class Capacity:
    pools: list[Pool]
    vpc: str
    max_workers: int  # max_workers, or fewer when the quota fits fewer
    clamped: str | None = None  # why max_workers was lowered, in a few words


def survey(cloud: Cloud, cfg: Ec2Config, fleet_id: str, warn: Callable[[str], None]) -> Capacity:
    ec2 = cloud.client("ec2")
    pools, vpc = launching.pools_of(ec2, cfg)
    vcpus = launching.vcpus_of(ec2, cfg.types)
    wanted = cfg.max_workers or 1
    market = "spot" if cfg.spot else "on-demand"
    quota = quotas.vcpu_quota(cloud.client("service-quotas"), market)
    standard = [t for t in cfg.types if quotas.standard(t)]
    if quota is None or not standard:
        return Capacity(pools, vpc, wanted)
    used = quotas.vcpus_in_use(ec2, market, besides_fleet=fleet_id)
    # Sized by the largest type: whichever pool has capacity, the workers must fit.
    per_worker = max(vcpus[t] for t in standard)
    fits = max(0, int(quota - used) // per_worker)
    name = f"the {market} vCPU quota {quotas.QUOTA_CODES[market]} ({quotas.QUOTA_NAMES[market]})"
    if fits == 0:
        raise BadInput(
            f"{name} is {quota:.0f} in {cloud.region} with {used} in use: not one worker of {per_worker} vCPUs fits; "
            f"raise it with `{quotas.raise_command(market, cloud.region, used + per_worker * wanted)}`"
        )
    if fits < wanted:
        warn(
            f"{name} is {quota:.0f} with {used} in use: {fits} of max_workers={wanted} workers of "
            f"{per_worker} vCPUs fit, so at most {fits} run (raise it: "
            f"{quotas.raise_command(market, cloud.region, used + per_worker * wanted)})"
        )
    clamped = f"max_workers={wanted} clamped to {fits} by {quotas.QUOTA_CODES[market]}" if fits < wanted else None
    return Capacity(pools, vpc, min(fits, wanted), clamped)
