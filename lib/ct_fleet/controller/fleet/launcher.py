"""Launching workers as EC2 allows: across pools, around the ones out of capacity, within quota.

Each batch is one instant CreateFleet over every pool (instance type x subnet) not backed
off. The instances that launched are kept; a pool that answered with a capacity error is
backed off (1 min, doubling up to 15) and the shortfall is asked again of the rest at
once. With spot and on_demand_fallback, a shortfall no spot pool can fill goes on-demand.
A quota refusal (vCPUs, spot count) or throttling ends the batch: the pool asks again at
its next look, and the reason stays in `limited` for the live line and the final report.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from botocore.exceptions import ClientError

from ...protocol import Ec2Config
from ...services import instances, launching
from ...services.launching import Launched, Outcome, Pool
from ..planning import Capacity

# EC2's answers per pool that mean "not here, not now": try other pools, later.
CAPACITY = frozenset(
    {
        "InsufficientInstanceCapacity",
        "InsufficientCapacity",
        "InsufficientHostCapacity",
        "InsufficientReservedInstanceCapacity",
        "SpotMaxPriceTooLow",
        "Unsupported",  # the type is not offered in that AZ
        "UnfulfillableCapacity",
    }
)
# Account limits: no pool helps; wait for running workers to leave or the quota to rise.
QUOTA = frozenset({"VcpuLimitExceeded", "MaxSpotInstanceCountExceeded", "InstanceLimitExceeded"})
THROTTLED = frozenset({"RequestLimitExceeded", "Throttling", "ThrottlingException"})
FIRST_BACKOFF = 60.0
MOST_BACKOFF = 900.0
QUOTA_BACKOFF = 300.0


@dataclass
class _Backoff:
    until: float = 0.0
    wait: float = FIRST_BACKOFF


@dataclass
class PoolLauncher:
    """The pools and markets of one fleet, and what EC2 said about each."""

    create: Callable[[list[Pool], int, str], Outcome]  # launching.create_fleet, bound to a template
    pools: list[Pool]
    markets: tuple[str, ...]  # in the order tried: ("spot", "on-demand"), ("spot",) or ("on-demand",)
    clock: Callable[[], float] = time.monotonic
    limited: str | None = None  # why the last launch came up short, in a few words
    fell_back: str | None = None  # why the last launch went to a later market (on-demand)
    _backoff: dict[tuple[Pool, str], _Backoff] = field(default_factory=dict)
    _quota_until: float = 0.0

    def usable(self, market: str) -> list[Pool]:
        now = self.clock()
        return [p for p in self.pools if self._backoff.get((p, market), _Backoff()).until <= now]

    def launch(self, count: int) -> list[Launched]:
        """Up to `count` workers, as many as EC2 gives now; never raises for a refusal EC2
        documents (capacity, quota, throttling): those leave `limited` set instead."""
        got: list[Launched] = []
        short: list[Pool] = []
        self.fell_back = None
        if self.clock() < self._quota_until:
            return got
        for market in self.markets:
            if market != self.markets[0]:
                self.fell_back = f"no {self.markets[0]} capacity in {_pools(short) or 'any pool (backed off)'}"
                short = []
            while len(got) < count:
                pools = self.usable(market)
                if not pools:
                    break
                try:
                    outcome = self.create(pools, count - len(got), market)
                except ClientError as exc:
                    code = exc.response.get("Error", {}).get("Code", "")
                    if code in QUOTA:
                        return self._quota(got, code)
                    if code in THROTTLED:
                        self.limited = f"throttled by EC2 ({code}); asking again at the next look"
                        return got
                    if code in CAPACITY:  # the whole request refused: every pool asked is out
                        outcome = Outcome([], [launching.PoolError(None, code, "")])
                    else:
                        raise
                got += outcome.launched
                for pool in {o.pool for o in outcome.launched}:
                    self._backoff.pop((pool, market), None)
                quota = next((e.code for e in outcome.errors if e.code in QUOTA), None)
                if quota:
                    return self._quota(got, quota)
                named = {e.pool for e in outcome.errors if e.code in CAPACITY}
                failed = set(pools) if None in named else {p for p in named if p is not None}
                for pool in failed:
                    self._back_off(pool, market)
                    short.append(pool)
                if not failed:
                    # Short without a capacity error: asking the same pools again now cannot help.
                    if len(got) < count:
                        why = outcome.errors[0].code if outcome.errors else "and said no error"
                        self.limited = f"EC2 launched {len(got)} of {count} ({why}); asking again at the next look"
                    else:
                        self.limited = None
                    return got
            if len(got) >= count:
                break
        if len(got) >= count:
            self.limited = None
        elif short:
            self.limited = f"no {self.markets[-1]} capacity in {_pools(short)}"
        # else every pool is backed off: the reason given when they were stands
        return got

    def _back_off(self, pool: Pool, market: str) -> None:
        state = self._backoff.setdefault((pool, market), _Backoff())
        state.until = self.clock() + state.wait
        state.wait = min(state.wait * 2, MOST_BACKOFF)

    def _quota(self, got: list[Launched], code: str) -> list[Launched]:
        self._quota_until = self.clock() + QUOTA_BACKOFF
        self.limited = f"at the account's quota ({code}): no more workers until some leave"
        return got


def _pools(pools: list[Pool]) -> str:
    """The pools by type, in a few words: "c6i.4xlarge in 6 AZs, m6i.4xlarge in us-east-1a"."""
    zones: dict[str, list[str]] = {}
    for pool in pools:
        zones.setdefault(pool.instance_type, [])
        if pool.zone not in zones[pool.instance_type]:
            zones[pool.instance_type].append(pool.zone)
    return ", ".join(
        f"{kind} in {', '.join(sorted(z)) if len(z) <= 2 else f'{len(z)} AZs'}" for kind, z in zones.items()
    )


def markets(spot: bool, on_demand_fallback: bool) -> tuple[str, ...]:
    if not spot:
        return ("on-demand",)
    return ("spot", "on-demand") if on_demand_fallback else ("spot",)


def fleet_launcher(
    ec2: Any, ssm: Any, cfg: Ec2Config, capacity: Capacity, fleet_id: str, launched_by: str, user_data: str
) -> PoolLauncher:
    """The fleet's launcher, over a launch template made now (its first launch)."""
    ami, _ = instances.resolve_ami(ec2, ssm, cfg)
    group = instances.ensure_security_group(ec2, cfg.security_group, vpc_id=capacity.vpc)
    template = launching.put_launch_template(
        ec2,
        ami=ami,
        config=cfg,
        fleet_id=fleet_id,
        launched_by=launched_by,
        user_data=user_data,
        security_group_id=group,
    )

    def create(pools: list[Pool], count: int, market: str) -> Outcome:
        return launching.create_fleet(
            ec2,
            template_id=template,
            pools=pools,
            count=count,
            market=market,
            fleet_id=fleet_id,
            launched_by=launched_by,
        )

    return PoolLauncher(create, capacity.pools, markets(cfg.spot, cfg.on_demand_fallback))
