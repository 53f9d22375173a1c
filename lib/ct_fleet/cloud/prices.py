"""What an EC2 instance costs an hour: a dated table in the repo (prices.json).

AWS's Pricing API is not worth a dependency for a dozen instance types; a type it lacks,
or a negotiated price, is given with the hourly_price knob.
"""

from __future__ import annotations

import datetime as dt
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from botocore.exceptions import BotoCoreError, ClientError

from ..errors import BadInput

PRICES = Path(__file__).resolve().parent / "prices.json"


@dataclass(frozen=True)
class Price:
    """USD per worker-hour for the estimate, and where it came from (shown with it)."""

    usd: float
    source: str


def hourly_price(instance_type: str, override: float | None = None) -> float:
    if override is not None:
        return override
    table = json.loads(PRICES.read_text())
    try:
        return float(table["on_demand"][instance_type])
    except KeyError:
        raise BadInput(
            f"no price for {instance_type} in {PRICES.name}: add it or pass --ec2-arg hourly_price=USD"
        ) from None


def spot_price(ec2: Any, instance_type: str, zone: str) -> float | None:
    """The latest Linux spot price of a type in an AZ, or None when EC2 will not say (the
    table's on-demand price then stands for it: an upper bound)."""
    try:
        history = ec2.describe_spot_price_history(
            InstanceTypes=[instance_type], AvailabilityZone=zone, ProductDescriptions=["Linux/UNIX"], MaxResults=1
        )["SpotPriceHistory"]
    except (BotoCoreError, ClientError):
        return None
    return float(history[0]["SpotPrice"]) if history else None


def region_spot_price(ec2: Any, instance_type: str) -> tuple[float, int] | None:
    """The highest Linux spot price of a type across the region's AZs now, and how many AZs
    priced it; None when EC2 will not say. The highest, because the fleet may land in any."""
    try:
        history = ec2.describe_spot_price_history(
            InstanceTypes=[instance_type], ProductDescriptions=["Linux/UNIX"], StartTime=dt.datetime.now(dt.UTC)
        )["SpotPriceHistory"]
    except (BotoCoreError, ClientError):
        return None
    latest: dict[str, tuple[Any, float]] = {}
    for entry in history:
        zone, when = entry["AvailabilityZone"], entry["Timestamp"]
        if zone not in latest or when > latest[zone][0]:
            latest[zone] = (when, float(entry["SpotPrice"]))
    if not latest:
        return None
    return max(price for _, price in latest.values()), len(latest)
