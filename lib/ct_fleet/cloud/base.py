"""The cloud seam: one interface, one implementation per cloud (embedded.py, aws.py).

Whatever differs between the embedded cloud and AWS is a method here; the controller and
the CLI call these and never ask which cloud they have.
"""

from __future__ import annotations

import sys
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import urlparse

from ..services import session
from .context import AWS_IDENTITY_VARS, CloudContext
from .local_instances import LocalInstanceRunner
from .prices import Price

if TYPE_CHECKING:
    from ..protocol import Ec2Config
    from ..services.launching import Pool


class Cloud:
    """Clients for one region, plus the cloud's part in a fleet's life."""

    kind = "cloud"  # the key of its per-cloud knob defaults (protocol/knobs.py)
    # Does a run cost money (cost estimate, confirmation, cost column, max_cost)?
    bills = False
    # Does it answer before start() (the account checks and the capacity survey run in planning)?
    answers_before_start = False
    # Must --policy/--sandbox modules resolve from what ships (repo + --extra-src)?
    requires_shipped_refs = False

    def __init__(self, region: str = "us-east-1", endpoint_url: str | None = None) -> None:
        self.region = region
        self.endpoint_url = endpoint_url
        self.runner: LocalInstanceRunner | None = None
        self.context: CloudContext | None = None  # set by start()
        self._clients: dict[str, Any] = {}

    # -- before anything exists ------------------------------------------------------
    def hourly_price(self, cfg: Ec2Config) -> Price:
        """USD per worker-hour of the preferred type for the estimate; runs before start()."""
        return Price(0.0, "nothing bills")

    def instance_price(self, cfg: Ec2Config, pool: Pool, market: str) -> float:
        """USD per hour of one instance launched into `pool` on `market`."""
        return 0.0

    def check_credentials(self, dotenv: Mapping[str, str], environ: Mapping[str, str]) -> None:
        """Refuse conflicting or missing credentials before anything is created (BadInput)."""

    def start(self, run_dir: Path, dotenv: Mapping[str, str], environ: Mapping[str, str]) -> CloudContext:
        """Connect (and start what the cloud needs); runs after all input is validated.
        `environ` is the environment the run was asked for in (read once, at the CLI)."""
        self.context = CloudContext(self.region, self.endpoint_url)
        return self.context

    # -- the fleet's life ------------------------------------------------------------
    def client(self, service: str) -> Any:
        if service not in self._clients:
            args = (
                self.context.client_args()
                if self.context
                else {"region": self.region, "endpoint_url": self.endpoint_url}
            )
            self._clients[service] = session.client(service, **args)
        return self._clients[service]

    def prepare_account(self, cfg: Ec2Config) -> None:
        """Make sure the account has what a fleet needs (bucket, worker role, AMI)."""

    def console_link(self, fleet_id: str) -> str | None:
        return None

    def storage_outlives_it(self) -> bool:
        """Does what its S3 holds outlive the cloud's own processes (AWS's does)?"""
        return True

    def storage_is_new(self) -> bool:
        """Did this start begin an empty S3, where an earlier run of the fleet left nothing?"""
        return False

    def instances_run_here(self) -> bool:
        """Do launched instances run on this machine (an EC2 endpoint on loopback)?"""
        return bool(self.endpoint_url and urlparse(self.endpoint_url).hostname in ("127.0.0.1", "localhost"))

    def attach_runner(self, instances_dir: Path, environ: Mapping[str, str], withhold: Iterable[str] = ()) -> None:
        """Run launched instances locally when the EC2 endpoint is on this machine.

        They inherit `environ` (the run's) minus the names in `withhold` (the fleet's
        secrets, which reach them through SSM as on EC2), pointed at this cloud."""
        if self.instances_run_here():
            hidden = {*withhold, *AWS_IDENTITY_VARS}
            env = {k: v for k, v in environ.items() if k not in hidden}
            env.update((self.context or CloudContext(self.region, self.endpoint_url)).env())
            # The AWS CLI the scripts call is this venv's (the venv itself: instance_env).
            env["PATH"] = f"{Path(sys.executable).parent}:{env.get('PATH', '')}"
            self.runner = LocalInstanceRunner(self.client("ec2"), instances_dir, env)

    def after_launch(self, instance_ids: list[str]) -> None:
        if self.runner:
            self.runner.start(instance_ids)

    def failure(self) -> str | None:
        """Why this cloud is certainly gone (the process that served it died), else None.
        A gone cloud answers nothing more: the run stops at once, without calling it."""
        return None

    def poll(self, live: list[str]) -> None:
        """Called with the fleet's live instances on every fleet check."""
        if self.runner:
            self.runner.reap(live)

    def close(self, *, leave_running: bool = False) -> None:
        """Stop local instances (and whatever the cloud started), unless left running."""
        if leave_running:
            return
        if self.runner:
            self.runner.stop_all()
