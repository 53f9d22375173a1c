"""S3 for the fleet: bucket, manifest, code artifacts, results and bootstrap logs."""

from __future__ import annotations

import email.utils
import hashlib
import json
import os
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from botocore.exceptions import ClientError

from ..errors import BadInput
from ..evallog import is_readable
from ..protocol import Manifest, artifact_key, lease_key, manifest_key, result_job_id

if TYPE_CHECKING:
    from mypy_boto3_s3 import S3Client


def _missing(exc: ClientError) -> bool:
    return exc.response.get("Error", {}).get("Code") in ("404", "NoSuchKey", "NotFound", "NoSuchBucket")


def ensure_bucket(s3: S3Client, bucket: str, *, create: bool) -> None:
    try:
        s3.head_bucket(Bucket=bucket)
        return
    except ClientError as exc:
        if not _missing(exc):
            raise
    if not create:
        raise BadInput(
            f"results bucket {bucket!r} does not exist: create it (docs/access.md) or pass --ec2-arg bucket=NAME"
        )
    region = s3.meta.region_name
    kwargs: dict[str, Any] = {"Bucket": bucket}
    if region and region != "us-east-1":
        kwargs["CreateBucketConfiguration"] = {"LocationConstraint": region}
    s3.create_bucket(**kwargs)


def exists(s3: S3Client, bucket: str, key: str) -> bool:
    try:
        s3.head_object(Bucket=bucket, Key=key)
        return True
    except ClientError as exc:
        if _missing(exc):
            return False
        raise


LEASE_TTL = 60.0  # seconds a controller's lease lives without renewal, unless it says otherwise


@dataclass(frozen=True)
class Lease:
    """The fleet's controller lease as S3 holds it: what its holder wrote (host, pid, token,
    ttl), its age on S3's own clock, and its ETag (for a conditional take-over)."""

    holder: dict[str, Any]
    age: float
    etag: str

    @property
    def ttl(self) -> float:
        ttl = self.holder.get("ttl")
        return float(ttl) if isinstance(ttl, int | float) else LEASE_TTL

    @property
    def held(self) -> bool:
        """Renewed within its TTL: a controller is driving the fleet."""
        return self.age <= self.ttl


def read_lease(s3: S3Client, bucket: str, fleet_id: str) -> Lease | None:
    """The fleet's controller lease, None when no controller holds or left one."""
    try:
        resp = s3.get_object(Bucket=bucket, Key=lease_key(fleet_id))
    except ClientError as exc:
        if _missing(exc):
            return None
        raise
    try:
        holder = json.loads(resp["Body"].read())
    except ValueError:
        holder = {}
    # Ages on S3's clock (the response's Date against the object's LastModified): the
    # holder may be another machine, whose clock is not ours.
    date = resp.get("ResponseMetadata", {}).get("HTTPHeaders", {}).get("date")
    now = email.utils.parsedate_to_datetime(date).timestamp() if date else time.time()
    return Lease(holder if isinstance(holder, dict) else {}, now - resp["LastModified"].timestamp(), str(resp["ETag"]))


def read_object(s3: S3Client, bucket: str, key: str) -> bytes | None:
    """A small object's bytes, None when it is not there."""
    try:
        body: bytes = s3.get_object(Bucket=bucket, Key=key)["Body"].read()
    except ClientError as exc:
        if _missing(exc):
            return None
        raise
    return body


def get_manifest(s3: S3Client, bucket: str, fleet_id: str) -> Manifest | None:
    """The fleet's manifest, None when there is none; ValueError when it is not a manifest."""
    body = read_object(s3, bucket, manifest_key(fleet_id))
    return None if body is None else Manifest.from_json(body)


def put_manifest(s3: S3Client, bucket: str, manifest: Manifest) -> None:
    s3.put_object(
        Bucket=bucket,
        Key=manifest_key(manifest.fleet_id),
        Body=manifest.to_json().encode(),
        ContentType="application/json",
    )


def upload_artifact(s3: S3Client, bucket: str, sha: str, tarball: Path) -> bool:
    """Upload the code tarball once per SHA; returns whether it was uploaded now."""
    key = artifact_key(sha)
    if exists(s3, bucket, key):
        return False
    s3.upload_file(str(tarball), bucket, key)
    return True


def list_keys(s3: S3Client, bucket: str, prefix: str) -> Iterator[str]:
    """Every key under prefix: one list call per 1,000 keys."""
    paginator = s3.get_paginator("list_objects_v2")
    for page in paginator.paginate(Bucket=bucket, Prefix=prefix, PaginationConfig={"PageSize": 1000}):
        for obj in page.get("Contents", []):
            yield obj["Key"]


def list_result_job_ids(s3: S3Client, bucket: str, fleet_id: str) -> set[str]:
    """Job ids that have a result object (not yet proven readable) directly under the fleet prefix."""
    out = set()
    for key in list_keys(s3, bucket, f"{fleet_id}/"):
        job_id = result_job_id(fleet_id, key)
        if job_id is not None:
            out.add(job_id)
    return out


def download_result(s3: S3Client, bucket: str, key: str, dest: Path) -> bytes | None:
    """Fetch a result to dest. Its digest (evallog.digest's, taken as it streams in: no second
    read) when it is a log that reads in full; else None, and dest is left as it was."""
    dest.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=dest.parent, suffix=".part")
    sha = hashlib.sha256()
    try:
        with os.fdopen(fd, "wb") as fh:
            try:
                # One GetObject (download_file adds a HeadObject): results are small and the
                # controller's calls per job are what bound the size of a fleet.
                body = s3.get_object(Bucket=bucket, Key=key)["Body"]
                for chunk in iter(lambda: body.read(1 << 20), b""):
                    sha.update(chunk)
                    fh.write(chunk)
            except ClientError as exc:
                if _missing(exc):
                    return None
                raise
        if not is_readable(Path(tmp)):
            return None
        os.replace(tmp, dest)
        return sha.digest()
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


# Below this a result goes up in one PutObject; above, in parts (upload_file). A
# one-sample log is KBs to a few MB, and upload_file's thread pool costs ~20-50 ms a call.
SINGLE_PUT_LIMIT = 64 * 2**20


def upload_result(s3: S3Client, bucket: str, key: str, path: Path) -> bool:
    """Store a job's result unless one is there already: False then, and the one there stays.

    A conditional write (If-None-Match), so of two attempts of one job that raced (a work
    message delivered twice), the first result is the result, never overwritten by the
    second after the controller fetched the first. (A result is deleted before its job is
    ever sent again: controller/fleet/collector.py.) A 409 (a write of the key in progress) raises:
    the message stays, and the next attempt finds whichever result won."""
    if path.stat().st_size <= SINGLE_PUT_LIMIT:
        with open(path, "rb") as body:
            try:
                s3.put_object(Bucket=bucket, Key=key, Body=body, IfNoneMatch="*")
            except ClientError as exc:
                if precondition_failed(exc):
                    return False
                raise
        return True
    # s3transfer's multipart upload takes no condition: checked first (a race is left open
    # only for results over SINGLE_PUT_LIMIT, where a sample's log is very rarely).
    if exists(s3, bucket, key):
        return False
    s3.upload_file(str(path), bucket, key)
    return True


def precondition_failed(exc: ClientError) -> bool:
    """A conditional write or delete refused: the object is not as the condition said (412)."""
    status = exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode")
    return status == 412 or exc.response.get("Error", {}).get("Code") in ("PreconditionFailed", "412")


def delete_prefix(s3: S3Client, bucket: str, prefix: str) -> int:
    """Delete every key under prefix (1,000 per call); how many there were."""
    keys = list(list_keys(s3, bucket, prefix))
    for start in range(0, len(keys), 1000):
        batch = [{"Key": k} for k in keys[start : start + 1000]]
        s3.delete_objects(Bucket=bucket, Delete={"Objects": batch, "Quiet": True})  # type: ignore[typeddict-item]
    return len(keys)
