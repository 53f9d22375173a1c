"""Why workers die, read from their bootstrap logs in S3 (worker/upload-log.sh puts them there)."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from ...protocol import log_key, mask, steplog

# Bootstrap steps whose failure repeats on every worker (an unimportable setting, a broken
# worker_setup script): the first report stops the fleet instead of replacing workers.
DETERMINISTIC_STEPS = frozenset({"settings-pull", "worker-setup"})


def _boot_log(s3: Any, bucket: str, fleet_id: str, instance_id: str) -> tuple[str, str] | None:
    key = log_key(fleet_id, instance_id)
    try:
        body = s3.get_object(Bucket=bucket, Key=key)["Body"].read()
    except Exception:
        return None
    return key, body.decode(errors="replace")


def deterministic_failure(s3: Any, bucket: str, fleet_id: str, ended: Sequence[str]) -> str | None:
    """A worker that died in a step every worker will fail the same way (an unimportable
    setting, a broken worker_setup) stops the fleet at once: replacing it cannot help."""
    for instance_id in ended:
        got = _boot_log(s3, bucket, fleet_id, instance_id)
        failure = steplog.first_failure(got[1]) if got else None
        if got and failure and failure.step.name in DETERMINISTIC_STEPS:
            return f"{failure.describe()} on {instance_id} (log: s3://{bucket}/{got[0]})"
    return None


def why_workers_die(
    s3: Any, bucket: str, fleet_id: str, launched: Sequence[str], replacements: int, secrets: Iterable[str]
) -> str:
    """Why workers keep dying: the failed step of the newest bootstrap log that has one."""
    for instance_id in reversed(launched):
        got = _boot_log(s3, bucket, fleet_id, instance_id)
        if got is None:
            continue
        failure = steplog.first_failure(got[1])
        if failure:
            return f"workers keep dying: {mask(failure.describe(), secrets)} (log: s3://{bucket}/{got[0]})"
    return f"workers keep dying after {replacements} replacement(s); logs under s3://{bucket}/{fleet_id}/logs/"
