"""What the instance metadata service (IMDSv2) says of this instance's future: a spot
interruption notice, a rebalance recommendation.

EC2 serves these at 169.254.169.254 to spot instances; the embedded cloud's local
instances get a loopback endpoint of their own (CT_IMDS_ENDPOINT, cloud/metadata_server.py)
serving the same paths, so this code runs unchanged in both clouds. AWS says to poll every
5 s: the answers are read at most that often, and remembered once given.
"""

from __future__ import annotations

import time
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, field

EC2_ENDPOINT = "http://169.254.169.254"
POLL = 5.0
INTERRUPTION = "latest/meta-data/spot/instance-action"
REBALANCE = "latest/meta-data/events/recommendations/rebalance"


@dataclass
class Metadata:
    endpoint: str | None  # None: no metadata to read (an on-demand EC2 instance gets neither notice)
    clock: Callable[[], float] = time.monotonic
    interrupted: bool = False
    rebalance: bool = False
    _last: float = field(default=-POLL, repr=False)

    @classmethod
    def for_instance(cls, endpoint: str | None, spot: bool) -> "Metadata":
        return cls(endpoint or (EC2_ENDPOINT if spot else None))

    def poll(self) -> None:
        """Read both notices, at most every POLL seconds; a notice once seen stays."""
        now = self.clock()
        if self.endpoint is None or now - self._last < POLL:
            return
        self._last = now
        token = self._token()
        if token is None:
            return
        self.interrupted = self.interrupted or self._present(INTERRUPTION, token)
        self.rebalance = self.rebalance or self._present(REBALANCE, token)

    def _url(self, path: str) -> str:
        return f"{str(self.endpoint).rstrip('/')}/{path}"

    def _token(self) -> str | None:
        request = urllib.request.Request(
            self._url("latest/api/token"), method="PUT", headers={"X-aws-ec2-metadata-token-ttl-seconds": "60"}
        )
        try:
            with urllib.request.urlopen(request, timeout=1) as answer:
                return str(answer.read().decode())
        except OSError:
            return None

    def _present(self, path: str, token: str) -> bool:
        request = urllib.request.Request(self._url(path), headers={"X-aws-ec2-metadata-token": token})
        try:
            with urllib.request.urlopen(request, timeout=1):
                return True  # 200: the notice is there
        except urllib.error.HTTPError:
            return False  # 404: nothing scheduled
        except OSError:
            return False
