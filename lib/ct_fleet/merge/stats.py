"""Merged run statistics: usage sums, first start, last completion."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from inspect_ai.model import ModelUsage

from .util import timestamp

_USAGES = ("model_usage", "role_usage")


class StatsTotals:
    """Running totals of input files' stats, folded in one file at a time (pass 1 keeps
    one per task, so the header needs no per-file stats when every file contributes)."""

    def __init__(self) -> None:
        self.sums: dict[str, dict[str, ModelUsage]] = {which: {} for which in _USAGES}
        self.started: str | None = None
        self.finished: str | None = None
        self.history: list[Any] = []
        self.invalidated = False

    @staticmethod
    def usages(stats: dict[str, Any]) -> dict[str, dict[str, ModelUsage]]:
        """A file's usage, validated (raises on junk: call it where junk means "skip the input")."""
        return {which: {m: ModelUsage.model_validate(u) for m, u in stats[which].items()} for which in _USAGES}

    def add(
        self, stats: dict[str, Any], invalidated: bool, usages: dict[str, dict[str, ModelUsage]] | None = None
    ) -> None:
        for which, by_model in (usages or self.usages(stats)).items():
            sums = self.sums[which]
            for model, u in by_model.items():
                sums[model] = sums[model] + u if model in sums else u
        # min/max keep the first of equal timestamps, as min()/max() over the list did
        if stats["started_at"] and (self.started is None or timestamp(stats["started_at"]) < timestamp(self.started)):
            self.started = stats["started_at"]
        if stats["completed_at"] and (
            self.finished is None or timestamp(stats["completed_at"]) > timestamp(self.finished)
        ):
            self.finished = stats["completed_at"]
        self.history.extend(stats["connection_limit_history"])
        self.invalidated = self.invalidated or invalidated

    def result(self) -> dict[str, Any]:
        history = sorted(self.history, key=lambda h: h.get("timestamp", 0) if isinstance(h, dict) else 0)
        return {
            "started_at": self.started or "",
            "completed_at": self.finished or "",
            "model_usage": {k: v.model_dump(exclude_none=True) for k, v in self.sums["model_usage"].items()},
            "role_usage": {k: v.model_dump(exclude_none=True) for k, v in self.sums["role_usage"].items()},
            "connection_limit_history": history,
        }


def merge_stats(files: Iterable[tuple[bool, dict[str, Any]]]) -> tuple[dict[str, Any], bool]:
    """(merged stats, any invalidated) over (invalidated, stats) of files, one in memory at a time."""
    totals = StatsTotals()
    for invalidated, stats in files:
        totals.add(stats, invalidated)
    return totals.result(), totals.invalidated
