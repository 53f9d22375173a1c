"""The end-of-run signal over S3 and SQS (the format is protocol/stop.py)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..protocol import done_marker_key
from ..protocol.keys import tail_marker_key
from ..protocol.stop import marker_body, stop_body
from . import queues, store

if TYPE_CHECKING:
    from mypy_boto3_s3 import S3Client
    from mypy_boto3_sqs import SQSClient


def announce(
    s3: S3Client, sqs: SQSClient, bucket: str, fleet_id: str, work_url: str, reason: str = "every job is final"
) -> None:
    """Tell the fleet's workers to leave: the marker first (the durable form), then the message."""
    s3.put_object(Bucket=bucket, Key=done_marker_key(fleet_id), Body=marker_body(fleet_id, reason).encode())
    queues.send_batch(sqs, work_url, [stop_body(fleet_id)])


def clear(s3: S3Client, bucket: str, fleet_id: str) -> None:
    """A fleet (re)starting has work: forget an earlier end (and tail)."""
    s3.delete_object(Bucket=bucket, Key=done_marker_key(fleet_id))
    s3.delete_object(Bucket=bucket, Key=tail_marker_key(fleet_id))


def mark_tail(s3: S3Client, bucket: str, fleet_id: str, on: bool) -> None:
    """The queue's tail reached (on) or left (off): idle workers may leave, or not."""
    if on:
        s3.put_object(Bucket=bucket, Key=tail_marker_key(fleet_id), Body=marker_body(fleet_id, "tail").encode())
    else:
        s3.delete_object(Bucket=bucket, Key=tail_marker_key(fleet_id))


def is_tail(s3: S3Client, bucket: str, fleet_id: str) -> bool:
    return store.exists(s3, bucket, tail_marker_key(fleet_id))


def is_done(s3: S3Client, bucket: str, fleet_id: str) -> bool:
    return store.exists(s3, bucket, done_marker_key(fleet_id))


def pass_on(sqs: SQSClient, work_url: str, fleet_id: str, receipt_handle: str) -> None:
    """A fresh copy for the next worker, then delete the one received (never past its receive count)."""
    queues.send_batch(sqs, work_url, [stop_body(fleet_id)])
    queues.delete_batch(sqs, work_url, [receipt_handle])
