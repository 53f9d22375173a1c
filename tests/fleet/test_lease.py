"""The fleet's S3 lease against moto's conditional puts: a renewal whose answer was lost
keeps the lease; a lease someone else wrote is lost."""

from __future__ import annotations

import json
import time
import uuid

import pytest

from ct_fleet.controller.fleet.lease import S3Lease
from ct_fleet.controller.reporting import remote_controller
from ct_fleet.errors import BadInput
from ct_fleet.protocol import lease_key


@pytest.fixture
def s3(aws_client):
    client = aws_client("s3")
    bucket = f"lease-{uuid.uuid4().hex[:8]}"
    client.create_bucket(Bucket=bucket)
    return client, bucket


def _rewrite(client, bucket: str, fleet: str, token: str, ttl: float = 60) -> str:
    """Overwrite the lease object as S3 would have after some write: a new ETag."""
    body = json.dumps({"host": "h", "pid": 1, "token": token, "renewed_at": time.time(), "ttl": ttl})
    return str(client.put_object(Bucket=bucket, Key=lease_key(fleet), Body=body.encode())["ETag"])


def _wait(predicate, timeout: float = 60) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.05)
    return False


def test_a_renewal_applied_but_unanswered_keeps_the_lease(s3) -> None:
    client, bucket = s3
    lease = S3Lease(client, bucket, "fleet1", renew_every=0.1)
    lease.acquire()
    try:
        # Our own renewal reached S3 but its answer did not reach us: the object carries our
        # token under an ETag we never saw, so the next renewal's If-Match fails with 412.
        before = lease.etag
        unseen = _rewrite(client, bucket, "fleet1", lease.owner["token"])
        assert _wait(lambda: lease.etag not in (before, unseen) or lease.lost)  # renewed since
        assert not lease.lost
        # And again, now at release: the delete's If-Match fails, the lease is still deleted.
        lease._stop.set()
        lease._thread.join()
        _rewrite(client, bucket, "fleet1", lease.owner["token"])
    finally:
        lease.release()
    assert "Contents" not in client.list_objects_v2(Bucket=bucket)  # released: deleted


def test_a_lease_another_controller_wrote_is_lost(s3) -> None:
    client, bucket = s3
    lease = S3Lease(client, bucket, "fleet2", renew_every=0.1)
    lease.acquire()
    try:
        _rewrite(client, bucket, "fleet2", "someone-else")
        assert _wait(lambda: lease.lost)
    finally:
        lease.release()
    with pytest.raises(BadInput, match="driven by another controller"):
        S3Lease(client, bucket, "fleet2").acquire()


def test_a_controller_elsewhere_is_seen_while_its_lease_is_fresh(s3) -> None:
    """What `status` and `view` of an EC2 fleet ask S3: is a controller driving it?"""
    client, bucket = s3
    assert not remote_controller(client, bucket, "fleet3")  # none ever
    lease = S3Lease(client, bucket, "fleet3")
    lease.acquire()
    try:
        assert remote_controller(client, bucket, "fleet3")
    finally:
        lease.release()
    assert not remote_controller(client, bucket, "fleet3")  # its end deletes the lease
    _rewrite(client, bucket, "fleet3", "someone", ttl=-1)  # older than its TTL: a controller that died
    assert not remote_controller(client, bucket, "fleet3")
    _rewrite(client, bucket, "fleet3", "someone", ttl=60)
    assert remote_controller(client, bucket, "fleet3")


def test_a_first_put_applied_but_unanswered_is_our_lease(s3) -> None:
    """S3 applied our If-None-Match put, its answer was lost (a 5xx after the write) and the
    SDK's retry found the lease there: that lease is ours, not another controller's."""
    client, bucket = s3
    lease = S3Lease(client, bucket, "fleet4", renew_every=0.1)
    etag = _rewrite(client, bucket, "fleet4", lease.owner["token"])  # what the first attempt left
    lease.acquire()
    try:
        assert lease.etag == etag
        assert not lease.lost
    finally:
        lease.release()
    assert not remote_controller(client, bucket, "fleet4")  # released: ours to delete
    other = S3Lease(client, bucket, "fleet5")
    _rewrite(client, bucket, "fleet5", "someone-else")
    with pytest.raises(BadInput, match="driven by another controller"):
        other.acquire()
