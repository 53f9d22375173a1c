"""Inspect's `on_model_retry` hook in a job process: counts the job's rate-limit retries
and leaves the count beside its output (pressure.py says why)."""

from __future__ import annotations

from pathlib import Path

from inspect_ai.hooks import Hooks, ModelRetry, hooks

from .pressure import sidecar

_count = 0


def _rate_limited(data: ModelRetry) -> bool:
    return data.status_code == 429 or "ratelimit" in (data.exception_type or "").lower()


@hooks(name="ct_fleet_rate_limits", description="counts a fleet job's rate-limit retries for the model budget")
class RateLimitCount(Hooks):
    async def on_model_retry(self, data: ModelRetry) -> None:
        global _count
        if _rate_limited(data):
            _count += 1


def start() -> None:
    """A job begins (a forked job inherits its server's count)."""
    global _count
    _count = 0


def write(out: Path) -> None:
    if _count:
        sidecar(out).write_text(str(_count))
