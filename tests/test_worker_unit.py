"""The worker's adaptive concurrency: additive increase, multiplicative decrease."""

from __future__ import annotations

from ct_fleet.protocol import START_CONCURRENCY
from ct_fleet.worker.concurrency import Concurrency
from ct_fleet.worker.failures import RATE_LIMIT


def test_starts_at_ten_or_the_cap():
    assert Concurrency(20).current == START_CONCURRENCY == 10
    assert Concurrency(2).current == 2


def test_grows_by_one_per_window_of_successes_up_to_the_cap():
    c = Concurrency(12)
    for _ in range(10):
        c.success()
    assert c.current == 11
    for _ in range(100):
        c.success()
    assert c.current == 12


def test_halves_on_rate_limit_pressure_never_below_one():
    c = Concurrency(20)
    c.pressure()
    assert c.current == 5
    for _ in range(5):
        c.pressure()
    assert c.current == 1


def test_rate_limit_errors_are_recognised():
    for text in ("RateLimitError: 429 Too Many Requests", "anthropic: overloaded_error", "rate limit exceeded"):
        assert RATE_LIMIT.search(text)
    assert not RATE_LIMIT.search("KeyError: 'foo'")
