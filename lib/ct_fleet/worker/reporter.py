"""Done reports and message deletes, batched per interval."""

from __future__ import annotations

import logging
import threading
import time
from typing import TYPE_CHECKING

from ..protocol import DoneMessage, encode_reports
from ..services import queues

if TYPE_CHECKING:
    from mypy_boto3_sqs import SQSClient

log = logging.getLogger("ct_fleet.worker")


class Reporter:
    """Done reports and the deletes (or retry back-offs) of their work messages, sent in
    batches at most once per interval: a worker's SQS calls then grow with time, not with
    jobs. A report that comes after a quiet interval goes at once, and so does one added
    `at_once` (the worker's last job in flight: at the end of a run nothing follows it to
    wait for); those that follow within the interval wait and go together.

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
        self.flushed_at = -interval  # monotonic time of the last flush: none yet
        self.wake = threading.Event()
        self.hurry = threading.Event()  # flush without waiting out the interval
        self.closed = threading.Event()
        self.thread = threading.Thread(target=self._run, name="reporter", daemon=True)

    def add(
        self,
        report: DoneMessage,
        *,
        delete: str | None = None,
        backoff: tuple[str, int] | None = None,
        at_once: bool = False,
    ) -> None:
        with self.lock:
            self.reports.append(report)
            if delete:
                self.deletes.append(delete)
            if backoff:
                self.backoffs.setdefault(backoff[1], []).append(backoff[0])
        if at_once:
            self.hurry.set()
        self.wake.set()

    def flush(self) -> None:
        with self.lock:
            reports, deletes, backoffs = self.reports, self.deletes, self.backoffs
            self.reports, self.deletes, self.backoffs = [], [], {}
            self.flushed_at = time.monotonic()
        if reports:
            queues.send_batch(self.sqs, self.done_url, encode_reports(reports))
        if deletes:
            queues.delete_batch(self.sqs, self.work_url, deletes)
        for seconds, handles in backoffs.items():
            queues.change_visibility_batch(self.sqs, self.work_url, handles, seconds)

    def start(self) -> None:
        self.thread.start()

    def close(self) -> None:
        """Stop the sender and send what is left: the reports of the last jobs."""
        self.closed.set()
        self.hurry.set()
        self.wake.set()
        if self.thread.is_alive():
            self.thread.join()
        self.flush()

    def _run(self) -> None:
        while not self.closed.is_set():
            self.wake.wait()
            # An interval after the last flush at the earliest; a hurry (close() too) cuts it short.
            self.hurry.wait(max(0.0, self.flushed_at + self.interval - time.monotonic()))
            if self.closed.is_set():
                return
            self.hurry.clear()
            self.wake.clear()  # before the flush: a report added during it wakes the next one
            try:
                self.flush()
            except Exception:
                log.exception("report flush failed; retrying")
                self.wake.set()
