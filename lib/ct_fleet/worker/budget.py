"""The worker's side of the fleet's model budget (protocol/budget.py): its share of each
model, read from S3, and the jobs of each model it runs at once, never over the share.

A job of a budgeted model takes a token (acquire) before its process starts and gives it
back when the process ends; each such job runs with Inspect's max_connections 1, so the
worker's requests to the model in flight are at most its jobs of it. A job whose model has
no free token waits, hidden on the queue, until one frees or the share grows.
"""

from __future__ import annotations

import logging
import threading
from collections import Counter
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from ..protocol.budget import BUDGET_POLL, Budget
from ..services import budget as budget_store

if TYPE_CHECKING:
    from mypy_boto3_s3 import S3Client

log = logging.getLogger("ct_fleet.worker")


class WorkerBudget:
    def __init__(self, doc: Budget, instance_id: str) -> None:
        self.doc = doc
        self.instance_id = instance_id
        self.held: Counter[str] = Counter()
        self.changed = threading.Condition()

    @classmethod
    def load(cls, s3: S3Client, bucket: str, fleet_id: str, instance_id: str) -> "WorkerBudget | None":
        """The fleet's budget at this worker's start; None when the fleet has none."""
        doc = budget_store.get(s3, bucket, fleet_id)
        if doc is None or doc == budget_store.NONE:
            return None
        return cls(doc, instance_id)

    def applies(self, model: str) -> bool:
        return model in self.doc.models

    def share(self, model: str) -> int:
        return self.doc.share(model, self.instance_id) or 0

    def room(self) -> int:
        """Jobs this worker may start now across its budgeted models."""
        with self.changed:
            return sum(max(0, self.share(m) - self.held[m]) for m in self.doc.models)

    def set(self, doc: Budget) -> bool:
        """A document read from S3; True when it is a new one."""
        with self.changed:
            if doc.v == self.doc.v:
                return False
            self.doc = doc
            self.changed.notify_all()
            return True

    def acquire(self, model: str, cancel: threading.Event) -> bool:
        """A token for a job of `model`; False when `cancel` is set first."""
        with self.changed:
            while self.held[model] >= self.share(model):
                if cancel.is_set():
                    return False
                self.changed.wait(1.0)
            self.held[model] += 1
            return True

    def release(self, model: str) -> None:
        with self.changed:
            self.held[model] -= 1
            self.changed.notify_all()

    def report(self) -> dict[str, Any]:
        """For the heartbeat: the version read and the jobs held per model."""
        with self.changed:
            return {"v": self.doc.v, "held": {m: self.held[m] for m in self.doc.models}}

    def over(self) -> bool:
        """Holding more than a share (jobs started before a cut)."""
        with self.changed:
            return any(self.held[m] > self.share(m) for m in self.doc.models)


def follow(
    budget: WorkerBudget,
    read: Callable[[], Budget | None],
    tell: Callable[[], None],
    stopping: threading.Event,
) -> None:
    """Read the document every BUDGET_POLL seconds; `tell` the controller (a heartbeat) what
    is held when a new one arrives, and while over a share, each time that changes."""
    last_said: dict[str, Any] | None = None
    was_over = False
    while not stopping.wait(BUDGET_POLL):
        try:
            doc = read()
        except Exception:
            log.exception("could not read the fleet's model budget")
            continue
        new = doc is not None and doc != budget_store.NONE and budget.set(doc)
        now, over = budget.report(), budget.over()
        if new or ((over or was_over) and now != last_said):
            try:
                tell()
                last_said, was_over = now, over
            except Exception:
                log.exception("could not report the budget held")
