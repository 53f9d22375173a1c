"""SQS for one fleet: the work, done and dead-letter queues and batched calls on them.

Every call that can move more than one message is batched (10 per call, SQS's limit): the
controller's API cost per job is what bounds how large a fleet one laptop can drive.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from botocore.exceptions import ClientError

from ..protocol import queue_names
from ..protocol.messages import MAX_MESSAGE_BYTES

if TYPE_CHECKING:
    from mypy_boto3_sqs import SQSClient
    from mypy_boto3_sqs.type_defs import MessageTypeDef, ReceiveMessageRequestTypeDef

BATCH = 10


@dataclass(frozen=True)
class FleetQueues:
    work: str
    done: str
    dlq: str

    def urls(self) -> dict[str, str]:
        return {"work": self.work, "done": self.done, "dlq": self.dlq}


def ensure_queues(sqs: SQSClient, fleet_id: str, *, visibility_timeout: int, max_receive_count: int) -> FleetQueues:
    names = queue_names(fleet_id)
    retention = str(14 * 24 * 3600)
    dlq = sqs.create_queue(QueueName=names["dlq"], Attributes={"MessageRetentionPeriod": retention})["QueueUrl"]
    dlq_arn = sqs.get_queue_attributes(QueueUrl=dlq, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
    redrive = json.dumps({"deadLetterTargetArn": dlq_arn, "maxReceiveCount": str(max_receive_count)})
    work = sqs.create_queue(
        QueueName=names["work"],
        Attributes={
            "VisibilityTimeout": str(visibility_timeout),
            "MessageRetentionPeriod": retention,
            "RedrivePolicy": redrive,
        },
    )["QueueUrl"]
    done = sqs.create_queue(QueueName=names["done"], Attributes={"MessageRetentionPeriod": retention})["QueueUrl"]
    return FleetQueues(work=work, done=done, dlq=dlq)


def find_queues(sqs: SQSClient, fleet_id: str) -> FleetQueues | None:
    urls = {}
    for role, name in queue_names(fleet_id).items():
        try:
            urls[role] = sqs.get_queue_url(QueueName=name)["QueueUrl"]
        except ClientError as exc:
            if "NonExistentQueue" in str(exc.response.get("Error", {}).get("Code", "")):
                return None
            raise
    return FleetQueues(**urls)


def delete_queues(sqs: SQSClient, queues: FleetQueues) -> None:
    for url in queues.urls().values():
        try:
            sqs.delete_queue(QueueUrl=url)
        except ClientError:
            pass  # already gone


def _chunks(items: Sequence[Any], size: int = BATCH) -> Iterable[Sequence[Any]]:
    for start in range(0, len(items), size):
        yield items[start : start + size]


def _batches(bodies: Sequence[str]) -> Iterable[list[str]]:
    """Up to BATCH bodies a call, within what one call may carry in all (SQS refuses the
    whole batch past it: BatchRequestTooLong)."""
    batch: list[str] = []
    size = 0
    for body in bodies:
        length = len(body.encode())
        if batch and (len(batch) == BATCH or size + length > MAX_MESSAGE_BYTES):
            yield batch
            batch, size = [], 0
        batch.append(body)
        size += length
    if batch:
        yield batch


def send_batch(sqs: SQSClient, url: str, bodies: Sequence[str]) -> int:
    """Send every body, 10 per call at most; entries that fail inside a batch are resent."""
    sent = 0
    for chunk in _batches(bodies):
        pending = {str(i): body for i, body in enumerate(chunk)}
        for attempt in range(8):
            resp = sqs.send_message_batch(
                QueueUrl=url, Entries=[{"Id": i, "MessageBody": b} for i, b in pending.items()]
            )
            for ok in resp.get("Successful", []):
                pending.pop(ok["Id"], None)
                sent += 1
            if not pending:
                break
            time.sleep(min(0.2 * 2**attempt, 5))
        if pending:
            raise RuntimeError(f"could not send {len(pending)} message(s) to {url}")
    return sent


def receive(
    sqs: SQSClient, url: str, *, max_messages: int = BATCH, wait: int = 20, visibility: int | None = None
) -> list[MessageTypeDef]:
    kwargs: ReceiveMessageRequestTypeDef = {
        "QueueUrl": url,
        "MaxNumberOfMessages": max(1, min(BATCH, max_messages)),
        "WaitTimeSeconds": wait,
        "AttributeNames": ["ApproximateReceiveCount", "SentTimestamp"],
    }
    if visibility is not None:
        kwargs["VisibilityTimeout"] = visibility
    return sqs.receive_message(**kwargs).get("Messages", [])


def delete_batch(sqs: SQSClient, url: str, receipt_handles: Sequence[str]) -> None:
    for chunk in _chunks(list(receipt_handles)):
        resp = sqs.delete_message_batch(
            QueueUrl=url, Entries=[{"Id": str(i), "ReceiptHandle": h} for i, h in enumerate(chunk)]
        )
        for failed in resp.get("Failed", []):
            # A stale handle means the message was redelivered elsewhere; that copy deletes it.
            if failed.get("Code") != "ReceiptHandleIsInvalid":
                sqs.delete_message(QueueUrl=url, ReceiptHandle=chunk[int(failed["Id"])])


def change_visibility_batch(sqs: SQSClient, url: str, handles: Sequence[str], timeout: int) -> None:
    for chunk in _chunks(list(handles)):
        sqs.change_message_visibility_batch(
            QueueUrl=url,
            Entries=[{"Id": str(i), "ReceiptHandle": h, "VisibilityTimeout": timeout} for i, h in enumerate(chunk)],
        )


def depths(sqs: SQSClient, queues: FleetQueues, roles: tuple[str, ...] = ("work", "done", "dlq")) -> dict[str, int]:
    """Approximate counts per queue role: "<role>" visible and "<role>_in_flight"."""
    out: dict[str, int] = {}
    for role, url in queues.urls().items():
        if role not in roles:
            continue
        try:
            a = sqs.get_queue_attributes(
                QueueUrl=url, AttributeNames=["ApproximateNumberOfMessages", "ApproximateNumberOfMessagesNotVisible"]
            ).get("Attributes")
        except ClientError:
            continue
        if a is None:  # an answer without the figures (AWS omits what has no value): no count, not 0
            continue
        out[role] = int(a.get("ApproximateNumberOfMessages", 0))
        out[f"{role}_in_flight"] = int(a.get("ApproximateNumberOfMessagesNotVisible", 0))
    return out
