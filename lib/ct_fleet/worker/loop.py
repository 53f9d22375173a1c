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
import math
import os
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import psutil

from ..evallog import problem, read_header, sample_error
from ..inspect_options import one_connection
from ..protocol import START_CONCURRENCY, BadMessage, DoneMessage, FleetEnv, WorkMessage, encode_reports, queue_names
from ..protocol.budget import BUDGET_REPORT, RATE_LIMITED
from ..protocol.knobs import Ec2Config
from ..protocol.stop import MARKER_POLL, is_stop
from ..sandbox import cleanup, digests
from ..services import budget as budget_store
from ..services import queues, session, stop, store
from . import failures, pressure
from .budget import TokenServer, WorkerBudget, follow
from .concurrency import Concurrency
from .inspect_job import command_env, extra_root, finish_command_output
from .metadata import Metadata
from .reporter import Reporter
from .supervise import JobProcess, PopenJob, supervise
from .warm import WarmRunner

if TYPE_CHECKING:
    from mypy_boto3_sqs.type_defs import MessageTypeDef

log = logging.getLogger("ct_fleet.worker")

# Seconds past 1.5 x its time limit before a job is killed: Inspect's own limit ends a
# sample cleanly first; this stops a job whose sandbox or event loop hangs.
KILL_GRACE = 60.0


@dataclass
class WorkerSettings:
    fleet_id: str
    bucket: str
    instance_id: str
    code_root: Path
    max_concurrency: int
    idle_timeout: float
    visibility_timeout: int
    heartbeat_interval: float
    retry_backoff: int
    work_dir: Path
    # The worker's environment as its entry read it: its jobs inherit it, and its secrets'
    # values are masked in what it reports.
    environ: Mapping[str, str]
    report_interval: float = 1.0
    imds_endpoint: str | None = None  # None: EC2's own, read only on spot instances
    spot: bool = False
    warm_runner: bool = True
    job_memory_mb: int = 0  # 0: no cap
    kill_grace: float = KILL_GRACE
    knobs: Ec2Config = field(default_factory=Ec2Config)  # every knob as fleet.env gave it

    @classmethod
    def from_env(cls, env: Mapping[str, str], knobs: type[Ec2Config] = Ec2Config) -> "WorkerSettings":
        """fleet.env's contract (protocol.FleetEnv: the knobs that reach workers, with their
        defaults) plus what the instance itself provides: its id, the code root, a work directory."""
        fleet = FleetEnv.from_env(env, knobs)
        k = fleet.knobs
        return cls(
            fleet_id=fleet.FLEET_ID,
            bucket=k.bucket,
            instance_id=env.get("INSTANCE_ID") or socket.gethostname(),
            code_root=Path(env.get("CODE_ROOT", ".")).resolve(),
            max_concurrency=k.concurrency_per_worker or START_CONCURRENCY,
            idle_timeout=float(k.idle_timeout or 0),
            visibility_timeout=k.visibility_timeout,
            heartbeat_interval=float(k.heartbeat_interval),
            retry_backoff=k.retry_backoff,
            report_interval=float(env.get("REPORT_INTERVAL", "1")),
            work_dir=Path(env.get("WORK_DIR") or tempfile.mkdtemp(prefix="ct-worker-")),
            imds_endpoint=env.get("CT_IMDS_ENDPOINT") or None,
            spot=k.spot,
            warm_runner=k.warm_runner,
            job_memory_mb=k.job_memory_mb or default_job_memory_mb(),
            knobs=k,
            environ=dict(env),
        )


def default_job_memory_mb() -> int:
    """Half the machine's memory: a leaking job is killed before the kernel's OOM killer
    picks a victim, which could be the worker itself."""
    return int(psutil.virtual_memory().total / 2**20 / 2)


@dataclass
class InFlight:
    job_id: str
    receipt_handle: str
    received_at: float


@dataclass
class Attempt:
    outcome: str
    error_class: str | None = None
    error: str | None = None
    started_at: float = field(default_factory=time.time)
    extra: dict[str, Any] = field(default_factory=dict)  # for the done report (the images a job ran)


class Worker:
    def __init__(self, settings: WorkerSettings) -> None:
        self.s = settings
        self.sqs = session.client("sqs")
        self.s3 = session.client("s3")
        names = queue_names(settings.fleet_id)
        self.work_url = self.sqs.get_queue_url(QueueName=names["work"])["QueueUrl"]
        self.done_url = self.sqs.get_queue_url(QueueName=names["done"])["QueueUrl"]
        self.concurrency = Concurrency(settings.max_concurrency)
        self.in_flight: dict[str, InFlight] = {}
        self.malformed = 0  # work messages dropped as not jobs of this fleet
        self.lock = threading.Lock()
        self.stopping = threading.Event()
        self.draining = threading.Event()  # a rebalance recommendation: no new jobs
        self.metadata = Metadata.for_instance(self.s.imds_endpoint, self.s.spot)
        # Set on the end-of-run signal (protocol/stop.py): in-flight jobs are redundant then.
        self.fleet_done = threading.Event()
        self.left_because = ""  # how this worker learned that the fleet is done
        self.slot_freed = threading.Event()
        self.last_job_end = -math.inf  # when a slot last freed (monotonic): idle time counts from it
        self.worker_id = f"{settings.instance_id}/{os.getpid()}"
        self._last_extend = 0.0
        self.reporter = Reporter(self.sqs, self.done_url, self.work_url, settings.report_interval)
        self.warm = WarmRunner(settings.code_root, settings.environ) if settings.warm_runner else None
        self.budget: WorkerBudget | None = None  # the fleet's model budget, when it has one (run())

    # -- reporting ---------------------------------------------------------------------
    def _report(self, job: WorkMessage, attempt: Attempt, received_at: float, receive_count: int) -> DoneMessage:
        return DoneMessage(
            type="done",
            fleet_id=self.s.fleet_id,
            instance_id=self.s.instance_id,
            worker_id=self.worker_id,
            job_id=job.job_id,
            outcome=attempt.outcome,  # type: ignore[arg-type]
            result_key=job.result_key,
            receive_count=receive_count,
            received_at=received_at,
            started_at=attempt.started_at,
            finished_at=time.time(),
            error_class=attempt.error_class,
            error=failures.mask(attempt.error or "", failures.secret_values(self.s.environ))[-2000:] or None,
            sent_at=time.time(),
            extra=attempt.extra,
        )

    def heartbeat(self, **extra: Any) -> None:
        with self.lock:
            in_flight = len(self.in_flight)
        queues.send_batch(
            self.sqs,
            self.done_url,
            encode_reports(
                [
                    DoneMessage(
                        type="heartbeat",
                        fleet_id=self.s.fleet_id,
                        instance_id=self.s.instance_id,
                        worker_id=self.worker_id,
                        load=os.getloadavg()[0] / (os.cpu_count() or 1),
                        in_flight=in_flight,
                        concurrency=self.concurrency.current,
                        sent_at=time.time(),
                        extra={**extra, BUDGET_REPORT: self.budget.report()} if self.budget else extra,
                    )
                ]
            ),
        )

    # -- one job -----------------------------------------------------------------------
    def _run_subprocess(self, job: WorkMessage, out: Path) -> Attempt:
        attempt = Attempt(outcome="success")
        # The job's identity is in the environment for command templates and for
        # settings that want it (fault drills in tests key on it; compose files label
        # sandbox containers with it, for _remove_sandboxes).
        job_env = {
            "PYTHONUNBUFFERED": "1",
            "CT_FLEET_ID": job.fleet_id,
            "CT_INSTANCE_ID": self.s.instance_id,
            **command_env(job, out, extra_root(self.s.environ)),
        }
        stderr_path = out.with_suffix(".stderr")
        if self.budget is not None:
            # One request at a time, each with a token of this worker's share (worker/budget.py).
            job = replace(job, inspect_options=one_connection(job.inspect_options))
        proc: JobProcess
        if job.kind != "command" and self.warm is not None:
            proc = self.warm.start(job, out, stderr_path, job_env)
        else:
            if job.kind == "command":
                # A command job needs no Python of its own: run the template directly.
                cmd = ["bash", "-c", job.command or ""]
            else:
                cmd = [sys.executable, "-m", "ct_fleet.worker.runner", job.to_json(), str(out)]
            with open(stderr_path, "wb") as err:
                popen = subprocess.Popen(
                    cmd, cwd=self.s.code_root, env={**self.s.environ, **job_env}, stdout=err, stderr=err
                )
            proc = PopenJob(popen)
        # The kill timeout is the fleet's sample_time_limit (kill_after), set or not; Inspect
        # is told a time limit only when the user set one (time_limit).
        limit = job.kill_after * 1.5 + self.s.kill_grace if job.kill_after else None
        ended = supervise(proc, time_limit=limit, memory_limit_mb=self.s.job_memory_mb or None, cancel=self.fleet_done)
        if ended.killed:
            self._remove_sandboxes(job)
            return Attempt("failed", ended.killed, ended.detail, attempt.started_at)
        code = ended.code
        images = digests.pop_sidecar(out)
        attempt.extra = {"images": images} if images else {}
        limited = pressure.pop(out)
        if limited:
            attempt.extra.update({RATE_LIMITED: limited, "model": job.model})
        secrets = failures.secret_values(self.s.environ)
        output = self._masked_stderr(stderr_path, secrets)[-20000:]
        if code == 0 and job.kind == "command" and out.exists():
            try:
                finish_command_output(job, out)
            except (OSError, ValueError) as exc:
                return Attempt("failed", "fatal", f"command log cannot be relabelled: {exc}", attempt.started_at)
        if code != 0:
            self._remove_sandboxes(job)
            text = failures.tail(output, secrets)
            # A command's exit status is its own, not the runner's (failures.TASK_FAILED).
            cls, why = (failures.classify(text), "") if job.kind == "command" else failures.classify_exit(code, output)
            outcome = "failed" if cls == "fatal" else "retry"
            # The line that says why goes last: the controller shows an error's last line.
            said = f"{text}\n{why}" if why and not text.endswith(why) else text
            return Attempt(outcome, cls, f"runner exit {code}: {said}", attempt.started_at)
        header = read_header(out)
        if header is None:
            return Attempt("retry", "infra", "runner left no finished log", attempt.started_at)
        error = sample_error(header)
        unreadable = problem(out)
        if unreadable is not None:
            # Not a result the controller could count: retried, and dead-lettered if it persists.
            detail = f"; the eval's error: {error}" if error else ""
            return Attempt(
                "retry",
                "infra",
                f"runner left a log that does not read in full: {unreadable}{detail}",
                attempt.started_at,
            )
        if error is not None:
            error = failures.mask(error, secrets)
            if failures.RATE_LIMIT.search(error):
                return Attempt("retry", "model_api", error, attempt.started_at)
            return Attempt("sample_error", "task_error", error, attempt.started_at, attempt.extra)
        return attempt

    def _masked_stderr(self, path: Path, secrets: list[str]) -> str:
        """The job's stderr with the secrets masked, in the file too: it outlives the job on disk."""
        text = path.read_text(errors="replace")
        masked = failures.mask(text, secrets)
        if masked != text:
            path.write_text(masked)
        return masked

    def _remove_sandboxes(self, job: WorkMessage) -> None:
        """A runner that was killed or died cannot tear its Docker sandboxes down: do it."""
        try:
            removed = cleanup.remove_sandboxes(job=job.job_id, instance=self.s.instance_id, fleet=job.fleet_id)
        except Exception:
            log.exception("could not remove the sandboxes of job %s", job.job_id)
            return
        if removed:
            log.info("job %s: removed its leftover sandboxes %s", job.job_id, ", ".join(removed))

    def handle(self, msg: MessageTypeDef) -> None:
        received_at = time.time()
        handle = msg["ReceiptHandle"]
        receive_count = int(msg.get("Attributes", {}).get("ApproximateReceiveCount", "1"))
        try:
            job = WorkMessage.from_json(msg["Body"])
            if job.fleet_id != self.s.fleet_id:
                raise BadMessage(f"a job of fleet {job.fleet_id!r}")
        except BadMessage as exc:
            self._drop_malformed(handle, str(exc))
            return
        with self.lock:
            self.in_flight[handle] = InFlight(job.job_id, handle, received_at)
        try:
            if store.exists(self.s3, self.s.bucket, job.result_key):
                attempt = Attempt("skipped_duplicate")
            else:
                out = self.s.work_dir / f"{job.job_id}.eval"
                attempt = self._run_subprocess(job, out)
                if self.fleet_done.is_set():
                    # Every job had a final outcome before this attempt ended: drop it.
                    log.info("job %s epoch %s: dropped at the end of the run", job.sample_id, job.epoch)
                    return
                if attempt.outcome in ("success", "sample_error"):
                    if not store.upload_result(self.s3, self.s.bucket, job.result_key, out):
                        # Another attempt of this job stored its result while this one ran.
                        attempt = Attempt("skipped_duplicate")
                    out.unlink(missing_ok=True)
            report = self._report(job, attempt, received_at, receive_count)
            with self.lock:
                last = len(self.in_flight) == 1  # nothing else running, nor just received
            if attempt.outcome == "retry":
                if attempt.error_class == "model_api":
                    self.concurrency.pressure()
                # Back off before the next attempt, on this worker or another.
                backoff = min(self.s.retry_backoff * receive_count, 300)
                self.reporter.add(report, backoff=(handle, backoff), at_once=last)
            else:
                self.concurrency.success()
                self.reporter.add(report, delete=handle, at_once=last)
            log.info("job %s epoch %s: %s %s", job.sample_id, job.epoch, attempt.outcome, attempt.error_class or "")
        except Exception:
            log.exception("job %s failed in the worker; it will be redelivered", job.job_id)
        finally:
            # The slot frees now; the report and the delete go out with the reporter's next flush.
            with self.lock:
                self.in_flight.pop(handle, None)
                self.last_job_end = time.monotonic()
            self.slot_freed.set()

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
        with self.lock:
            self.in_flight.pop(handle, None)
        self.slot_freed.set()

    # -- background duties -------------------------------------------------------------
    def _keep_hidden(self) -> None:
        """Extend visibility of running jobs so a live long job is never handed out twice."""
        period = max(1.0, self.s.visibility_timeout / 3)
        last_beat = 0.0
        last_marker_check = time.time()
        while not self.stopping.wait(min(period, 5.0)):
            now = time.time()
            if now - last_marker_check >= MARKER_POLL:
                last_marker_check = now
                if self._marker_says_done():
                    self.end_of_run("the fleet-done marker")
                    return
            with self.lock:
                due = [f.receipt_handle for f in self.in_flight.values()]
            if due and now - self._last_extend >= period:
                try:
                    queues.change_visibility_batch(self.sqs, self.work_url, due, self.s.visibility_timeout)
                except Exception:
                    log.exception("could not extend visibility")
                self._last_extend = now
            if now - last_beat >= self.s.heartbeat_interval:
                try:
                    self.heartbeat()
                except Exception:
                    log.exception("heartbeat failed")
                last_beat = now
            self.metadata.poll()
            if self.metadata.interrupted:
                self._release_all()
            elif self.metadata.rebalance and not self.draining.is_set():
                self._drain()

    # -- the end of the run --------------------------------------------------------------
    def _marker_says_done(self) -> bool:
        try:
            return stop.is_done(self.s3, self.s.bucket, self.s.fleet_id)
        except Exception:
            log.exception("could not look for the fleet-done marker")
            return False

    def _at_tail(self) -> bool:
        """The queue's-tail marker is there (protocol/stop.py): looked for after an empty
        receive with nothing in flight, one HeadObject per idle long poll."""
        try:
            return stop.is_tail(self.s3, self.s.bucket, self.s.fleet_id)
        except Exception:
            log.exception("could not look for the queue's-tail marker")
            return False

    def _pass_on(self, msg: MessageTypeDef) -> None:
        try:
            stop.pass_on(self.sqs, self.work_url, self.s.fleet_id, msg["ReceiptHandle"])
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
        self.slot_freed.set()

    def _drain(self) -> None:
        """Rebalance recommendation: take no new jobs, finish the running ones, then leave;
        the controller launches a replacement on the heartbeat that says so."""
        log.warning("rebalance recommendation: taking no new jobs; leaving when the running ones end")
        self.draining.set()
        self.slot_freed.set()
        try:
            self.heartbeat(rebalance=True)
        except Exception:
            log.exception("could not report the rebalance recommendation")

    def _release_all(self) -> None:
        """Spot interruption: stop taking jobs and make in-flight ones visible again at once."""
        if self.stopping.is_set():
            return
        log.warning("spot interruption notice: releasing in-flight jobs")
        self.stopping.set()
        with self.lock:
            handles = [f.receipt_handle for f in self.in_flight.values()]
        if handles:
            queues.change_visibility_batch(self.sqs, self.work_url, handles, 0)
        try:
            self.heartbeat(spot_notice=True)  # the run report marks the notice on this worker's lanes
        except Exception:
            log.exception("could not report the spot notice")

    def _follow_budget(self) -> None:
        """The fleet's model budget, if it has one: read now, then followed in a thread."""
        try:
            self.budget = WorkerBudget.load(self.s3, self.s.bucket, self.s.fleet_id, self.s.instance_id)
        except Exception:
            log.exception("could not read the fleet's model budget; reading it again in the background")
            self.budget = None
        if self.budget is None:
            return
        budget = self.budget
        tokens = TokenServer(budget, self.s.work_dir, self.stopping)
        threading.Thread(target=tokens.serve, daemon=True).start()
        threading.Thread(
            target=follow,
            args=(
                budget,
                lambda: budget_store.get(self.s3, self.s.bucket, self.s.fleet_id),
                self.heartbeat,
                self.stopping,
            ),
            daemon=True,
        ).start()

    # -- main loop ---------------------------------------------------------------------
    def run(self) -> int:
        self.s.work_dir.mkdir(parents=True, exist_ok=True)
        if self._marker_says_done():  # booted after the end: nothing to do
            self.end_of_run("the fleet-done marker, at start")
            return 0
        if self.warm is not None:
            # inspect_ai's import and the warm-up eval overlap the first receive
            self.warm.prestart()
        self._follow_budget()
        keeper = threading.Thread(target=self._keep_hidden, daemon=True)
        keeper.start()
        self.reporter.start()
        idle_since = time.monotonic()
        with ThreadPoolExecutor(max_workers=self.s.max_concurrency) as pool:
            while not self.stopping.is_set():
                with self.lock:
                    busy = len(self.in_flight)
                    # Idle time counts from the last moment a job ran, not the last receive:
                    # a worker whose slots were all busy has not seen an empty queue. Not from
                    # the last look at a busy slot either: the job may have run a second past it.
                    idle_since = max(idle_since, self.last_job_end)
                if busy:
                    idle_since = time.monotonic()
                if self.draining.is_set():
                    if not busy:
                        log.info("drained after a rebalance recommendation: exiting")
                        break
                    self.slot_freed.wait(1.0)
                    self.slot_freed.clear()
                    continue
                free = self.concurrency.current - busy
                if self.budget is not None and free > 0 and not self.budget.any_share():
                    # No share of the model budget (not given yet, or more workers than it
                    # holds): its jobs would only wait. Waiting on the budget is not idle.
                    idle_since = time.monotonic()
                    free = 0
                if free <= 0:
                    # Woken the moment a job finishes, so the next one starts at once.
                    self.slot_freed.wait(1.0)
                    self.slot_freed.clear()
                    continue
                idle_for = time.monotonic() - idle_since
                if busy == 0 and idle_for >= self.s.idle_timeout:
                    log.info("queue empty for %.0fs with nothing in flight: exiting", idle_for)
                    break
                wait = 1 if busy else int(max(1, min(20, self.s.idle_timeout - idle_for)))
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
                    with self.lock:
                        # Reserve the slot now so the next receive sees it taken.
                        self.in_flight[msg["ReceiptHandle"]] = InFlight("?", msg["ReceiptHandle"], time.time())
                    pool.submit(self.handle, msg)
                if messages:
                    idle_since = time.monotonic()
                elif busy == 0 and self._at_tail():
                    log.info("the queue's tail: nothing queued, no retry to come, nothing in flight here: exiting")
                    self.left_because = "the queue's tail"
                    break
        self.stopping.set()
        self.reporter.close()  # the reports of the last jobs
        if self.warm is not None:
            self.warm.close()
        return 0
