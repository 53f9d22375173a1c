"""AWS: credentials from the shell or .env, an existing bucket and AMI, real EC2 prices.

When AWS_ENDPOINT_URL points at loopback (tests running --ec2 against a moto server) the
local instance runner executes the instances there (Cloud.attach_runner).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from ..services import instances, session, store
from . import credentials
from .base import Cloud
from .context import CloudContext
from .prices import PRICES, Price, hourly_price, region_spot_price, spot_price

if TYPE_CHECKING:
    from ..protocol import Ec2Config
    from ..services.launching import Pool


class AwsCloud(Cloud):
    kind = "aws"
    bills = True
    answers_before_start = True
    requires_shipped_refs = True

    def __init__(self, region: str = "us-east-1", endpoint_url: str | None = None) -> None:
        super().__init__(region, endpoint_url)
        self._spot_prices: dict[tuple[str, str], float | None] = {}
        self._checked: CloudContext | None = None  # the credentials check_credentials accepted

    def hourly_price(self, cfg: Ec2Config) -> Price:
        prices = [hourly_price(t, cfg.hourly_price) for t in cfg.types]  # every type has one, or BadInput
        preferred = cfg.types[0]
        if cfg.hourly_price is not None:
            return Price(prices[0], "hourly_price")
        if cfg.spot and self._checked:
            # A read before anything exists, with the credentials check_credentials chose.
            ec2 = session.client("ec2", **self._checked.client_args())
            spot = region_spot_price(ec2, preferred)
            if spot is not None:
                return Price(spot[0], f"{preferred} spot now, highest of {spot[1]} AZs")
            return Price(prices[0], f"{preferred} on-demand (spot price not readable: an upper bound)")
        return Price(prices[0], f"{preferred} on-demand, {PRICES.name}")

    def instance_price(self, cfg: Ec2Config, pool: Pool, market: str) -> float:
        if cfg.hourly_price is None and market == "spot":
            spot = self._spot_prices.get((pool.instance_type, pool.zone))
            if spot is None:
                spot = spot_price(self.client("ec2"), pool.instance_type, pool.zone)
                self._spot_prices[pool.instance_type, pool.zone] = spot
            if spot is not None:
                return spot
        return hourly_price(pool.instance_type, cfg.hourly_price)

    def check_credentials(self, dotenv: Mapping[str, str], environ: Mapping[str, str]) -> None:
        env = dict(environ)
        credentials.apply_aws_credentials(dotenv, env)
        credentials.require_credentials(env)
        self._checked = self._context(env)
        self.context = self._checked  # planning's reads (account, capacity) use these credentials

    def start(self, run_dir: Path, dotenv: Mapping[str, str], environ: Mapping[str, str]) -> CloudContext:
        """The credentials the operator docs' rules choose (shell, else .env), as a context."""
        env = dict(environ)
        credentials.apply_aws_credentials(dotenv, env)
        self.context = self._context(env)
        self.endpoint_url = self.context.endpoint_url
        return self.context

    def _context(self, env: Mapping[str, str]) -> CloudContext:
        keys = bool(env.get("AWS_ACCESS_KEY_ID"))
        return CloudContext(
            self.region,
            env.get("AWS_ENDPOINT_URL") or None,
            profile=None if keys else env.get("AWS_PROFILE") or None,
            access_key_id=env.get("AWS_ACCESS_KEY_ID") if keys else None,
            secret_access_key=env.get("AWS_SECRET_ACCESS_KEY") if keys else None,
            session_token=env.get("AWS_SESSION_TOKEN") if keys else None,
        )

    def prepare_account(self, cfg: Ec2Config) -> None:
        store.ensure_bucket(self.client("s3"), cfg.bucket, create=False)
        instances.resolve_ami(self.client("ec2"), self.client("ssm"), cfg)  # a missing AMI stops here

    def console_link(self, fleet_id: str) -> str | None:
        return instances.console_link(self.region, fleet_id)


def connect_aws(region: str, environ: Mapping[str, str], dotenv: Mapping[str, str] | None = None) -> AwsCloud:
    """An AWS cloud for commands that look at real fleets (status, logs, ssh)."""
    cloud = AwsCloud(region)
    cloud.check_credentials(dotenv or {}, environ)
    cloud.start(Path("."), dotenv or {}, environ)
    return cloud
