"""The job loop on a worker: receive, keep hidden while running, run, upload, report, delete.

    python -m ct_fleet.worker        (started by worker/run-worker.sh; settings from fleet.env)

Delivery is at least once, so every step is safe to repeat: a job whose result already
exists is reported as a duplicate instead of being run again, the result key is fixed by
the job id and written only if absent (the first of two racing attempts stays), and the
work message is deleted only after the result and the done message
are stored. A job that fails on something worth retrying (infrastructure, model API
pressure) is left on the queue; after max receives SQS moves it to the dead-letter queue.
The worker exits on the end-of-run signal (protocol/stop.py: a stop message on the work
queue, or the fleet-done marker), dropping any redundant attempt still running; when the
queue has stayed empty for idle_timeout seconds with nothing in flight; at once
(releasing its messages) on a spot interruption notice; or, after a rebalance
recommendation, once the jobs it runs have ended (it takes no new ones).
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any

from ..protocol import (
    BadMessage,
    DoneMessage,
    WorkMessage,
    encode_reports,
    queue_names,
)
from ..protocol.budget import BUDGET_REPORT
from ..protocol.stop import is_stop
from ..services import queues, session, stop, store
from . import budget
from .attempt import Attempt, JobAttempts
from .budget import WorkerBudget
from .concurrency import Concurrency
from .duties import Duty, FleetDoneWatch, Heartbeats, Keeper, NoticeWatch, VisibilityKeeper
from .metadata import Metadata
from .reporter import Reporter
from .settings import WorkerSettings
from .slots import Slots, job_output
from .warm import WarmRunner

if TYPE_CHECKING:
    from mypy_boto3_sqs.type_defs import MessageTypeDef

log = logging.getLogger("ct_fleet.worker")

DONE_MARKER = "the fleet-done marker"
# Seconds a spot notice waits for its checkpointed jobs to end (killed at once: well under
# this) before releasing them; the notice gives two minutes in all.
NOTICE_STOP_WAIT = 20.0


class Worker:
    def __init__(self, settings: WorkerSettings) -> None:
        self.settings = settings
        self.sqs = session.client("sqs")
        self.s3 = session.client("s3")
        names = queue_names(settings.fleet_id)
        self.work_url = self.sqs.get_queue_url(QueueName=names["work"])["QueueUrl"]
        self.done_url = self.sqs.get_queue_url(QueueName=names["done"])["QueueUrl"]
        self.concurrency = Concurrency(settings.max_concurrency)
        self.slots = Slots()
        self.malformed = 0  # work messages dropped as not jobs of this fleet
        self.stopping = threading.Event()
        self.draining = threading.Event()  # a rebalance recommendation: no new jobs
        self.metadata = Metadata.for_instance(self.settings.imds_endpoint, self.settings.spot)
        # Set on the end-of-run signal (protocol/stop.py): in-flight jobs are redundant then.
        self.fleet_done = threading.Event()
        self.left_because = ""  # how this worker learned that the fleet is done
        self.worker_id = f"{settings.instance_id}/{os.getpid()}"
        self.reporter = Reporter(self.sqs, self.done_url, self.work_url, settings.report_interval)
        self.warm = WarmRunner(settings.code_root, settings.environ) if settings.warm_runner else None
        self.attempts = JobAttempts(settings, self.s3, self.warm, cancel=self.fleet_done)
        self.budget: WorkerBudget | None = None  # the fleet's model budget, when it has one (run())

    # -- reporting ---------------------------------------------------------------------
    def heartbeat(self, **extra: Any) -> None:
        in_flight, holding = self.slots.busy(), self.slots.holding(self.settings.work_dir)
        queues.send_batch(
            self.sqs,
            self.done_url,
            encode_reports(
                [
                    DoneMessage(
                        type="heartbeat",
                        fleet_id=self.settings.fleet_id,
                        instance_id=self.settings.instance_id,
                        worker_id=self.worker_id,
                        load=os.getloadavg()[0] / (os.cpu_count() or 1),
                        in_flight=in_flight,
                        concurrency=self.concurrency.current,
                        holding=holding,
                        sent_at=time.time(),
                        extra={**extra, BUDGET_REPORT: self.budget.report()} if self.budget else extra,
                    )
                ]
            ),
        )

    def handle(self, msg: MessageTypeDef) -> None:
        received_at = time.time()
        handle = msg["ReceiptHandle"]
        receive_count = int(msg.get("Attributes", {}).get("ApproximateReceiveCount", "1"))
        try:
            job = WorkMessage.from_json(msg["Body"])
            if job.fleet_id != self.settings.fleet_id:
                raise BadMessage(f"a job of fleet {job.fleet_id!r}")
        except BadMessage as exc:
            self._drop_malformed(handle, str(exc))
            return
        self.slots.take(handle, job.job_id, received_at, receive_count)
        out = job_output(self.settings.work_dir, job.job_id)
        try:
            if store.exists(self.s3, self.settings.bucket, job.result_key):
                attempt = Attempt("skipped_duplicate")
            else:
                attempt = self.attempts.run(job, out)
                if self.fleet_done.is_set():
                    # Every job had a final outcome before this attempt ended: drop it.
                    log.info("job %s epoch %s: dropped at the end of the run", job.sample_id, job.epoch)
                    return
                if attempt.error_class == "cancelled" and self.attempts.notice.is_set():
                    log.info("job %s: stopped at the spot notice, to resume from its checkpoint", job.job_id)
                    return
                if attempt.outcome in ("success", "sample_error"):
                    if not store.upload_result(self.s3, self.settings.bucket, job.result_key, out):
                        # Another attempt of this job stored its result while this one ran.
                        attempt = Attempt("skipped_duplicate")
                    self.attempts.drop_checkpoints(job)
            report = attempt.report(self.settings, self.worker_id, job, received_at, receive_count)
            last = self.slots.busy() == 1  # nothing else running, nor just received
            if attempt.outcome == "retry":
                if attempt.error_class == "model_api":
                    self.concurrency.pressure()
                # Back off before the next attempt, on this worker or another.
                backoff = min(self.settings.retry_backoff * receive_count, 300)
                self.reporter.add(report, backoff=(handle, backoff), at_once=last)
            else:
                self.concurrency.success()
                self.reporter.add(report, delete=handle, at_once=last)
            log.info("job %s epoch %s: %s %s", job.sample_id, job.epoch, attempt.outcome, attempt.error_class or "")
        except Exception:
            log.exception("job %s failed in the worker; it will be redelivered", job.job_id)
        finally:
            # Whatever the attempt left is no result once it ends (a retry's log of a
            # GB sample, three times over, filled a worker's disk).
            out.unlink(missing_ok=True)
            # The slot frees now; the report and the delete go out with the reporter's next flush.
            self.slots.free(handle)

    def _drop_malformed(self, handle: str, why: str) -> None:
        """A work message that is not a job of this fleet: deleted (retrying cannot make it
        one), its slot freed at once, and said the first few times."""
        self.malformed += 1
        if self.malformed <= 3:
            log.warning("dropped a work message that is not a job of this fleet: %s", why[:300])
        try:
            queues.delete_batch(self.sqs, self.work_url, [handle])
        except Exception:
            log.exception("could not delete the dropped work message; it will reach the dead-letter queue")
        self.slots.free(handle, ran=False)

    # -- background duties -------------------------------------------------------------
    def _keeper(self) -> Keeper:
        duties: list[Duty] = [
            FleetDoneWatch(lambda: self._marker(stop.is_done, DONE_MARKER), self.end_of_run),
            VisibilityKeeper(self.sqs, self.work_url, self.settings.visibility_timeout, self.slots.handles),
            Heartbeats(self.heartbeat, self.settings.heartbeat_interval),
            NoticeWatch(self.metadata, self._release_all, self._drain),
        ]
        return Keeper(duties, self.stopping)

    # -- the end of the run --------------------------------------------------------------
    def _marker(self, look: Callable[[Any, str, str], bool], what: str) -> bool:
        """Whether a marker of the fleet's is in S3 (protocol/stop.py: the fleet is done, or
        the queue's tail, looked for after an empty receive with nothing in flight); a look
        that fails is said and taken as no marker."""
        try:
            return look(self.s3, self.settings.bucket, self.settings.fleet_id)
        except Exception:
            log.exception("could not look for %s", what)
            return False

    def _pass_on(self, msg: MessageTypeDef) -> None:
        try:
            stop.pass_on(self.sqs, self.work_url, self.settings.fleet_id, msg["ReceiptHandle"])
        except Exception:
            log.exception("could not pass the stop message on; the marker still tells the others")

    def end_of_run(self, how: str) -> None:
        """Every job is final: stop taking jobs, end the redundant ones running, leave."""
        if self.fleet_done.is_set():
            return
        log.info("fleet is done (%s): leaving", how)
        self.left_because = how
        self.fleet_done.set()
        self.stopping.set()
        self.slots.freed.set()

    def _drain(self) -> None:
        """Rebalance recommendation: take no new jobs, finish the running ones, then leave;
        the controller launches a replacement on the heartbeat that says so."""
        if self.draining.is_set():
            return
        log.warning("rebalance recommendation: taking no new jobs; leaving when the running ones end")
        self.draining.set()
        self.slots.freed.set()
        try:
            self.heartbeat(rebalance=True)
        except Exception:
            log.exception("could not report the rebalance recommendation")

    def _release_all(self) -> None:
        """Spot interruption: stop taking jobs, end the checkpointed ones (each keeps its last
        checkpoint for the next attempt), and make every in-flight job visible again at once."""
        if self.stopping.is_set():
            return
        log.warning("spot interruption notice: releasing in-flight jobs")
        self.stopping.set()
        handles = self.slots.handles()  # before the checkpointed jobs end and free their slots
        if not self.attempts.stop_checkpointed(timeout=NOTICE_STOP_WAIT):
            log.warning("a checkpointed job was still running %.0f s after the notice", NOTICE_STOP_WAIT)
        if handles:
            queues.change_visibility_batch(self.sqs, self.work_url, handles, 0)
        try:
            self.heartbeat(spot_notice=True)  # the run report marks the notice on this worker's lanes
        except Exception:
            log.exception("could not report the spot notice")

    # -- main loop ---------------------------------------------------------------------
    def run(self) -> int:
        self.settings.work_dir.mkdir(parents=True, exist_ok=True)
        if self._marker(stop.is_done, DONE_MARKER):  # booted after the end: nothing to do
            self.end_of_run("the fleet-done marker, at start")
            return 0
        s = self.settings
        self.budget = budget.start(
            self.s3, s.bucket, s.fleet_id, s.instance_id, s.work_dir, self.heartbeat, self.stopping
        )
        self.attempts.budgeted = self.budget is not None
        self._keeper().start()
        self.reporter.start()
        idle_since = time.monotonic()
        with ThreadPoolExecutor(max_workers=self.settings.max_concurrency) as pool:
            while not self.stopping.is_set():
                with self.slots.lock:
                    busy = len(self.slots.in_flight)
                    # Idle time counts from the last moment a job ran, not the last receive:
                    # a worker whose slots were all busy has not seen an empty queue. Not from
                    # the last look at a busy slot either: the job may have run a second past it.
                    idle_since = max(idle_since, self.slots.last_end)
                if busy:
                    idle_since = time.monotonic()
                if self.draining.is_set():
                    if not busy:
                        log.info("drained after a rebalance recommendation: exiting")
                        break
                    self.slots.wait(1.0)
                    continue
                free = self.concurrency.current - busy
                if self.budget is not None and free > 0 and not self.budget.any_share():
                    # No share of the model budget (not given yet, or more workers than it
                    # holds): its jobs would only wait. Waiting on the budget is not idle.
                    idle_since = time.monotonic()
                    free = 0
                if free <= 0:
                    # Woken the moment a job finishes, so the next one starts at once.
                    self.slots.wait(1.0)
                    continue
                idle_for = time.monotonic() - idle_since
                if busy == 0 and idle_for >= self.settings.idle_timeout:
                    log.info("queue empty for %.0fs with nothing in flight: exiting", idle_for)
                    break
                wait = 1 if busy else int(max(1, min(20, self.settings.idle_timeout - idle_for)))
                try:
                    messages = queues.receive(self.sqs, self.work_url, max_messages=free, wait=wait)
                except Exception:
                    log.exception("receive failed; retrying")
                    time.sleep(2)
                    continue
                stops = [m for m in messages if is_stop(m["Body"])]
                if stops:
                    self._pass_on(stops[0])
                    self.end_of_run("a stop message")
                    break
                for msg in messages:
                    self.slots.reserve(msg["ReceiptHandle"])  # so that the next receive sees it taken
                    pool.submit(self.handle, msg)
                if messages:
                    idle_since = time.monotonic()
                elif busy == 0 and self._marker(stop.is_tail, "the queue's-tail marker"):
                    log.info("the queue's tail: nothing queued, no retry to come, nothing in flight here: exiting")
                    self.left_because = "the queue's tail"
                    break
        self.stopping.set()
        self.reporter.close()  # the reports of the last jobs
        if self.warm is not None:
            self.warm.close()
        return 0
