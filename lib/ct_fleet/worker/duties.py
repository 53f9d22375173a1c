"""The worker's background duties, each a part of its own, run by one keeper thread when
each is due (as Lithops' standalone keeper runs its checks):

- VisibilityKeeper: running jobs' messages stay hidden, so a live long job is never handed
  out twice;
- Heartbeats: the controller hears that this worker lives, what it runs and what it holds;
- FleetDoneWatch: the fleet-done marker (protocol/stop.py) ends the worker's run;
- NoticeWatch: a spot interruption notice or a rebalance recommendation from the instance's
  metadata.

A duty that fails is logged and tried again when next due: none stops the others.
"""

from __future__ import annotations

import logging
import math
import threading
import time
from collections.abc import Callable
from typing import Any, Protocol

from ..protocol.stop import MARKER_POLL
from ..services import queues
from .metadata import Metadata

log = logging.getLogger("ct_fleet.worker")


class Duty(Protocol):
    period: float  # seconds between runs (0: at every tick)
    wait_first: bool  # the first run one period after the start, not at once

    def run(self) -> None: ...


class VisibilityKeeper:
    def __init__(self, sqs: Any, work_url: str, timeout: int, handles: Callable[[], list[str]]) -> None:
        self.sqs, self.work_url, self.timeout, self.handles = sqs, work_url, timeout, handles
        self.period = max(1.0, timeout / 3)
        self.wait_first = False

    def run(self) -> None:
        due = self.handles()
        if due:
            queues.change_visibility_batch(self.sqs, self.work_url, due, self.timeout)


class Heartbeats:
    def __init__(self, send: Callable[[], None], interval: float) -> None:
        self.send, self.period = send, interval
        self.wait_first = False

    def run(self) -> None:
        self.send()


class FleetDoneWatch:
    def __init__(self, done: Callable[[], bool], on_done: Callable[[str], None]) -> None:
        self.done, self.on_done = done, on_done
        self.period = MARKER_POLL
        self.wait_first = True  # the worker looked once as it started

    def run(self) -> None:
        if self.done():
            self.on_done("the fleet-done marker")


class NoticeWatch:
    def __init__(self, metadata: Metadata, on_interrupt: Callable[[], None], on_rebalance: Callable[[], None]) -> None:
        self.metadata, self.on_interrupt, self.on_rebalance = metadata, on_interrupt, on_rebalance
        self.period = 0.0
        self.wait_first = False

    def run(self) -> None:
        self.metadata.poll()
        if self.metadata.interrupted:
            self.on_interrupt()
        elif self.metadata.rebalance:
            self.on_rebalance()


class Keeper:
    """Runs each duty when it is due, until `stopping` is set."""

    def __init__(self, duties: list[Duty], stopping: threading.Event) -> None:
        self.duties = duties
        self.stopping = stopping
        # Woken often enough for the most frequent duty, and at least every 5 s.
        self.tick = min([5.0, *(d.period for d in duties if d.period > 0)])
        start = time.monotonic()
        self.last = {id(d): start if d.wait_first else -math.inf for d in duties}

    def start(self) -> threading.Thread:
        thread = threading.Thread(target=self._loop, name="keeper", daemon=True)
        thread.start()
        return thread

    def _loop(self) -> None:
        while not self.stopping.wait(self.tick):
            for duty in self.duties:
                now = time.monotonic()
                if now - self.last[id(duty)] < duty.period:
                    continue
                self.last[id(duty)] = now
                try:
                    duty.run()
                except Exception:
                    log.exception("%s failed; trying again when next due", type(duty).__name__)
                if self.stopping.is_set():
                    return
