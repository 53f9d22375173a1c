"""Looking at fleets from any machine: what runs, what it costs, its bootstrap logs."""

from __future__ import annotations

import datetime as dt
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

from ...cloud.prices import hourly_price
from ...errors import BadInput
from ...protocol import QUEUE_ROLES, fleet_of_queue, logs_prefix
from ...protocol.keys import QUEUE_PREFIX
from ...services import instances, queues, store


@dataclass
class FleetRow:
    fleet_id: str
    owner: str = "?"
    instances: list[dict[str, Any]] = field(default_factory=list)
    depths: dict[str, int] = field(default_factory=dict)
    cost: float = 0.0


def cloud_status(ec2: Any, sqs: Any, *, launched_by: str | None, now: dt.datetime | None = None) -> list[FleetRow]:
    """Instances (own, or everyone's) and fleet queues, grouped by fleet, with cost so far."""
    now = now or dt.datetime.now(dt.UTC)
    rows: dict[str, FleetRow] = {}
    for inst in instances.live_instances(ec2, launched_by=launched_by):
        tags = {t["Key"]: t["Value"] for t in inst.get("Tags", [])}
        row = rows.setdefault(tags.get("FleetId", "?"), FleetRow(tags.get("FleetId", "?")))
        row.owner = tags.get("LaunchedBy", "?")
        row.instances.append(inst)
        try:
            price = hourly_price(inst["InstanceType"])
        except BadInput:
            price = 0.0
        row.cost += (now - inst["LaunchTime"]).total_seconds() / 3600 * price
    urls: dict[str, dict[str, str]] = defaultdict(dict)
    for page in sqs.get_paginator("list_queues").paginate(QueueNamePrefix=QUEUE_PREFIX):
        for url in page.get("QueueUrls", []):
            parsed = fleet_of_queue(url)
            if parsed:
                urls[parsed[0]][parsed[1]] = url
    for fleet_id, roles in urls.items():
        if launched_by and fleet_id not in rows:
            continue  # someone else's queues (queues carry no owner; instances do)
        if set(roles) != set(QUEUE_ROLES):
            continue
        row = rows.setdefault(fleet_id, FleetRow(fleet_id))
        row.depths = queues.depths(sqs, queues.FleetQueues(**roles))
    return sorted(rows.values(), key=lambda r: r.fleet_id)


def log_keys(s3: Any, bucket: str, fleet_id: str, instance_id: str | None = None) -> list[str]:
    prefix = logs_prefix(fleet_id, instance_id or "")
    return sorted(k for k in store.list_keys(s3, bucket, prefix) if k.endswith("-bootstrap.log"))
