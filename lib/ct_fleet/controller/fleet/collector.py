"""Results: done reports in, verified results on disk, bad ones run again, dead letters read.

Every report goes to the tracker (fleet/tracker.py), which says whose result to fetch. A
fetched result counts only once it reads in full; it is then the local copy in
runs/<fleet_id>/jobs/, the durable record a local resume reads and the merge's input. A
result that does not read is deleted and its job sent back to the queue, a few times at most.
"""

from __future__ import annotations

import importlib
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from concurrent.futures import wait as wait_all
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ...evallog import Expected, problem, read_header, read_model_usage, sample_error
from ...protocol import DoneMessage, Resumed, WorkMessage, decode_reports, lost_usage, mask, result_key, run_layout
from ...protocol.budget import RATE_LIMITED
from ...services import queues, store
from ..reporting import MODEL_PRICES, UsageTotals, last_line, price_table, record_attempt
from . import job_images, phases
from .context import RunContext
from .local_results import LocalResults, expected_result
from .tracker import JobTracker

# Dropped done-queue messages said in full before they are only counted.
BAD_MESSAGES_SAID = 3

if TYPE_CHECKING:
    from mypy_boto3_sqs.type_defs import MessageTypeDef


class ResultCollector:
    def __init__(
        self,
        ctx: RunContext,
        state: JobTracker,
        *,
        send_again: Callable[[str], None],
        on_heartbeat: Callable[[DoneMessage], bool],
        model_prices: Path = MODEL_PRICES,
    ) -> None:
        spec, run_dir = ctx.spec, ctx.run_dir
        self.sqs, self.s3 = ctx.client("sqs"), ctx.client("s3")
        self.spec = spec
        self.bucket = spec.config.bucket
        self.run_dir = run_dir
        self.state = state
        self.jobs = {job.job_id: job for job in spec.jobs}
        self.tasks = {task.key: task for task in spec.tasks}
        self.secrets = ctx.secrets
        self.warn = ctx.warn
        self.send_again = send_again
        self.on_heartbeat = on_heartbeat
        self.usage = UsageTotals(table=price_table(model_prices))  # the run's table (CT_FLEET_MODEL_PRICES)
        self.local = LocalResults(run_dir, self.expected)
        self.downloads = ThreadPoolExecutor(max_workers=8)
        self.in_flight: dict[str, Future[bool | None]] = {}
        self.bad_results: dict[str, int] = {}  # job id -> unreadable results fetched so far
        self.bad_messages = 0  # done-queue messages dropped as not this fleet's reports
        self.not_its_own: dict[str, str] = {}  # job id -> what its fetched result holds instead
        self.retried_errors = 0  # errored results a rerun set aside to run again
        self._merge_preloaded = False
        self.resumed: dict[str, Resumed] = {}  # job id -> its result's resume from a checkpoint

    def resume(self) -> set[str]:
        """Jobs with a result that reads in full: on disk already, or in S3 (fetched now).
        With retry_errors, those whose sample errored are set aside to run again."""
        self.restore_set_aside()
        local = {p.stem for p in run_layout.job_logs(self.run_dir) if p.stem in self.jobs}
        # Each result is checked to be this job's own (its sample and epoch), not only readable.
        problems = {job_id: self.local.verify(job_id) for job_id in local}
        done = {job_id for job_id, found in problems.items() if found is None}
        for job_id in sorted(local - done):
            self.warn(f"local result of job {job_id} does not count ({problems[job_id]}); fetching it again")
            run_layout.job_log(self.run_dir, job_id).unlink()
        done |= self._fetch_missing(done)
        if self.spec.config.retry_errors:
            errored = {job_id for job_id in done if self._errored(job_id)}
            for job_id in sorted(errored):
                self._set_aside(job_id)
            done -= errored
            self.retried_errors = len(errored)
        for job_id in done:
            self._count_usage(job_id)
        self.state.resumed(done)
        return done

    def take(self, messages: Sequence[MessageTypeDef]) -> None:
        """One receive's done-queue messages (each a batch of reports). What is not a report
        of this fleet is counted and said, never acted on (the queue is deleted as read)."""
        for msg in messages:
            reports, malformed = decode_reports(msg.get("Body", ""))
            for why in malformed:
                self._not_a_report(why)
            for report in reports:
                foreign = self._foreign(report)
                if foreign:
                    self._not_a_report(foreign)
                else:
                    self.on_report(report)

    def _foreign(self, report: DoneMessage) -> str | None:
        """Why a well-formed report is still not one of this fleet's, if it is not."""
        if report.fleet_id != self.spec.fleet_id:
            return f"a report of fleet {report.fleet_id!r}"
        if report.type == "done" and (report.job_id not in self.jobs or report.outcome is None):
            return (
                f"a report of job {report.job_id!r}, not a job of this fleet"
                if report.outcome
                else "a report with no outcome"
            )
        return None

    def _not_a_report(self, why: str) -> None:
        """The first few are said in full, then only counted (the run's end says the count)."""
        self.bad_messages += 1
        if self.bad_messages <= BAD_MESSAGES_SAID:
            self.warn(
                f"a done-queue message that is not a report of this fleet was dropped: {mask(why[:300], self.secrets.values())}"
            )
        elif self.bad_messages == BAD_MESSAGES_SAID + 1:
            self.warn("more done-queue messages that are not reports were dropped; the run's end counts them")

    def on_report(self, msg: DoneMessage) -> None:
        if msg.type == "heartbeat":
            if not self.on_heartbeat(msg):
                self._not_a_report(f"a heartbeat of {msg.instance_id[:100]!r}, no running worker of this fleet")
            return
        if RATE_LIMITED in msg.extra:
            self.on_heartbeat(msg)  # the model budget's pressure (protocol/budget.py)
        if msg.error:
            msg = replace(msg, error=mask(msg.error, self.secrets.values()))
        job = self.jobs.get(msg.job_id or "")
        if job is not None:
            job_images.record(self.run_dir, msg, job.sample_id, job.epoch)
            record_attempt(self.run_dir, msg, job)
        if job is not None and msg.outcome not in ("success", "sample_error") and (lost := lost_usage(msg)):
            # an attempt without a result: what it paid for counts (no log will)
            self.usage.add(f"{job.job_id}@{msg.instance_id}@{msg.received_at}@{msg.receive_count}", lost)
        fetch = self.state.on_report(msg)
        if fetch is not None and (resumed := Resumed.of(msg)) is not None:
            self.resumed[fetch] = resumed
        if msg.outcome == "failed" and job is not None:
            # Final without a result (a fatal error, a timeout): say so now, not at the end.
            self.warn(
                f"job {job.job_id} ({job.sample_id} epoch {job.epoch}) failed, not retried "
                f"({msg.error_class}): {last_line(msg.error or '')}"
            )
        if fetch is not None:
            self.in_flight[fetch] = self.downloads.submit(self.fetch, fetch)
            if not self._merge_preloaded:
                # The merge imports inspect_ai (seconds): load it while workers run, once
                # they are past their own start, not after the last result.
                self._merge_preloaded = True
                threading.Thread(target=importlib.import_module, args=("ct_fleet.merge",), daemon=True).start()

    def fetch(self, job_id: str) -> bool | None:
        """Download the job's result; True when it reads in full (and is now the local copy),
        None when there is none at all (a worker reports a result only once it is stored)."""
        key = result_key(self.spec.fleet_id, job_id)
        digest = store.download_result(self.s3, self.bucket, key, run_layout.job_log(self.run_dir, job_id))
        if digest is None:
            return None if not store.exists(self.s3, self.bucket, key) else False
        # A log that reads is still not this job's result unless it holds the job's sample of its task.
        wrong = problem(run_layout.job_log(self.run_dir, job_id), self.expected(job_id))
        if wrong is not None:
            self.not_its_own[job_id] = f"is not the job's: it {wrong}"
            run_layout.job_log(self.run_dir, job_id).unlink(missing_ok=True)
            return False
        self.local.remember(job_id, digest)
        return True

    def collect(self, wait: bool = False) -> None:
        """Account for the downloads that finished (all of them, with wait)."""
        for job_id, fut in list(self.in_flight.items()):
            if not (wait or fut.done()):
                continue
            del self.in_flight[job_id]
            ok = fut.result()
            self.state.fetched(job_id, bool(ok))
            if ok:
                self._count_usage(job_id)
            elif ok is None:
                # Believed only with its result there: the job runs on, its real report to come.
                self._not_a_report(f"a report of a result for job {job_id} with no result stored")
            else:
                self.rerun(job_id, "the uploaded log does not read in full", self.not_its_own.pop(job_id, None))

    def rerun(self, job_id: str, why: str, said: str | None = None) -> None:
        """A result that does not read in full (or, `said`, is not the job's): drop it and run
        the job again, a few times at most."""
        self.bad_results[job_id] = self.bad_results.get(job_id, 0) + 1
        self.s3.delete_object(Bucket=self.bucket, Key=result_key(self.spec.fleet_id, job_id))
        count = self.bad_results[job_id]
        wrong = said or f"is unreadable ({why})"
        if count > self.spec.config.max_receive_count:
            # What was wrong, not only that it was: a log of another model or task says why.
            self.warn(f"result of job {job_id} {wrong}, {count} times; giving up on it")
            self.state.abandon(job_id, "infra", f"its result {wrong}, {count} times")
            return
        self.warn(f"result of job {job_id} {wrong}; running it again")
        self.send_again(job_id)

    def intact(self) -> bool:
        """Before the merge: every finished job's local copy still reads in full. A damaged copy
        is fetched again from S3; when that copy is bad too, the job goes back to the queue."""
        phases.reached(phases.VERIFY, self.run_dir)
        finished = [j for j, outcome in self.state.final.items() if outcome != "failed"]
        intact = True
        for job_id, why in self.local.damaged(finished).items():
            self.warn(f"local result of job {job_id} was damaged ({why}); fetching it again")
            if self.fetch(job_id):
                continue
            self.state.unverified(job_id)
            self.rerun(job_id, why)
            intact = False
        return intact

    def drain_dlq(self, dlq_url: str) -> None:
        while True:
            messages = queues.receive(self.sqs, dlq_url, wait=0)
            if not messages:
                return
            for msg in messages:
                self.state.dead_lettered(WorkMessage.from_json(msg["Body"]).job_id)
            queues.delete_batch(self.sqs, dlq_url, [m["ReceiptHandle"] for m in messages])

    def expected(self, job_id: str) -> Expected:
        """What the job's result must be (evallog.verify.Expected)."""
        return expected_result(self.spec.model, self.jobs[job_id], self.tasks[self.jobs[job_id].task])

    def _errored(self, job_id: str) -> bool:
        header = read_header(run_layout.job_log(self.run_dir, job_id))
        return header is not None and sample_error(header) is not None

    def _set_aside(self, job_id: str) -> None:
        """Move the errored result out of the merge's and the workers' way (a worker skips a
        job whose result is in S3); it comes back if the retry leaves no result."""
        run_layout.job_log(self.run_dir, job_id).replace(run_layout.set_aside_log(self.run_dir, job_id))
        self.s3.delete_object(Bucket=self.bucket, Key=result_key(self.spec.fleet_id, job_id))

    def restore_set_aside(self) -> int:
        """Errored results set aside whose retry left no result go back: the merged run keeps
        the sample with its error rather than losing it. Returns how many."""
        restored = 0
        for aside in run_layout.jobs_dir(self.run_dir).glob(f"*{run_layout.SET_ASIDE_SUFFIX}"):
            result = run_layout.job_log(self.run_dir, aside.name.removesuffix(run_layout.SET_ASIDE_SUFFIX))
            if result.exists():
                aside.unlink()  # the retry left its own result
            else:
                aside.replace(result)
                restored += 1
        return restored

    def keep_what_arrived(self) -> int:
        """After an early stop, once workers are stopped: fetch every result that reached S3
        but not this machine, so the resume counts it. The results a run was still waiting
        for (at the Ctrl-C prompt, say) would otherwise be lost with the embedded cloud's S3,
        or fetched again on EC2 only by a rerun. Returns how many were fetched."""
        wait_all(list(self.in_flight.values()))  # each writes its result, or fails and is fetched below
        return len(self._fetch_missing({p.stem for p in run_layout.job_logs(self.run_dir)}))

    def _fetch_missing(self, have: set[str]) -> set[str]:
        """Fetch the fleet's results in S3 that are not in `have`; the job ids that now read in full."""
        in_s3 = store.list_result_job_ids(self.s3, self.bucket, self.spec.fleet_id) & set(self.jobs)
        wanted = sorted(in_s3 - have)
        return {job_id for job_id, ok in zip(wanted, self.downloads.map(self.fetch, wanted), strict=True) if ok}

    def close(self) -> None:
        self.downloads.shutdown(wait=True, cancel_futures=True)

    def _count_usage(self, job_id: str) -> None:
        # the sample's usage over every attempt (a resumed one's earlier attempts included,
        # where the log's stats count the last): a rerun counts an earlier run's results so too
        self.usage.add(job_id, read_model_usage(run_layout.job_log(self.run_dir, job_id)))


def totals(results: ResultCollector) -> dict[str, Any]:
    """The run result's model usage, and what resuming from checkpoints saved."""
    return {
        "tokens": results.usage.tokens,
        "model_cost": results.usage.cost,
        "unpriced_models": sorted(results.usage.unpriced),
        "samples_resumed": len(results.resumed),
        "model_calls_saved": sum(r.calls_restored for r in results.resumed.values()),
        "sample_seconds_saved": round(sum(r.seconds_restored for r in results.resumed.values()), 3),
    }
