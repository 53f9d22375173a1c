"""What every part of a running fleet shares: the cloud and its clients, the fleet's spec,
its run directory, the secrets' values, and how to warn (masked: what the run says comes
from workers and results too). FleetRun makes one; the pool, the collector and the
tracking loop take it instead of each its own copy of the same five things."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ...cloud import Cloud
from ...protocol import Ec2Config, mask
from ..planning import FleetSpec


@dataclass(frozen=True)
class RunContext:
    cloud: Cloud
    spec: FleetSpec
    run_dir: Path
    secrets: dict[str, str]
    warn: Callable[[str], None]

    @classmethod
    def of(
        cls, cloud: Cloud, spec: FleetSpec, run_dir: Path, secrets: dict[str, str], warn: Callable[[str], None]
    ) -> RunContext:
        return cls(cloud, spec, run_dir, secrets, lambda text: warn(mask(text, secrets.values())))

    @property
    def cfg(self) -> Ec2Config:
        return self.spec.config

    def client(self, service: str) -> Any:
        """The cloud's client (one per service, shared by every part)."""
        return self.cloud.client(service)
