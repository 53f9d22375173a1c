"""The two clouds behind one protocol; the only package that knows which one it is.

- embedded: a moto server on loopback plus local instances that run the real user-data
- aws: the real thing (or a moto server on loopback standing in for it in tests)

`open_cloud` is the one place that chooses; everything else calls the Cloud interface.
"""

from __future__ import annotations

from .aws import AwsCloud, connect_aws
from .base import Cloud
from .context import CloudContext
from .credentials import login_hint
from .embedded import EmbeddedCloud


def open_cloud(*, ec2: bool, region: str) -> Cloud:
    """The cloud a run uses, not yet started (start() runs after input is validated)."""
    return AwsCloud(region) if ec2 else EmbeddedCloud(region)


__all__ = ["AwsCloud", "Cloud", "CloudContext", "EmbeddedCloud", "connect_aws", "login_hint", "open_cloud"]
