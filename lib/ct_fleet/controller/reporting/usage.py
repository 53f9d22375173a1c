"""Tokens and model cost of a fleet so far, from its results' model usage.

Every finished result carries Inspect's per-model usage in its sample's summary (over
every attempt of a resumed sample, where the header's stats count the last one): tokens,
and total_cost where Inspect has pricing for the model. A model Inspect cannot
price is priced from the repo's table (model_prices.json, USD per million tokens); one
in neither is counted in tokens and left out of the cost (and said so).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

MODEL_PRICES = Path(__file__).resolve().parent / "model_prices.json"
TOKEN_FIELDS = ("input_tokens", "output_tokens", "input_tokens_cache_write", "input_tokens_cache_read")
PRICE_FIELDS = {
    "input_tokens": "input",
    "output_tokens": "output",
    "input_tokens_cache_write": "input_cache_write",
    "input_tokens_cache_read": "input_cache_read",
}


def total_tokens(model_usage: dict[str, dict[str, Any]]) -> int:
    """Tokens of a log's model_usage (model -> usage), over every model."""
    return sum(int(u.get("total_tokens") or 0) for u in model_usage.values())


def model_prices(environ: Mapping[str, str]) -> Path:
    """The model price table a run's environment names (CT_FLEET_MODEL_PRICES), else the repo's."""
    return Path(environ.get("CT_FLEET_MODEL_PRICES") or MODEL_PRICES)


def price_table(path: Path = MODEL_PRICES) -> dict[str, dict[str, float]]:
    table: dict[str, dict[str, float]] = json.loads(path.read_text())["usd_per_million_tokens"]
    return table


def _price(model: str, table: dict[str, dict[str, float]]) -> dict[str, float] | None:
    return table.get(model) or table.get(model.split("/", 1)[-1])


def usage_cost(model: str, usage: dict[str, Any], table: dict[str, dict[str, float]]) -> float | None:
    """USD for one model's usage: Inspect's total_cost, else the table; None when neither knows."""
    if usage.get("total_cost") is not None:
        return float(usage["total_cost"])
    price = _price(model, table)
    if price is None:
        return None
    return sum((usage.get(f) or 0) * price.get(p, price.get("input", 0.0)) for f, p in PRICE_FIELDS.items()) / 1e6


@dataclass
class UsageTotals:
    """Tokens and cost over the results seen, each counted once (results may be fetched twice)."""

    tokens: int = 0
    cost: float = 0.0
    unpriced: set[str] = field(default_factory=set)  # models with tokens but no price
    seen: set[str] = field(default_factory=set)
    table: dict[str, dict[str, float]] = field(default_factory=price_table)

    def add(self, key: str, model_usage: dict[str, dict[str, Any]]) -> None:
        if key in self.seen:
            return
        self.seen.add(key)
        for model, usage in model_usage.items():
            self.tokens += int(usage.get("total_tokens") or sum(usage.get(f) or 0 for f in TOKEN_FIELDS))
            cost = usage_cost(model, usage, self.table)
            if cost is None:
                if usage.get("total_tokens"):
                    self.unpriced.add(model)
            else:
                self.cost += cost
