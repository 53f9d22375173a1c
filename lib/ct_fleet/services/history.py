"""Job durations of earlier fleets in S3, for the longest-first order of `--ec2` runs made
on other machines (controller/planning/history.py): history/{task identity}.json, each
"sample id (JSON)#epoch" -> seconds, merged into at the end of every run."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import TYPE_CHECKING

from .store import read_object

if TYPE_CHECKING:
    from mypy_boto3_s3 import S3Client

PREFIX = "history/"


def key(identity: str) -> str:
    return f"{PREFIX}{identity}.json"


def get(s3: S3Client, bucket: str, identity: str) -> dict[str, float]:
    """The recorded seconds of a task identity ({} when none, or not readable as such)."""
    body = read_object(s3, bucket, key(identity))
    if body is None:
        return {}
    try:
        data = json.loads(body)
    except ValueError:
        return {}
    if not isinstance(data, dict):
        return {}
    return {str(k): float(v) for k, v in data.items() if isinstance(v, int | float) and not isinstance(v, bool)}


def merge(s3: S3Client, bucket: str, seconds: Mapping[str, Mapping[str, float]]) -> None:
    """This run's seconds over what each identity's record held (the newest run wins)."""
    for identity, samples in seconds.items():
        merged = {**get(s3, bucket, identity), **samples}
        s3.put_object(Bucket=bucket, Key=key(identity), Body=json.dumps(merged).encode())
