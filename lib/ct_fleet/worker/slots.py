"""The jobs a worker runs, by their work message's receipt handle: a slot is taken when a
message is received (before it is read, so that the next receive sees it taken), named
once its job is read, and freed when the attempt ends. The job loop, the keeper's
visibility duty and the heartbeats all read it."""

from __future__ import annotations

import math
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from ..protocol import Held
from . import spent

UNREAD = "?"  # a slot taken for a message not read yet


def job_output(work_dir: Path, job_id: str) -> Path:
    """Where an attempt of the job writes its log (and its sidecars beside it)."""
    return work_dir / f"{job_id}.eval"


@dataclass
class InFlight:
    job_id: str
    receipt_handle: str
    received_at: float
    receive_count: int = 1


class Slots:
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.in_flight: dict[str, InFlight] = {}
        self.freed = threading.Event()  # set whenever a slot frees: the loop wakes at once
        self.last_end = -math.inf  # when a job last ended (monotonic): idle time counts from it

    def reserve(self, handle: str) -> None:
        with self.lock:
            self.in_flight[handle] = InFlight(UNREAD, handle, time.time())

    def take(self, handle: str, job_id: str, received_at: float, receive_count: int) -> None:
        with self.lock:
            self.in_flight[handle] = InFlight(job_id, handle, received_at, receive_count)

    def free(self, handle: str, *, ran: bool = True) -> None:
        with self.lock:
            self.in_flight.pop(handle, None)
            if ran:
                self.last_end = time.monotonic()
        self.freed.set()

    def busy(self) -> int:
        with self.lock:
            return len(self.in_flight)

    def handles(self) -> list[str]:
        with self.lock:
            return [f.receipt_handle for f in self.in_flight.values()]

    def holding(self, work_dir: Path) -> dict[str, Held]:
        """The jobs read so far, for the heartbeat: the controller releases them if this
        worker is lost, and counts what each had spent (their outputs are in WORK_DIR)."""
        with self.lock:
            read = [f for f in self.in_flight.values() if f.job_id != UNREAD]
        return {
            f.job_id: Held(f.receipt_handle, f.receive_count, f.received_at, spent.peek(job_output(work_dir, f.job_id)))
            for f in read
        }

    def wait(self, timeout: float) -> None:
        """Until a slot frees, or timeout seconds."""
        self.freed.wait(timeout)
        self.freed.clear()
