"""Can the fleet still make progress? A fleet whose queue, bucket or manifest was deleted
under it, or whose cloud died (the embedded cloud's server was killed), never finishes: the
controller stops it at the next fleet check (a minute at most) with a one-line reason,
instead of waiting toward its hard timeouts."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from botocore.exceptions import ClientError

from ...protocol import manifest_key
from ...services.queues import FleetQueues

if TYPE_CHECKING:
    from ...cloud import Cloud

QUEUE_GONE = ("AWS.SimpleQueueService.NonExistentQueue", "QueueDoesNotExist", "NonExistentQueue")
BUCKET_GONE = ("NoSuchBucket",)
KEY_GONE = ("NoSuchKey", "404", "NotFound")


def _code(exc: ClientError) -> str:
    return str(exc.response.get("Error", {}).get("Code", ""))


def gone(exc: BaseException) -> str | None:
    """What a failed call says is missing (a queue, the bucket), or None for any other error."""
    if not isinstance(exc, ClientError):
        return None
    code = _code(exc)
    if code in QUEUE_GONE:
        return "a fleet queue was deleted"
    if code in BUCKET_GONE:
        return "the results bucket was deleted"
    return None


def missing(sqs: Any, s3: Any, q: FleetQueues, bucket: str, fleet_id: str) -> str | None:
    """The first of the fleet's queues, bucket and manifest that no longer exists, as a reason."""
    for role, url in q.urls().items():
        try:
            sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["QueueArn"])
        except ClientError as exc:
            if _code(exc) in QUEUE_GONE:
                return f"the {role} queue {url.rsplit('/', 1)[-1]} was deleted"
            raise
    try:
        s3.head_object(Bucket=bucket, Key=manifest_key(fleet_id))
    except ClientError as exc:
        if _code(exc) not in KEY_GONE + BUCKET_GONE:
            raise
        try:
            s3.head_bucket(Bucket=bucket)
        except ClientError as inner:
            if _code(inner) in KEY_GONE + BUCKET_GONE:
                return f"the results bucket {bucket} was deleted"
            raise
        return f"the fleet manifest s3://{bucket}/{manifest_key(fleet_id)} was deleted"
    return None


def cloud_gone(cloud: Cloud) -> str | None:
    """The run's reason to stop when its cloud died under it; None while the cloud is there."""
    why = cloud.failure()
    if why is None:
        return None
    return f"{why}: the fleet stopped; the results on disk are kept, and a rerun of the same command resumes"
