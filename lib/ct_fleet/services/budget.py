"""The fleet's model budget document in S3 (the format is protocol/budget.py)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..protocol.budget import Budget, budget_key
from .store import read_object

if TYPE_CHECKING:
    from mypy_boto3_s3 import S3Client

# What a worker reads when the fleet has no budget document.
NONE = Budget(v=0)  # versions of real documents start at 1


def put(s3: S3Client, bucket: str, fleet_id: str, doc: Budget) -> None:
    s3.put_object(Bucket=bucket, Key=budget_key(fleet_id), Body=doc.to_json().encode())


def get(s3: S3Client, bucket: str, fleet_id: str) -> Budget | None:
    """The document in force; NONE when the fleet has none; None when it does not read as one."""
    body = read_object(s3, bucket, budget_key(fleet_id))
    return NONE if body is None else Budget.from_json(body)


def delete(s3: S3Client, bucket: str, fleet_id: str) -> None:
    s3.delete_object(Bucket=bucket, Key=budget_key(fleet_id))
