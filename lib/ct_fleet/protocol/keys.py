"""Names both sides derive from a fleet id: S3 keys, SQS queue names, SSM paths.

S3:   {fleet_id}/manifest.json, {fleet_id}/{job_id}.eval, {fleet_id}/fleet-done.json,
      {fleet_id}/controller.lease, {fleet_id}/logs/{instance_id}-bootstrap.log, artifacts/{sha}.tar.gz,
      artifacts/extra-{basename}-{digest}.tar.gz, artifacts/wheels/{digest}/{name}.whl,
      {fleet_id}/checkpoints/{job_id}/ (a --checkpoint job's Inspect checkpoints: its last
      attempt's started log <name>.eval and <name>.checkpoints/, restic repos and their
      restic-config.json password files included; worker/checkpoints.py)
SQS:  lb-fleet-{fleet_id}-work / -done / -dlq (work redrives to dlq after max receives)
SSM:  /linuxbench/fleet-secrets/{fleet_id}/{instance_id}/secrets[.N] (one SecureString per
      instance holding all its secrets; .1, .2, ... only when they overflow 4 KB),
      /linuxbench/docker-org-* (registry auth the worker role may read)
"""

from __future__ import annotations

import re

# An EC2 instance id (8 or 17 hex digits; moto's are 17): what a command may pass on to
# an AWS call or into a command line (ssh's ProxyCommand) as it is.
INSTANCE_ID = re.compile(r"i-[0-9a-f]{8}(?:[0-9a-f]{9})?")

QUEUE_PREFIX = "lb-fleet-"
QUEUE_ROLES = ("work", "done", "dlq")
SECRETS_ROOT = "/linuxbench/fleet-secrets"
DOCKER_PARAM_PREFIX = "/linuxbench/docker-org-"


def queue_names(fleet_id: str) -> dict[str, str]:
    base = f"{QUEUE_PREFIX}{fleet_id}"
    return {role: f"{base}-{role}" for role in QUEUE_ROLES}


def fleet_of_queue(url_or_name: str) -> tuple[str, str] | None:
    """(fleet id, role) of a fleet queue's name or URL, else None."""
    name = url_or_name.rsplit("/", 1)[-1]
    if not name.startswith(QUEUE_PREFIX):
        return None
    fleet_id, _, role = name[len(QUEUE_PREFIX) :].rpartition("-")
    return (fleet_id, role) if role in QUEUE_ROLES and fleet_id else None


def result_key(fleet_id: str, job_id: str) -> str:
    return f"{fleet_id}/{job_id}.eval"


def result_job_id(fleet_id: str, key: str) -> str | None:
    """The job id of a result key directly under the fleet prefix, else None."""
    prefix = f"{fleet_id}/"
    if not key.startswith(prefix):
        return None
    name = key[len(prefix) :]
    if "/" in name or not name.endswith(".eval"):
        return None
    return name[: -len(".eval")]


def checkpoints_prefix(fleet_id: str, job_id: str = "") -> str:
    """Where a --checkpoint job keeps what a resume on another worker needs; no .eval
    directly under the fleet prefix, so never taken for a result."""
    return f"{fleet_id}/checkpoints/{job_id}/" if job_id else f"{fleet_id}/checkpoints/"


def manifest_key(fleet_id: str) -> str:
    return f"{fleet_id}/manifest.json"


def tail_marker_key(fleet_id: str) -> str:
    """The queue's-tail marker (protocol/stop.py): idle workers leave at once."""
    return f"{fleet_id}/fleet-tail.json"


def done_marker_key(fleet_id: str) -> str:
    """The end-of-run marker (protocol/stop.py); not a .eval, so never taken for a result."""
    return f"{fleet_id}/fleet-done.json"


def lease_key(fleet_id: str) -> str:
    """The lease of the controller driving the fleet (controller/fleet/lease.py); not a .eval either."""
    return f"{fleet_id}/controller.lease"


def logs_prefix(fleet_id: str, instance_id: str = "") -> str:
    return f"{fleet_id}/logs/{instance_id}"


def log_key(fleet_id: str, instance_id: str) -> str:
    return f"{logs_prefix(fleet_id, instance_id)}-bootstrap.log"


def artifact_key(sha: str) -> str:
    return f"artifacts/{sha}.tar.gz"


def extra_src_key(basename: str, digest: str) -> str:
    return f"artifacts/extra-{basename}-{digest}.tar.gz"


def extra_src_basename(key: str) -> str:
    """The basename an extra_src_key names (the digest holds no '-')."""
    name = key.removeprefix("artifacts/extra-").removesuffix(".tar.gz")
    if name == key or "-" not in name:
        raise ValueError(f"not an extra-src artifact key: {key!r}")
    return name.rsplit("-", 1)[0]


def wheel_key(digest: str, filename: str) -> str:
    return f"artifacts/wheels/{digest}/{filename}"


def secrets_prefix(fleet_id: str) -> str:
    return f"{SECRETS_ROOT}/{fleet_id}"


def secret_bundle(fleet_id: str, instance_id: str, index: int = 0) -> str:
    """The instance's index-th secrets parameter; worker/fetch-secrets.sh spells the same."""
    base = f"{secrets_prefix(fleet_id)}/{instance_id}/secrets"
    return f"{base}.{index}" if index else base
