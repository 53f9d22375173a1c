"""One controller per fleet: a lock on this machine and a lease in S3 across machines.

Two controllers of one fleet would split its done reports between them and both wait
forever. So a controller holds
- a lock on runs/<fleet>/controller.lock (flock: released by the kernel when the process
  dies, however it dies), which also keeps two embedded clouds from starting for one fleet;
- a lease object {fleet_id}/controller.lease in the results bucket, written with S3's
  conditional puts (If-None-Match to take a free lease, If-Match to renew or take over an
  expired one) and renewed in the background. A lease not renewed for TTL seconds is
  expired: its owner died, and the next controller adopts the fleet. On the owner's own
  machine a dead owner is seen at once (its pid is gone), so a rerun right after a crash
  adopts without waiting.
"""

from __future__ import annotations

import fcntl
import json
import os
import socket
import threading
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from botocore.exceptions import ClientError

from ...errors import BadInput
from ...protocol import lease_key, run_layout
from ...services import store

TTL = store.LEASE_TTL
RENEW_EVERY = 15.0


class LocalLock:
    """An exclusive flock on runs/<fleet>/controller.lock for the life of this process's run."""

    def __init__(self, run_dir: Path) -> None:
        self.path = run_dir / run_layout.LOCK
        self._fh: IO[str] | None = None

    def acquire(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fh = open(self.path, "a+")
        try:
            fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            fh.seek(0)
            holder = fh.read().strip() or "another process"
            fh.close()
            raise BadInput(
                f"fleet {self.path.parent.name} is already being run by {holder} on this machine: "
                "wait for it to finish (or stop it), then rerun"
            ) from None
        fh.seek(0)
        fh.truncate()
        fh.write(f"ct-fleet pid {os.getpid()}")
        fh.flush()
        self._fh = fh

    def release(self) -> None:
        if self._fh is not None:
            fcntl.flock(self._fh, fcntl.LOCK_UN)
            self._fh.close()
            self._fh = None


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


@dataclass
class S3Lease:
    s3: Any
    bucket: str
    fleet_id: str
    ttl: float = TTL
    renew_every: float = RENEW_EVERY
    owner: dict[str, Any] = field(
        default_factory=lambda: {"host": socket.gethostname(), "pid": os.getpid(), "token": uuid.uuid4().hex}
    )
    etag: str | None = None
    lost: bool = False
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    @property
    def key(self) -> str:
        return lease_key(self.fleet_id)

    def _body(self) -> bytes:
        return json.dumps({**self.owner, "renewed_at": time.time(), "ttl": self.ttl}).encode()

    def _put(self, **condition: str) -> str:
        resp = self.s3.put_object(Bucket=self.bucket, Key=self.key, Body=self._body(), **condition)
        return str(resp["ETag"])

    def acquire(self) -> None:
        """Take the fleet's lease, or adopt it from an owner that is gone; BadInput if it is held."""
        try:
            self.etag = self._put(IfNoneMatch="*")
        except ClientError as exc:
            if not store.precondition_failed(exc):
                raise
            self._take_over()
        self._thread = threading.Thread(target=self._renew_loop, name="fleet-lease", daemon=True)
        self._thread.start()

    def _take_over(self) -> None:
        lease = store.read_lease(self.s3, self.bucket, self.fleet_id)
        if lease is None:  # released between our put and this read: it is free
            self.etag = self._put(IfNoneMatch="*")
            return
        holder, age, ttl = lease.holder, lease.age, lease.ttl
        if holder.get("token") == self.owner["token"]:
            # Our own first put: S3 applied it, its answer was lost (a 5xx or a timeout after
            # the write) and the SDK's retry found the lease there. It is ours.
            self.etag = lease.etag
            return
        same_host = holder.get("host") == self.owner["host"]
        dead_here = same_host and isinstance(holder.get("pid"), int) and not _pid_alive(holder["pid"])
        if lease.held and not dead_here:
            who = f"pid {holder.get('pid')} on {holder.get('host')}" if holder else "another controller"
            raise BadInput(
                f"fleet {self.fleet_id} is driven by another controller ({who}, lease renewed {age:.0f}s ago): "
                f"wait for it to finish; if it died, rerun in {max(1, ttl - age):.0f}s to adopt the fleet"
            )
        try:
            self.etag = self._put(IfMatch=lease.etag)
        except ClientError as exc:
            if not store.precondition_failed(exc):
                raise
            if not self._still_mine():
                raise BadInput(
                    f"fleet {self.fleet_id} was just adopted by another controller: let that one run"
                ) from None

    def _renew_loop(self) -> None:
        while not self._stop.wait(self.renew_every):
            try:
                self.etag = self._put(IfMatch=self.etag or "")
            except ClientError as exc:
                if store.precondition_failed(exc) and self._still_mine():
                    continue
                if store.precondition_failed(exc) or exc.response.get("Error", {}).get("Code") in ("NoSuchKey", "404"):
                    self.lost = True
                    return
            except Exception:  # the network is back next time; the lease lasts TTL
                continue

    def _still_mine(self) -> bool:
        """After a 412: is the lease ours all the same? A renewal S3 applied but whose answer
        was lost (a 5xx or a timeout after the write) changed the ETag without telling us."""
        try:
            resp = self.s3.get_object(Bucket=self.bucket, Key=self.key)
            holder = json.loads(resp["Body"].read())
        except Exception:  # unknown: the next renewal asks again
            return True
        if holder.get("token") != self.owner["token"]:
            return False
        self.etag = str(resp["ETag"])
        return True

    def release(self, ask: bool = True) -> None:
        """Stop renewing and delete the lease; without `ask` (its bucket is gone) stop only."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
        for _ in range(2 if ask else 0):  # the second time with the ETag of a renewal whose answer was lost
            if not self.etag or self.lost:
                break
            try:
                self.s3.delete_object(Bucket=self.bucket, Key=self.key, IfMatch=self.etag)
                break
            except Exception:  # an expired lease is as good as a deleted one
                if not self._still_mine():
                    break
        self.etag = None
