"""`--max-connections` and `--adaptive-connections` on a fleet: the fleet-wide budget of
requests in flight to each model they ask for (controller/fleet/budget.py divides it
among workers), and the one connection each budgeted job runs with."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from .errors import BadInput
from .inspect_options import eval_kwargs

# The options a fleet-wide model budget is made of (controller/fleet/budget.py): on a fleet
# they bound the fleet's requests to each model, and every job runs with one connection.
BUDGET_OPTIONS = ("max_connections", "adaptive_connections")


@dataclass(frozen=True)
class ConnectionBudget:
    """A model's fleet-wide budget of requests in flight: fixed (low == high) or adaptive."""

    low: int
    start: int
    high: int
    decrease: float = 0.8
    scale_up: float = 0.05
    cooldown: float = 15.0


def connection_budget(options: Mapping[str, Any]) -> ConnectionBudget | None:
    """The budget --max-connections / --adaptive-connections ask for, parsed as Inspect
    parses them; as in Inspect, an explicit --max-connections wins over adaptive. None:
    no budget (each job's Inspect keeps its own default)."""
    from inspect_ai.util import AdaptiveConcurrency

    kwargs = eval_kwargs({k: options[k] for k in BUDGET_OPTIONS if options.get(k) is not None})
    fixed = kwargs.get("max_connections")
    if fixed:
        return ConnectionBudget(int(fixed), int(fixed), int(fixed))
    adaptive = kwargs.get("adaptive_connections")
    if adaptive is None or adaptive is False:
        return None
    if adaptive is True:
        adaptive = AdaptiveConcurrency()
    elif isinstance(adaptive, int):
        adaptive = AdaptiveConcurrency(max=adaptive)
    return ConnectionBudget(
        adaptive.min,
        adaptive.start,
        adaptive.max,
        adaptive.decrease_factor,
        adaptive.scale_up_percent,
        adaptive.cooldown_seconds,
    )


def budget_keys(models: Sequence[str], shared: str | None) -> dict[str, str]:
    """Each model's budget: its own, or that of the provider it shares one with (the
    `shared_budget` knob: provider prefixes, comma-separated; the longest that prefixes the
    model wins). A prefix that is the provider of no model of the run is refused."""
    prefixes = [p.strip().rstrip("/") for p in (shared or "").split(",") if p.strip()]
    keys = {}
    for model in models:
        owners = [p for p in prefixes if model.startswith(p + "/")]
        keys[model] = max(owners, key=len) if owners else model
    unused = [p for p in prefixes if p not in keys.values()]
    if unused:
        example = models[0].rsplit("/", 1)[0] if models else "openai-api/vllm"
        raise BadInput(
            f"--ec2-arg shared_budget: {', '.join(unused)} is the provider of no --model of the run "
            f"({', '.join(models)}); name the part of the model names before the last / (e.g. {example})"
        )
    return keys


def check_shared(models: Sequence[str], shared: str | None, options: Mapping[str, Any]) -> None:
    """shared_budget shares a --max-connections / --adaptive-connections budget: refused without one."""
    if shared and connection_budget(options) is None:
        raise BadInput(
            f"--ec2-arg shared_budget={shared} shares a model budget: give --max-connections N or --adaptive-connections"
        )
    budget_keys(models, shared)


def one_connection(options: Mapping[str, Any]) -> dict[str, Any]:
    """A budgeted job's options: one request at a time (its worker holds the fleet's share)."""
    out = {k: v for k, v in options.items() if k not in BUDGET_OPTIONS}
    out["max_connections"] = 1
    return out
