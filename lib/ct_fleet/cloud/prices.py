"""What an EC2 instance costs an hour: a dated table in the repo (prices.json).

AWS's Pricing API is not worth a dependency for a dozen instance types; the table can be
replaced with a file (CT_FLEET_PRICES) or a price given with the hourly_price knob.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from ..errors import BadInput

PRICES = Path(__file__).resolve().parent / "prices.json"


def hourly_price(instance_type: str, override: float | None = None) -> float:
    if override is not None:
        return override
    table = json.loads(Path(os.environ.get("CT_FLEET_PRICES", PRICES)).read_text())
    try:
        return float(table["on_demand"][instance_type])
    except KeyError:
        raise BadInput(
            f"no price for {instance_type} in {PRICES.name}: add it or pass --ec2-arg hourly_price=USD"
        ) from None
