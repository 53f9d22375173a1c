"""Secrets left behind by a controller that died without teardown (SIGKILL, a lost laptop).

Per-instance secrets live in SSM under /linuxbench/fleet-secrets/{fleet}/{instance}/secrets[.N]
for as long as their instance runs. A controller that is killed cannot delete them, so
every `ct-fleet eval` (of any fleet) and `ct-fleet cloud status --clean` sweep: a secret
goes when its instance is terminated, or when EC2 no longer lists the instance at all and
the secret is older than GRACE (EC2's listing can lag a launch by a few seconds, and a
live controller puts secrets right after it launches). Secrets of live instances stay.
"""

from __future__ import annotations

import datetime as dt
from collections import defaultdict
from typing import Any

from botocore.exceptions import ClientError

from ...protocol.keys import SECRETS_ROOT
from ...services.instances import LIVE_STATES

GRACE = dt.timedelta(minutes=10)
GONE_STATES = {"terminated", "shutting-down"}


def _secret_params(ssm: Any) -> list[dict[str, Any]]:
    found: list[dict[str, Any]] = []
    paginator = ssm.get_paginator("get_parameters_by_path")
    for page in paginator.paginate(Path=SECRETS_ROOT, Recursive=True):
        found.extend(page["Parameters"])
    return found


def _states(ec2: Any, instance_ids: list[str]) -> dict[str, str]:
    states: dict[str, str] = {}
    for start in range(0, len(instance_ids), 100):
        chunk = instance_ids[start : start + 100]
        paginator = ec2.get_paginator("describe_instances")
        for page in paginator.paginate(Filters=[{"Name": "instance-id", "Values": chunk}]):
            for reservation in page["Reservations"]:
                for inst in reservation["Instances"]:
                    states[inst["InstanceId"]] = inst["State"]["Name"]
    return states


def orphaned(ssm: Any, ec2: Any, now: dt.datetime | None = None) -> dict[str, list[str]]:
    """fleet id -> names of its secrets whose instance is gone."""
    now = now or dt.datetime.now(dt.UTC)
    by_instance: dict[tuple[str, str], list[dict[str, Any]]] = defaultdict(list)
    for param in _secret_params(ssm):
        parts = param["Name"][len(SECRETS_ROOT) + 1 :].split("/")
        if len(parts) == 3:
            by_instance[(parts[0], parts[1])].append(param)
    if not by_instance:
        return {}
    states = _states(ec2, sorted({instance for _, instance in by_instance}))
    out: dict[str, list[str]] = defaultdict(list)
    for (fleet_id, instance_id), params in by_instance.items():
        state = states.get(instance_id)
        if state in LIVE_STATES:
            continue
        for param in params:
            modified = param.get("LastModifiedDate") or now
            if state in GONE_STATES or now - modified > GRACE:
                out[fleet_id].append(param["Name"])
    return dict(out)


def sweep_orphan_secrets(ssm: Any, ec2: Any, now: dt.datetime | None = None) -> dict[str, int]:
    """Delete the secrets of instances that are gone; fleet id -> secrets deleted."""
    try:
        orphans = orphaned(ssm, ec2, now)
    except ClientError:
        return {}  # no permission to look (or nothing there): the fleet's own teardown still runs
    deleted: dict[str, int] = {}
    for fleet_id, names in orphans.items():
        for start in range(0, len(names), 10):
            ssm.delete_parameters(Names=names[start : start + 10])
        deleted[fleet_id] = len(names)
    return deleted
