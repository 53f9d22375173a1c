"""The embedded cloud: a moto server on loopback, started (or adopted) by the controller,
and local worker "instances" that run the real user-data in runs/<fleet_id>/instances/.

It plays the admin too: the bucket, the worker role and a worker image that an operator
sets up once on AWS are created here on first use.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pydantic import PositiveInt, TypeAdapter, ValidationError

from ..error_lines import shown
from ..errors import BadInput
from ..protocol import run_layout
from ..services import store
from .base import Cloud
from .context import CloudContext
from .moto_server import DEFAULT_LEASE_TIMEOUT, MotoServer

if TYPE_CHECKING:
    from ..protocol import Ec2Config

LOCAL_IMAGE_NAME = "ct-fleet-local-worker"
# Seconds the embedded cloud outlives its controller, for a rerun to adopt it (tests shorten it).
IDLE_LIMIT_VAR = "CT_FLEET_EMBEDDED_IDLE"


def _idle_limit(environ: Mapping[str, str]) -> int:
    raw = environ.get(IDLE_LIMIT_VAR, "").strip()
    if not raw:
        return DEFAULT_LEASE_TIMEOUT
    try:
        return TypeAdapter(PositiveInt).validate_python(raw)
    except ValidationError:
        raise BadInput(
            f"{IDLE_LIMIT_VAR}={shown(raw)}: expected a whole number of seconds; unset it for {DEFAULT_LEASE_TIMEOUT}"
        ) from None


class EmbeddedCloud(Cloud):
    kind = "embedded"

    def __init__(self, region: str = "us-east-1") -> None:
        super().__init__(region)
        self.server: MotoServer | None = None

    def instances_run_here(self) -> bool:
        """Always, also before the moto server starts (planning asks)."""
        return True

    def storage_outlives_it(self) -> bool:
        """No: its S3 is the moto server's memory."""
        return False

    def storage_is_new(self) -> bool:
        """A server this controller started (not one an earlier controller left) holds nothing."""
        return self.server is not None and not self.server.adopted

    def check_credentials(self, dotenv: Mapping[str, str], environ: Mapping[str, str]) -> None:
        """No credentials to check (moto takes any); the cloud's one setting is, before it starts."""
        _idle_limit(environ)

    def start(self, run_dir: Path, dotenv: Mapping[str, str], environ: Mapping[str, str]) -> CloudContext:
        """Start a moto server (or adopt the one an earlier controller of this fleet left,
        with its state); its endpoint and keys are the context, nothing else changes."""
        run_dir.mkdir(parents=True, exist_ok=True)
        run_dir.chmod(0o700)  # what is in it leads to the fleet's cloud and its secrets
        self.server = MotoServer(
            log_path=run_dir / run_layout.MOTO_LOG, lease_timeout=_idle_limit(environ), gated=True
        ).start()
        self.endpoint_url = self.server.endpoint_url
        self.context = CloudContext(
            self.region,
            self.server.endpoint_url,
            access_key_id=self.server.access_key,
            secret_access_key=self.server.secret_key,
        )
        return self.context

    def client(self, service: str) -> Any:
        made = service not in self._clients
        client = super().client(service)
        if made:
            client.meta.events.register("needs-retry", self._no_retry_once_stopped)
        return client

    def _no_retry_once_stopped(self, caught_exception: Exception | None = None, **_: Any) -> None:
        """Retries wait out a passing fault, for up to minutes in adaptive mode. A dead server
        on loopback does not pass: its call fails at once, and the run says why it stopped."""
        if caught_exception is not None and self.server is not None and not self.server.running():
            raise caught_exception

    def prepare_account(self, cfg: Ec2Config) -> None:
        """What an admin sets up once on AWS (bucket, worker role, AMI), done here."""
        store.ensure_bucket(self.client("s3"), cfg.bucket, create=True)
        iam = self.client("iam")
        try:
            iam.get_instance_profile(InstanceProfileName=cfg.instance_profile)
        except iam.exceptions.NoSuchEntityException:
            iam.create_role(
                RoleName=cfg.instance_profile, AssumeRolePolicyDocument='{"Version":"2012-10-17","Statement":[]}'
            )
            iam.create_instance_profile(InstanceProfileName=cfg.instance_profile)
            iam.add_role_to_instance_profile(InstanceProfileName=cfg.instance_profile, RoleName=cfg.instance_profile)
        if self.server and self.server.adopted:
            return
        image_id = self.client("ec2").register_image(
            Name=LOCAL_IMAGE_NAME, RootDeviceName="/dev/sda1", Description="local worker"
        )["ImageId"]
        self.client("ssm").put_parameter(Name=cfg.ami_param, Value=image_id, Type="String", Overwrite=True)

    def failure(self) -> str | None:
        if self.server is None or self.server.running():
            return None
        said = self.server.last_words()
        return (
            f"the embedded cloud stopped (its moto server, pid {self.server.pid}, exited{': ' + said if said else ''})"
        )

    def poll(self, live: list[str]) -> None:
        if self.server:
            self.server.renew()
        super().poll(live)

    def close(self, *, leave_running: bool = False) -> None:
        if leave_running:
            return
        super().close()
        if self.server:
            self.server.stop()
