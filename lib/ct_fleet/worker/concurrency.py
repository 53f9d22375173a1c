"""How many jobs a worker runs at once: additive increase, multiplicative decrease on
rate-limit pressure (model APIs answering 429 or "overloaded")."""

from __future__ import annotations

import threading

from ..protocol import START_CONCURRENCY


class Concurrency:
    """Additive increase, multiplicative decrease on rate-limit pressure."""

    def __init__(self, maximum: int) -> None:
        self.maximum = maximum
        self.current = min(START_CONCURRENCY, maximum)
        self._successes = 0
        self._lock = threading.Lock()

    def pressure(self) -> None:
        with self._lock:
            self.current = max(1, self.current // 2)
            self._successes = 0

    def success(self) -> None:
        with self._lock:
            self._successes += 1
            if self._successes >= self.current and self.current < self.maximum:
                self.current += 1
                self._successes = 0
