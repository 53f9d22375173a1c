"""Looking at fleets from any machine: what runs, what it costs, its bootstrap logs, its results."""

from __future__ import annotations

import datetime as dt
from collections import defaultdict
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ...cloud.prices import hourly_price
from ...errors import BadInput
from ...protocol import QUEUE_ROLES, Manifest, fleet_of_queue, logs_prefix, manifest_key, result_key, run_layout
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


def fetch_results(s3: Any, bucket: str, fleet_id: str, run_dir: Path) -> tuple[Manifest, int]:
    """Bring a fleet's manifest and every result it has so far from S3 into run_dir (as its
    controller keeps them), e.g. to view a fleet that ran from another machine. Results
    already here are not fetched again. Returns (manifest, results now here)."""
    manifest = store.get_manifest(s3, bucket, fleet_id)
    if manifest is None:
        raise BadInput(f"no fleet {fleet_id}: s3://{bucket}/{manifest_key(fleet_id)} does not exist")
    run_dir.mkdir(parents=True, exist_ok=True)
    (run_dir / run_layout.MANIFEST).write_text(manifest.to_json())
    wanted = {j.job_id for j in manifest.jobs}
    here = {p.stem for p in run_layout.job_logs(run_dir)} & wanted
    missing = sorted((store.list_result_job_ids(s3, bucket, fleet_id) & wanted) - here)

    def fetch(job_id: str) -> bool:
        key = result_key(fleet_id, job_id)
        return store.download_result(s3, bucket, key, run_layout.job_log(run_dir, job_id)) is not None

    with ThreadPoolExecutor(max_workers=8) as pool:
        fetched = sum(pool.map(fetch, missing))
    return manifest, len(here) + fetched
