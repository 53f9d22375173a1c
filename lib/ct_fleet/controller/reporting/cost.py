"""What a fleet has cost so far: instance-seconds times the hourly price (EC2 bills Linux per second)."""

from __future__ import annotations


def cost_so_far(
    launch_times: dict[str, float], now: float, price: float, ended: dict[str, float] | None = None
) -> float:
    ended = ended or {}
    seconds = sum(max(0.0, ended.get(i, now) - start) for i, start in launch_times.items())
    return seconds / 3600 * price
