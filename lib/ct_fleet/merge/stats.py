"""Merged run statistics: usage sums, first start, last completion."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from inspect_ai.model import ModelUsage

from .util import timestamp


def merge_stats(files: Iterable[dict[str, Any]]) -> dict[str, Any]:
    """Running totals over the files' spooled stats (one file's stats in memory at a time)."""
    usage_sums: dict[str, dict[str, ModelUsage]] = {"model_usage": {}, "role_usage": {}}
    started: str | None = None
    finished: str | None = None
    history: list[Any] = []
    for stats in files:
        for which, sums in usage_sums.items():
            for model, usage in stats[which].items():
                u = ModelUsage.model_validate(usage)
                sums[model] = sums[model] + u if model in sums else u
        # min/max keep the first of equal timestamps, as min()/max() over the list did
        if stats["started_at"] and (started is None or timestamp(stats["started_at"]) < timestamp(started)):
            started = stats["started_at"]
        if stats["completed_at"] and (finished is None or timestamp(stats["completed_at"]) > timestamp(finished)):
            finished = stats["completed_at"]
        history.extend(stats["connection_limit_history"])
    history.sort(key=lambda h: h.get("timestamp", 0) if isinstance(h, dict) else 0)
    return {
        "started_at": started or "",
        "completed_at": finished or "",
        "model_usage": {k: v.model_dump(exclude_none=True) for k, v in usage_sums["model_usage"].items()},
        "role_usage": {k: v.model_dump(exclude_none=True) for k, v in usage_sums["role_usage"].items()},
        "connection_limit_history": history,
    }
