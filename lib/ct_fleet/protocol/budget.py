"""The fleet's model budget: how many model requests each worker may have in flight.

`--max-connections N` bounds a model's concurrent requests across the whole fleet. The
controller owns the total per model and its division among the live workers; it writes
the division to S3 (`{fleet_id}/budget.json`, budget_key) whenever it changes, and each
worker reads it every BUDGET_POLL seconds. Each job runs with Inspect's max_connections 1
and takes a token of its worker's share for each request, so the worker's requests in
flight never exceed its share. Models of a provider named in the fleet's shared_budget
share one budget, keyed by the provider's prefix (`pools`).

The document is written before the first worker launches; a worker that finds none at
its start runs unbudgeted (the fleet has no budget). A worker the division does not name
yet (it is booting) takes no budgeted jobs until it is named.

Workers report, in their heartbeats' `extra`, what they hold (BUDGET_REPORT: the version
they read and their jobs in flight per model), so that the controller grows a share only
once the shares it shrank are given back (a joining worker never pushes the fleet past N),
and, in done reports, the rate-limit retries each job's Inspect made (RATE_LIMITED), which
drive an adaptive total.
"""

from __future__ import annotations

import json

from pydantic import BaseModel, ConfigDict, Field, ValidationError

BUDGET_POLL = 2.0
BUDGET_REPORT = "budget"  # heartbeat extra: {"v": version read, "held": {model: jobs in flight}}
RATE_LIMITED = "rate_limited"  # done report extra: rate-limit retries the job's Inspect made


class ModelBudget(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    total: int = Field(ge=0)
    shares: dict[str, int] = Field(default_factory=dict)  # instance id -> requests in flight at most
    # --adaptive-connections: a worker whose job meets a rate limit takes one request off
    # its share at once, until the controller's next division (worker/budget.py)
    adaptive: bool = False


class Budget(BaseModel):
    """The division in force (version grows with every change)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    v: int = Field(ge=0)
    models: dict[str, ModelBudget] = Field(default_factory=dict)  # budget key -> its division
    # model -> the provider budget it shares with the provider's other models (the fleet's
    # shared_budget); a model not named here is its own budget's key
    pools: dict[str, str] = Field(default_factory=dict)

    def key(self, model: str) -> str:
        return self.pools.get(model, model)

    def share(self, model: str, instance_id: str) -> int | None:
        """The worker's share of a model's budget; None when the model has no budget."""
        budget = self.models.get(self.key(model))
        return None if budget is None else budget.shares.get(instance_id, 0)

    def to_json(self) -> str:
        return self.model_dump_json()

    @classmethod
    def from_json(cls, body: str | bytes) -> "Budget | None":
        """None for a body that is not a budget (a worker then keeps the one it has)."""
        try:
            return cls.model_validate(json.loads(body))
        except (ValueError, ValidationError, RecursionError):
            return None


def budget_key(fleet_id: str) -> str:
    return f"{fleet_id}/budget.json"
