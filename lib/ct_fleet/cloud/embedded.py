"""The embedded cloud: a moto server on loopback, started (or adopted) by the controller,
and local worker "instances" that run the real user-data in runs/<fleet_id>/instances/.

It plays the admin too: the bucket, the worker role and a worker image that an operator
sets up once on AWS are created here on first use.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING

from ..services import session, store
from .base import Cloud
from .moto_server import EMBEDDED_ACCESS_KEY, EMBEDDED_SECRET_KEY, MotoServer

if TYPE_CHECKING:
    from ..protocol import Ec2Config

LOCAL_IMAGE_NAME = "ct-fleet-local-worker"


class EmbeddedCloud(Cloud):
    kind = "embedded"

    def __init__(self, region: str = "us-east-1") -> None:
        super().__init__(region)
        self.server: MotoServer | None = None

    def start(self, run_dir: Path, dotenv: dict[str, str]) -> None:
        """Start a moto server and point this process (and the workers it launches) at it."""
        run_dir.mkdir(parents=True, exist_ok=True)
        # A server left by an earlier controller of this fleet is adopted, with its state.
        self.server = MotoServer(log_path=run_dir / "moto.log").start()
        self.endpoint_url = self.server.endpoint_url
        for key in ("AWS_PROFILE", "AWS_SESSION_TOKEN", "AWS_DEFAULT_PROFILE"):
            os.environ.pop(key, None)
        os.environ.update(
            {
                "AWS_ENDPOINT_URL": self.server.endpoint_url,
                "AWS_ACCESS_KEY_ID": EMBEDDED_ACCESS_KEY,
                "AWS_SECRET_ACCESS_KEY": EMBEDDED_SECRET_KEY,
                "AWS_REGION": self.region,
                "AWS_DEFAULT_REGION": self.region,
            }
        )
        session.reset()

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
            os.environ.pop("AWS_ENDPOINT_URL", None)
