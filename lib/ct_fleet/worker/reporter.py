"""Done reports and message deletes, batched per interval."""

from __future__ import annotations

import logging
import threading
from typing import TYPE_CHECKING

from ..protocol import DoneMessage, encode_reports
from ..services import queues

if TYPE_CHECKING:
    from mypy_boto3_sqs import SQSClient

log = logging.getLogger("ct_fleet.worker")


class Reporter:
    """Done reports and the deletes (or retry back-offs) of their work messages, sent in
    batches once per interval: a worker's SQS calls then grow with time, not with jobs.

    Order matters for exactly-once results: a job's result is uploaded before its report
    is queued here, and its work message is deleted only after the report was sent. A
    worker that dies in between leaves the message to be redelivered, and the next
    attempt finds the result and reports a duplicate.
    """

    def __init__(self, sqs: SQSClient, done_url: str, work_url: str, interval: float) -> None:
        self.sqs, self.done_url, self.work_url, self.interval = sqs, done_url, work_url, interval
        self.lock = threading.Lock()
        self.reports: list[DoneMessage] = []
        self.deletes: list[str] = []
        self.backoffs: dict[int, list[str]] = {}
        self.wake = threading.Event()

    def add(self, report: DoneMessage, *, delete: str | None = None, backoff: tuple[str, int] | None = None) -> None:
        with self.lock:
            self.reports.append(report)
            if delete:
                self.deletes.append(delete)
            if backoff:
                self.backoffs.setdefault(backoff[1], []).append(backoff[0])

    def flush(self) -> None:
        with self.lock:
            reports, deletes, backoffs = self.reports, self.deletes, self.backoffs
            self.reports, self.deletes, self.backoffs = [], [], {}
        if reports:
            queues.send_batch(self.sqs, self.done_url, encode_reports(reports))
        if deletes:
            queues.delete_batch(self.sqs, self.work_url, deletes)
        for seconds, handles in backoffs.items():
            queues.change_visibility_batch(self.sqs, self.work_url, handles, seconds)

    def run(self, stop: threading.Event) -> None:
        while not stop.wait(self.interval):
            try:
                self.flush()
            except Exception:
                log.exception("report flush failed; retrying")
