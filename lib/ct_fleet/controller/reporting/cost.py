"""What a fleet has cost so far: each instance's seconds times its hourly price (EC2 bills Linux per second)."""

from __future__ import annotations

from collections.abc import Mapping


def cost_so_far(
    launch_times: Mapping[str, float], now: float, prices: Mapping[str, float], ended: Mapping[str, float] | None = None
) -> float:
    """`prices` holds USD per hour of each instance (its type and market); one it lacks costs nothing."""
    ended = ended or {}
    seconds = {i: max(0.0, ended.get(i, now) - start) for i, start in launch_times.items()}
    return sum(s / 3600 * prices.get(i, 0.0) for i, s in seconds.items())
