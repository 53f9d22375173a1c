"""One fleet's run: resume, enqueue, launch, track, collect, tear down, merge.

FleetRun drives the worker pool (pool.py) and the result collector (collector.py) from
the job tracker's state. It owns no worker state beyond what the queues, S3 and EC2
report, so a second controller started with the same command adopts the fleet.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from contextlib import nullcontext
from pathlib import Path
from typing import TYPE_CHECKING

from botocore.exceptions import BotoCoreError, ClientError

from ...cloud import Cloud
from ...protocol import FleetEnv, Manifest, run_layout
from ...protocol.user_data import render_user_data
from ...services import queues, stop, store
from ..planning import Capacity, FleetSpec, Job, record_durations
from ..reporting import MODEL_PRICES, Progress, RunResult, dead_jobs, missing_jobs
from . import checkpoint_mirror, liveness, merging, phases
from .collector import ResultCollector, totals
from .context import RunContext
from .interrupts import FleetInterrupted, Terminated
from .lease import S3Lease
from .live_merge import LiveMerge
from .ordering import order_pending
from .pool import WorkerPool, result_fields
from .tracker import JobTracker
from .tracking import Tracking

if TYPE_CHECKING:
    from ... import merge


class FleetRun:
    def __init__(
        self,
        cloud: Cloud,
        spec: FleetSpec,
        run_dir: Path,
        *,
        launched_by: str,
        account: str = "",
        secrets: dict[str, str] | None = None,
        extra_src: list[str] | None = None,
        on_progress: Callable[[Progress], None] = lambda p: None,
        warn: Callable[[str], None] = print,
        leave_running_on_interrupt: Callable[[], bool] = lambda: False,
        capacity: Capacity,
        model_prices: Path = MODEL_PRICES,
    ) -> None:
        self.ctx = RunContext.of(cloud, spec, run_dir, secrets or {}, warn)
        self.cloud, self.spec, self.cfg, self.run_dir = cloud, spec, spec.config, run_dir
        self.secrets, self.warn = self.ctx.secrets, self.ctx.warn
        self.on_progress = on_progress
        self.leave_running_on_interrupt = leave_running_on_interrupt
        self.sqs, self.s3 = self.ctx.client("sqs"), self.ctx.client("s3")
        self.jobs = {job.job_id: job for job in spec.jobs}
        self.state = JobTracker.of(self.jobs)
        self.manifest = spec.manifest(launched_by=launched_by, extra_src=extra_src)
        self.manifest_jobs = {j.job_id: j for j in self.manifest.jobs}
        self.lease = S3Lease(self.s3, self.cfg.bucket, spec.fleet_id)
        self.q: queues.FleetQueues | None = None
        self.pool = WorkerPool(self.ctx, launched_by=launched_by, account=account, capacity=capacity)
        self.results = ResultCollector(
            self.ctx,
            self.state,
            send_again=self._send_again,
            on_heartbeat=self.pool.on_heartbeat,
            model_prices=model_prices,
        )
        self.merge = merging.FleetMerge(self.manifest, run_dir)  # the live merges' and the end's
        self.mirror = checkpoint_mirror.for_fleet(cloud, self.manifest, self.cfg.bucket, run_dir)

    @property
    def queues(self) -> queues.FleetQueues:
        assert self.q is not None, "the fleet's queues exist once the run has enqueued"
        return self.q

    def run(self, code_tarball: Path, fleet_env: FleetEnv) -> RunResult:
        """Drive the fleet to its end, tear it down, merge. Teardown runs on every way out:
        an interrupt or an error stops the workers and deletes their secrets (unless the
        user chose to leave them running), and raises FleetInterrupted on an interrupt."""
        start = time.monotonic()
        # Rendered (and checked: EC2's size limit) before anything is created.
        self.pool.user_data = render_user_data(fleet_env)
        self.lease.acquire()  # before anything is touched: a refusal must leave the other run alone
        try:
            return self._run(start, code_tarball)
        finally:
            self.merge.close()
            self.lease.release(ask=self.cloud.failure() is None)

    def _run(self, start: float, code_tarball: Path) -> RunResult:
        try:
            done, adopted, enqueued, stopped_reason = self._drive(start, code_tarball)
        except BaseException as exc:
            self._stop_early(exc)
            raise
        now = time.time()
        merging.record_span(self.run_dir, now - (time.monotonic() - start), now)
        try:
            if not self.lease.lost:  # else the fleet is another controller's now: hands off
                self.teardown(delete_queues=self.state.complete)
            record_durations(self.run_dir, self.spec.duration_group, self.state.job_seconds)
            restored = self.results.restore_set_aside()
            if restored:
                self.warn(f"{restored} errored sample(s) retried without a new result: their errored results stay")
            phases.reached(phases.MERGE, self.run_dir)
            # The live merges' spool, topped up with the last results.
            merged = self.merge.merge(on_skip=lambda path, why: self.warn(f"merge: left out {path.name}: {why}"))
        except KeyboardInterrupt:
            raise FleetInterrupted(False) from None
        return self._result(start, merged, resumed=len(done), adopted=adopted, enqueued=enqueued, why=stopped_reason)

    def _drive(self, start: float, code_tarball: Path) -> tuple[set[str], bool, int, str | None]:
        """Resume, enqueue, launch, track: (resumed jobs, adopted?, messages sent, stop reason)."""
        run_layout.jobs_dir(self.run_dir).mkdir(parents=True, exist_ok=True)
        previous, known = self._previous_manifest()
        stop.clear(self.s3, self.cfg.bucket, self.spec.fleet_id)  # an earlier end no longer holds
        done = self.results.resume() if known else set()
        store.upload_artifact(self.s3, self.cfg.bucket, self.spec.code_sha, code_tarball)
        pending = order_pending(self.ctx, [job for job_id, job in self.jobs.items() if job_id not in done])
        if (
            self.mirror is not None
            and self.cloud.storage_is_new()
            and (put := self.mirror.restore(j.job_id for j in pending))
        ):
            self.warn(f"{put} checkpoint file(s) kept on disk put back in the new S3 (its last server's were lost)")
        adopted, enqueued = self._queue(pending, previous)
        phases.reached(phases.ENQUEUE, self.run_dir)
        stopped_reason = None
        if pending:
            if not adopted:
                self.pool.launch_first(len(pending))
            try:
                with LiveMerge(self.merge, self.cfg.live_merge_interval), self.mirror or nullcontext():
                    stopped_reason = self.tracking().track(start)
            except (BotoCoreError, ClientError):
                stopped_reason = liveness.cloud_gone(self.cloud)
                if stopped_reason is None:
                    raise
        return done, adopted, enqueued, stopped_reason

    def tracking(self) -> Tracking:
        """The loop the run spends its life in, once its queues exist."""
        return Tracking(
            self.ctx,
            pool=self.pool,
            results=self.results,
            state=self.state,
            lease=self.lease,
            fleet_queues=self.queues,
            on_progress=self.on_progress,
        )

    def _stop_early(self, exc: BaseException) -> None:
        """The run ended before its end (interrupt or error): stop the fleet, or leave it running
        when the user says so after Ctrl-C. Raises FleetInterrupted for an interrupt."""
        interrupted = isinstance(exc, KeyboardInterrupt)
        leave = False
        if interrupted and not isinstance(exc, Terminated) and self.pool.launched:
            try:
                leave = self.leave_running_on_interrupt()
            except BaseException:  # a second Ctrl-C or EOF at the prompt: stop
                leave = False
        if not leave and not self.lease.lost:
            try:
                self.teardown(delete_queues=False, keep_arrived=True)
            except KeyboardInterrupt:
                pass  # held off until teardown was done; the first interrupt is reported
            except Exception as err:
                self.warn(f"teardown failed ({type(err).__name__}: {err}); run `ct-fleet cloud status --clean`")
        if interrupted:
            raise FleetInterrupted(leave) from None

    def _previous_manifest(self) -> tuple[Manifest | None, bool]:
        """(the fleet's manifest in S3, whether an earlier run left one there or on disk).

        A manifest that does not parse must not block every resume of the fleet: results are
        keyed by job id, so they are still found, and the manifest is written anew."""
        known = (self.run_dir / run_layout.MANIFEST).exists()
        try:
            previous = store.get_manifest(self.s3, self.cfg.bucket, self.spec.fleet_id)
        except ValueError as exc:
            self.warn(f"the fleet's manifest in S3 is unreadable ({exc}); resuming from its results and rewriting it")
            return None, True
        return previous, known or previous is not None

    def _queue(self, pending: list[Job], previous: Manifest | None) -> tuple[bool, int]:
        """(adopted, messages sent): adopt a fleet whose workers still run, else enqueue what is left."""
        existing = queues.find_queues(self.sqs, self.spec.fleet_id)
        live = self.pool.live_ids() if existing else []
        self.q = existing or queues.ensure_queues(
            self.sqs,
            self.spec.fleet_id,
            visibility_timeout=self.cfg.visibility_timeout,
            max_receive_count=self.cfg.max_receive_count,
        )
        if existing and live and previous and previous.enqueued:
            self.pool.adopt(live)
            self.warn(f"adopting the running fleet {self.spec.fleet_id}: {len(live)} worker(s) already up")
            return True, 0
        # Work left on an existing queue is sent again rather than purged: a purge may also
        # delete what is sent during the following minute, and a duplicate costs at most a
        # skipped run (the worker finds the result and reports a duplicate).
        self._write_manifest(enqueued=False)
        sent = self._send(pending)
        self._write_manifest(enqueued=True)
        return False, sent

    def _write_manifest(self, enqueued: bool) -> None:
        self.manifest.enqueued = enqueued
        self.manifest.created_at = time.time()
        store.put_manifest(self.s3, self.cfg.bucket, self.manifest)
        (self.run_dir / run_layout.MANIFEST).write_text(self.manifest.to_json())

    def _send_again(self, job_id: str) -> None:
        self._send([self.jobs[job_id]])

    def _send(self, jobs: list[Job]) -> int:
        bodies = [self.manifest.work_message(self.manifest_jobs[job.job_id]).to_json() for job in jobs]
        return queues.send_batch(self.sqs, self.queues.work, bodies)

    # -- the end -----------------------------------------------------------------------
    def teardown(self, *, delete_queues: bool, keep_arrived: bool = False) -> None:
        """Terminate the workers and delete their secrets, and the queues once the work is
        done (the workers are then first told to leave: WorkerPool.teardown). With
        keep_arrived (an early stop), results already in S3 are fetched once workers stop."""
        if self.cloud.failure():
            # Its queues, secrets and instances went with it: only what runs here is left.
            self.cloud.close()
            self.results.close()
            return
        also = [self._keep_arrived] if keep_arrived else []
        also.append(self.results.close)
        if delete_queues and self.q is not None:
            fleet_queues = self.q
            also.insert(0, lambda: queues.delete_queues(self.sqs, fleet_queues))
        self.pool.teardown(wait=delete_queues, announce=self._announce_end, also=also)

    def _keep_arrived(self) -> None:
        kept = self.results.keep_what_arrived()
        if kept:
            self.warn(f"kept {kept} result(s) that arrived after the interrupt; a resume counts them")

    def _announce_end(self) -> None:
        stop.announce(self.s3, self.sqs, self.cfg.bucket, self.spec.fleet_id, self.queues.work)

    def _result(
        self,
        start: float,
        merged: list[merge.MergedTask],
        *,
        resumed: int,
        adopted: bool,
        enqueued: int,
        why: str | None,
    ) -> RunResult:
        return RunResult(
            fleet_id=self.spec.fleet_id,
            run_dir=self.run_dir,
            merged=merged,
            missing=missing_jobs(self.spec.jobs, merged, self.state, fleet_id=self.spec.fleet_id, stopped_reason=why),
            late_successes=sorted(self.state.late_successes),
            attempts=self.state.attempts,
            redeliveries=self.state.redeliveries,
            duplicates=self.state.duplicates,
            jobs=len(self.jobs),
            resumed=resumed,
            retried_errors=self.results.retried_errors,
            workers_launched=len(self.pool.launched),
            **result_fields(self.pool, self.state.job_seconds),
            elapsed=time.monotonic() - start,
            stopped_reason=why,
            dead_report=dead_jobs(
                self.spec.jobs, self.state, fleet_id=self.spec.fleet_id, secrets=self.secrets.values()
            ),
            cost=self.pool.cost_so_far(),
            enqueued=enqueued,
            adopted_workers=len(self.pool.launched) if adopted else 0,
            **totals(self.results),
            unmerged=merging.unmerged(self.manifest, merged),
        ).masked(self.secrets.values())
