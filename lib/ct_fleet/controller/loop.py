"""The run loop: resume, enqueue, launch, track, scale, time out, collect, merge, tear down.

One Controller drives one fleet. It owns no worker state beyond what the queues, S3 and
EC2 report, so a second controller started with the same command adopts the fleet.
Results are copied to runs/<fleet_id>/jobs/ as they arrive (controller/fleet_merge.py):
that directory is the durable record a local resume reads and the input of the merge.
"""

from __future__ import annotations

import importlib
import json
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from botocore.exceptions import ClientError

from ..cloud import Cloud
from ..evallog import read_header
from ..protocol import (
    DoneMessage,
    FleetEnv,
    Manifest,
    WorkMessage,
    decode_reports,
    log_key,
    mask,
    result_key,
    steplog,
)
from ..protocol.user_data import render_user_data
from ..services import instances, queues, stop, store
from ..services import secrets as fleet_secrets
from . import cost, fleet_merge, interrupts, job_images, liveness, phases, scaling
from .interrupts import Terminated
from .lease import S3Lease
from .plan import Job
from .report import missing_jobs
from .results import LocalResults
from .spec import FleetInterrupted, FleetSpec, Progress, RunResult
from .tracker import JobTracker
from .usage import UsageTotals

if TYPE_CHECKING:
    from .. import merge

DONE_POLL_PAUSE = 1.0
# Bootstrap steps whose failure repeats on every worker (an unimportable setting, a broken
# worker_setup script): the first report stops the fleet instead of replacing workers.
DETERMINISTIC_STEPS = frozenset({"settings-pull", "worker-setup"})
STRAGGLER_GRACE = 30


class Controller:
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
    ) -> None:
        self.cloud = cloud
        self.spec = spec
        self.cfg = spec.config
        self.run_dir = run_dir
        self.results_dir = fleet_merge.jobs_dir(run_dir)
        self.launched_by = launched_by
        self.account = account
        self.secrets = secrets or {}
        self.on_progress = on_progress
        self.leave_running_on_interrupt = leave_running_on_interrupt
        self.warn = warn
        self.sqs = cloud.client("sqs")
        self.s3 = cloud.client("s3")
        self.ec2 = cloud.client("ec2")
        self.ssm = cloud.client("ssm")
        self.jobs = {job.job_id: job for job in spec.jobs}
        self.state = JobTracker.of(self.jobs)
        self.manifest = spec.manifest(launched_by=launched_by, extra_src=extra_src)
        self.manifest_jobs = {j.job_id: j for j in self.manifest.jobs}
        self.launched: list[str] = []
        self.replacements = 0
        self.launch_times: dict[str, float] = {}
        self.end_times: dict[str, float] = {}
        self.last_scale_up = 0.0
        self.depths: dict[str, int] = {}
        self.worker_load: dict[str, tuple[float, float]] = {}  # instance -> (load, at)
        self.usage = UsageTotals()
        self.downloads = ThreadPoolExecutor(max_workers=8)
        self.downloads_in_flight: dict[str, Future[bool]] = {}
        self._merge_preloaded = False
        self.local = LocalResults(self.run_dir)
        self.lease = S3Lease(self.s3, self.cfg.bucket, spec.fleet_id)
        self.bad_results: dict[str, int] = {}  # job id -> unreadable results fetched so far

    # -- set-up ------------------------------------------------------------------------
    def completed_results(self) -> set[str]:
        """Jobs with a result that reads in full: on disk already, or in S3 (fetched now)."""
        local = {p.stem for p in fleet_merge.job_logs(self.run_dir) if p.stem in self.jobs}
        done = {job_id for job_id in local if self.local.verify(job_id) is None}
        for job_id in sorted(local - done):
            self.warn(f"local result of job {job_id} is unreadable; fetching it again")
        in_s3 = store.list_result_job_ids(self.s3, self.cfg.bucket, self.spec.fleet_id) & set(self.jobs)
        futures = {job_id: self.downloads.submit(self._fetch_result, job_id) for job_id in in_s3 - done}
        done |= {job_id for job_id, fut in futures.items() if fut.result()}
        for job_id in done:
            self._count_usage(job_id)
        return done

    def _count_usage(self, job_id: str) -> None:
        header = read_header(fleet_merge.job_log(self.run_dir, job_id)) or {}
        self.usage.add(job_id, (header.get("stats") or {}).get("model_usage") or {})

    def _write_manifest(self, enqueued: bool) -> None:
        self.manifest.enqueued = enqueued
        self.manifest.created_at = time.time()
        store.put_manifest(self.s3, self.cfg.bucket, self.manifest)
        (self.run_dir / "manifest.json").write_text(self.manifest.to_json())

    def work_message(self, job: Job) -> WorkMessage:
        return self.manifest.work_message(self.manifest_jobs[job.job_id])

    # -- the run -----------------------------------------------------------------------
    def run(self, code_tarball: Path, fleet_env: FleetEnv) -> RunResult:
        """Drive the fleet to its end, tear it down, merge. Teardown runs on every way out:
        an interrupt or an error stops the workers and deletes their secrets (unless the
        user chose to leave them running), and raises FleetInterrupted on an interrupt."""
        start = time.monotonic()
        # Rendered (and checked: EC2's size limit) before anything is created.
        user_data = render_user_data(fleet_env)
        self.lease.acquire()  # before anything is touched: a refusal must leave the other run alone
        try:
            return self._run(start, code_tarball, user_data)
        finally:
            self.lease.release()

    def _run(self, start: float, code_tarball: Path, user_data: str) -> RunResult:
        try:
            done, adopted, enqueued, stopped_reason = self._drive(start, code_tarball, user_data)
        except BaseException as exc:
            self._stop_early(exc)
            raise
        try:
            if not self.lease.lost:  # else the fleet is another controller's now: hands off
                self.teardown(delete_queues=self.state.complete)
            self._record_durations()
            phases.reached(phases.MERGE, self.run_dir)
            merged = self._merge()
        except KeyboardInterrupt:
            raise FleetInterrupted(False) from None
        merged_stems = {m.path.stem for m in merged}
        stems = fleet_merge.stems(self.manifest)
        return RunResult(
            fleet_id=self.spec.fleet_id,
            run_dir=self.run_dir,
            merged=merged,
            missing=missing_jobs(
                self.spec.jobs, merged, self.state, fleet_id=self.spec.fleet_id, stopped_reason=stopped_reason
            ),
            late_successes=sorted(self.state.late_successes),
            state=self.state,
            jobs=len(self.jobs),
            resumed=len(done),
            workers_launched=len(self.launched),
            elapsed=time.monotonic() - start,
            stopped_reason=stopped_reason,
            dead_report=self.dead_report(),
            cost=self.cost_so_far(),
            enqueued=enqueued,
            adopted_workers=len(self.launched) if adopted else 0,
            tokens=self.usage.tokens,
            model_cost=self.usage.cost,
            unpriced_models=sorted(self.usage.unpriced),
            unmerged=[t.name for t in self.manifest.tasks if stems[t.key] not in merged_stems],
        )

    def _drive(self, start: float, code_tarball: Path, user_data: str) -> tuple[set[str], bool, int, str | None]:
        """Resume, enqueue, launch, track: (resumed jobs, adopted?, messages sent, stop reason)."""
        self.results_dir.mkdir(parents=True, exist_ok=True)
        previous, known = self._previous_manifest()
        stop.clear(self.s3, self.cfg.bucket, self.spec.fleet_id)  # an earlier end no longer holds
        done = self._resume(previous, known)
        store.upload_artifact(self.s3, self.cfg.bucket, self.spec.code_sha, code_tarball)
        pending = [job for job_id, job in self.jobs.items() if job_id not in done]
        adopted, enqueued = self._queue(pending, previous)
        phases.reached(phases.ENQUEUE, self.run_dir)
        stopped_reason = None
        if pending:
            if not adopted:
                self._launch(self._first_launch_count(len(pending)), user_data)
            stopped_reason = self._track(start, user_data)
        return done, adopted, enqueued, stopped_reason

    def _stop_early(self, exc: BaseException) -> None:
        """The run ended before its end (interrupt or error): stop the fleet, or leave it running
        when the user says so after Ctrl-C. Raises FleetInterrupted for an interrupt."""
        interrupted = isinstance(exc, KeyboardInterrupt)
        leave = False
        if interrupted and not isinstance(exc, Terminated) and self.launched:
            try:
                leave = self.leave_running_on_interrupt()
            except BaseException:  # a second Ctrl-C or EOF at the prompt: stop
                leave = False
        if not leave and not self.lease.lost:
            try:
                self.teardown(delete_queues=False)
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
        known = (self.run_dir / "manifest.json").exists()
        try:
            previous = store.get_manifest(self.s3, self.cfg.bucket, self.spec.fleet_id)
        except ValueError as exc:
            self.warn(f"the fleet's manifest in S3 is unreadable ({exc}); resuming from its results and rewriting it")
            return None, True
        return previous, known or previous is not None

    def _resume(self, previous: Manifest | None, known: bool) -> set[str]:
        """Jobs already done by an earlier run of this fleet (its manifest in S3 or on disk)."""
        if not known:
            return set()
        done = self.completed_results()
        self.state.resumed(done)
        return done

    def _queue(self, pending: list[Job], previous: Manifest | None) -> tuple[bool, int]:
        """(adopted, messages sent): adopt a fleet whose workers still run, else enqueue what is left."""
        existing = queues.find_queues(self.sqs, self.spec.fleet_id)
        live = instances.live_instances(self.ec2, self.spec.fleet_id) if existing else []
        self.q = existing or queues.ensure_queues(
            self.sqs,
            self.spec.fleet_id,
            visibility_timeout=self.cfg.visibility_timeout,
            max_receive_count=self.cfg.max_receive_count,
        )
        if existing and live and previous and previous.enqueued:
            self.launched = [inst["InstanceId"] for inst in live]
            self.warn(f"adopting the running fleet {self.spec.fleet_id}: {len(live)} worker(s) already up")
            return True, 0
        # Work left on an existing queue is sent again rather than purged: a purge may also
        # delete what is sent during the following minute, and a duplicate costs at most a
        # skipped run (the worker finds the result and reports a duplicate).
        self._write_manifest(enqueued=False)
        sent = queues.send_batch(self.sqs, self.q.work, [self.work_message(job).to_json() for job in pending])
        self._write_manifest(enqueued=True)
        return False, sent

    def _merge(self) -> list[merge.MergedTask]:
        return fleet_merge.merge_fleet(
            self.manifest, self.run_dir, on_skip=lambda path, why: self.warn(f"merge: left out {path.name}: {why}")
        )

    def _first_launch_count(self, pending: int) -> int:
        return scaling.first_launch_count(
            pending, max_workers=self.cfg.max_workers, concurrency_per_worker=self.cfg.concurrency_per_worker
        )

    def _launch(self, count: int, user_data: str) -> list[str]:
        ami, _ = instances.resolve_ami(self.ec2, self.ssm, self.cfg)
        group = instances.ensure_security_group(self.ec2, self.cfg.security_group)
        ids = instances.launch(
            self.ec2,
            count=count,
            ami=ami,
            config=self.cfg,
            fleet_id=self.spec.fleet_id,
            launched_by=self.launched_by,
            user_data=user_data,
            security_group_id=group,
        )
        # Known before anything else can fail: teardown terminates these even when EC2's
        # listing does not show them yet.
        self.launched.extend(ids)
        now = time.time()
        self.launch_times.update({i: now for i in ids})
        # Secrets must exist before a worker asks for them (it waits a while if not).
        fleet_secrets.put_for_instances(
            self.ssm, self.spec.fleet_id, ids, self.secrets, account=self.account, region=self.cloud.region
        )
        self.cloud.after_launch(ids)
        return ids

    def cost_so_far(self) -> float:
        return cost.cost_so_far(self.launch_times, time.time(), self.spec.hourly_price, self.end_times)

    # -- tracking ----------------------------------------------------------------------
    def _track(self, start: float, user_data: str) -> str | None:
        last_progress = time.monotonic()
        last_activity = time.monotonic()
        last_fleet_check = 0.0
        warned_stale = False
        live: list[str] = list(self.launched)
        phases.reached(phases.TRACKING, self.run_dir)
        while not (self.state.complete and self._results_intact()):
            if self.state.remaining == 0 and self.downloads_in_flight:
                # Every job is reported: only its result is still coming (the end of the run).
                self._collect_downloads(wait=True)
                self._report(start, live)
                continue
            try:
                messages = queues.receive(self.sqs, self.q.done, wait=1 if self.downloads_in_flight else 5)
            except ClientError as exc:
                if liveness.gone(exc) is None:
                    raise
                gone = liveness.missing(self.sqs, self.s3, self.q, self.cfg.bucket, self.spec.fleet_id)
                return f"{gone or liveness.gone(exc)}: the fleet cannot progress; fleet terminated"
            before = self.state.finished
            for msg in messages:
                for report in decode_reports(msg["Body"]):
                    self._on_done(report)
            if messages:
                queues.delete_batch(self.sqs, self.q.done, [m["ReceiptHandle"] for m in messages])
                last_activity = time.monotonic()
            if len(messages) < queues.BATCH and self.state.remaining:
                # A part-full batch means the queue is drained: let reports pile up a little
                # so that receives and deletes stay batched (calls per second, not per job).
                time.sleep(DONE_POLL_PAUSE)
            self._collect_downloads()
            if self.state.finished > before:
                last_progress = time.monotonic()
                warned_stale = False

            now = time.monotonic()
            if now - last_fleet_check >= (self.cfg.check_interval or 5):
                last_fleet_check = now
                live, stop = self._check_fleet(user_data)
                if stop:
                    return stop
            self._report(start, live)

            quiet = now - last_progress
            if quiet >= self.cfg.stale_after and not warned_stale:
                self.warn(f"no progress for {quiet / 60:.0f} min ({len(live)} workers up); still waiting")
                warned_stale = True
            silent_limit = max(self.cfg.silent_timeout, 1.5 * self.cfg.sample_time_limit)
            if quiet >= silent_limit and now - last_activity >= silent_limit:
                return f"no progress and no word from workers for {quiet:.0f}s: fleet terminated"
            if quiet >= self.cfg.no_sample_timeout:
                return f"no completed sample for {quiet:.0f}s while workers were active: fleet terminated"
        self._collect_downloads(wait=True)
        return None

    def _check_fleet(self, user_data: str) -> tuple[list[str], str | None]:
        """One look at EC2 and the queues: reap, cost, dead letters, replacements, scaling."""
        if self.lease.lost:
            return self.launched, f"another controller took over fleet {self.spec.fleet_id}: this one stops"
        gone = liveness.missing(self.sqs, self.s3, self.q, self.cfg.bucket, self.spec.fleet_id)
        if gone:
            return self.launched, f"{gone}: the fleet cannot progress; fleet terminated"
        live = [inst["InstanceId"] for inst in instances.live_instances(self.ec2, self.spec.fleet_id)]
        self.cloud.poll(live)
        ended = sorted(set(self.launch_times) - set(live) - set(self.end_times))
        for gone in ended:
            self.end_times[gone] = time.time()
        if ended and self.state.remaining:
            why = self._deterministic_boot_failure(ended)
            if why:
                return live, why
        spent = self.cost_so_far() + self.usage.cost
        if self.cfg.max_cost is not None and spent >= self.cfg.max_cost:
            return (
                live,
                f"cost so far ${spent:.2f} (EC2 ${self.cost_so_far():.2f}, model ${self.usage.cost:.2f}) "
                f"reached max_cost ${self.cfg.max_cost:.2f}: fleet terminated",
            )
        self.depths = queues.depths(self.sqs, self.q, roles=("work", "dlq"))
        if self.depths.get("dlq") or self.depths.get("dlq_in_flight"):
            self._drain_dlq()
        return live, self._manage_workers(live, user_data)

    def _on_done(self, msg: DoneMessage) -> None:
        if msg.type == "heartbeat":
            if msg.load is not None:
                self.worker_load[msg.instance_id] = (msg.load, time.monotonic())
            return
        if msg.error:
            msg = replace(msg, error=mask(msg.error, self.secrets.values()))
        job = self.jobs.get(msg.job_id or "")
        if job is not None:
            job_images.record(self.run_dir, msg, job.sample_id, job.epoch)
        fetch = self.state.on_report(msg)
        if msg.outcome == "failed" and msg.job_id in self.jobs:
            # Final without a result (a fatal error, a timeout): say so now, not at the end.
            job = self.jobs[msg.job_id]
            self.warn(
                f"job {job.job_id} ({job.sample_id} epoch {job.epoch}) failed, not retried "
                f"({msg.error_class}): {_last_line(msg.error or '')}"
            )
        if fetch is not None:
            self.downloads_in_flight[fetch] = self.downloads.submit(self._fetch_result, fetch)
            if not self._merge_preloaded:
                # The merge imports inspect_ai (seconds): load it while workers run, once
                # they are past their own start, not after the last result.
                self._merge_preloaded = True
                threading.Thread(target=importlib.import_module, args=("ct_fleet.merge",), daemon=True).start()

    def _fetch_result(self, job_id: str) -> bool:
        """Download the job's result; True when it reads in full (and is now the local copy)."""
        key = result_key(self.spec.fleet_id, job_id)
        ok = store.download_result(self.s3, self.cfg.bucket, key, fleet_merge.job_log(self.run_dir, job_id))
        if ok:
            self.local.remember(job_id)
        return ok

    def _rerun(self, job_id: str, why: str) -> None:
        """A result that does not read in full: drop it and run the job again, a few times at most."""
        self.bad_results[job_id] = self.bad_results.get(job_id, 0) + 1
        self.s3.delete_object(Bucket=self.cfg.bucket, Key=result_key(self.spec.fleet_id, job_id))
        if self.bad_results[job_id] > self.cfg.max_receive_count:
            self.warn(f"result of job {job_id} unreadable {self.bad_results[job_id]} times ({why}); giving up on it")
            self.state.abandon(job_id, "infra", f"result unreadable {self.bad_results[job_id]} times: {why}")
            return
        self.warn(f"result of job {job_id} is unreadable ({why}); running it again")
        queues.send_batch(self.sqs, self.q.work, [self.work_message(self.jobs[job_id]).to_json()])

    def _results_intact(self) -> bool:
        """Before the merge: every finished job's local copy still reads in full. A damaged copy
        is fetched again from S3; when that copy is bad too, the job goes back to the queue."""
        phases.reached(phases.VERIFY, self.run_dir)
        finished = [j for j, outcome in self.state.final.items() if outcome != "failed"]
        intact = True
        for job_id, why in self.local.damaged(finished).items():
            self.warn(f"local result of job {job_id} was damaged ({why}); fetching it again")
            if self._fetch_result(job_id):
                continue
            self.state.unverified(job_id)
            self._rerun(job_id, why)
            intact = False
        return intact

    def _collect_downloads(self, wait: bool = False) -> None:
        for job_id, fut in list(self.downloads_in_flight.items()):
            if not (wait or fut.done()):
                continue
            del self.downloads_in_flight[job_id]
            ok = fut.result()
            self.state.fetched(job_id, ok)
            if ok:
                self._count_usage(job_id)
            if not ok:
                self._rerun(job_id, "the uploaded log does not read in full")

    def _drain_dlq(self) -> None:
        while True:
            messages = queues.receive(self.sqs, self.q.dlq, wait=0)
            if not messages:
                return
            for msg in messages:
                self.state.dead_lettered(WorkMessage.from_json(msg["Body"]).job_id)
            queues.delete_batch(self.sqs, self.q.dlq, [m["ReceiptHandle"] for m in messages])

    def _manage_workers(self, live: list[str], user_data: str) -> str | None:
        """Replace workers that died with work left; add workers while the fleet is CPU-bound."""
        now = time.monotonic()
        waiting = self.depths.get("work", 0)
        decision = scaling.decide(
            remaining=self.state.remaining,
            waiting=waiting,
            live=len(live),
            replacements=self.replacements,
            max_replacements=self.cfg.max_replacements,
            max_workers=self.cfg.max_workers,
            concurrency_per_worker=self.cfg.concurrency_per_worker,
            fresh_loads=[load for load, at in self.worker_load.values() if now - at < 3 * self.cfg.heartbeat_interval],
            cooled=now - self.last_scale_up >= 2 * self.cfg.heartbeat_interval,
        )
        if decision.action == "give_up":
            return self._bootstrap_failure()
        if decision.action == "replace":
            self.replacements += decision.count
            self.warn(
                f"{len(live)} worker(s) up with {waiting} job(s) waiting: launching {decision.count} "
                f"replacement(s) ({self.replacements}/{self.cfg.max_replacements})"
            )
            self._launch(decision.count, user_data)
        elif decision.action == "scale_up":
            self.last_scale_up = now
            self._launch(decision.count, user_data)
        return None

    def _boot_log(self, instance_id: str) -> tuple[str, str] | None:
        key = log_key(self.spec.fleet_id, instance_id)
        try:
            return key, self.s3.get_object(Bucket=self.cfg.bucket, Key=key)["Body"].read().decode(errors="replace")
        except Exception:
            return None

    def _deterministic_boot_failure(self, ended: list[str]) -> str | None:
        """A worker that died in a step every worker will fail the same way (an unimportable
        setting, a broken worker_setup) stops the fleet at once: replacing it cannot help."""
        for instance_id in ended:
            got = self._boot_log(instance_id)
            failure = steplog.first_failure(got[1]) if got else None
            if got and failure and failure.step.name in DETERMINISTIC_STEPS:
                return f"{failure.describe()} on {instance_id} (log: s3://{self.cfg.bucket}/{got[0]})"
        return None

    def _bootstrap_failure(self) -> str:
        """Why workers keep dying: the failed step of the newest bootstrap log that has one."""
        for instance_id in reversed(self.launched):
            got = self._boot_log(instance_id)
            if got is None:
                continue
            failure = steplog.first_failure(got[1])
            if failure:
                why = mask(failure.describe(), self.secrets.values())
                return f"workers keep dying: {why} (log: s3://{self.cfg.bucket}/{got[0]})"
        return f"workers keep dying after {self.replacements} replacement(s); logs under s3://{self.cfg.bucket}/{self.spec.fleet_id}/logs/"

    def _report(self, start: float, live: list[str]) -> None:
        elapsed = time.monotonic() - start
        finished = self.state.finished
        failed = self.state.failed
        rate = finished / elapsed if elapsed > 0 else 0
        remaining = len(self.jobs) - finished
        self.on_progress(
            Progress(
                total=len(self.jobs),
                done=len(self.state.final) - failed,
                failed=failed,
                dead=len(self.state.dead),
                queued=self.depths.get("work", remaining),
                running=self.depths.get("work_in_flight", 0),
                workers=len(live),
                elapsed=elapsed,
                eta=remaining / rate if rate > 0 else None,
                cost=self.cost_so_far() if self.spec.hourly_price else None,
                tokens=self.usage.tokens,
                model_cost=self.usage.cost,
            )
        )

    def dead_report(self) -> list[dict[str, Any]]:
        """Jobs that ended without a result: dead letters, and final failures (fatal, timeout)."""
        ended = dict(self.state.dead)
        for job_id, outcome in self.state.final.items():
            if outcome == "failed" and job_id not in ended:
                ended[job_id] = self.state.last_error.get(job_id, ("failed", ""))
        rows = []
        for job_id, (error_class, error) in sorted(ended.items()):
            job = self.jobs[job_id]
            rows.append(
                {
                    "job_id": job_id,
                    "sample_id": job.sample_id,
                    "epoch": job.epoch,
                    "error_class": error_class,
                    "error": mask(_last_line(error), self.secrets.values()),
                    "dead": job_id in self.state.dead,
                    "rerun": f"bin/ct-fleet run-job {self.spec.fleet_id} {job_id}",
                }
            )
        return rows

    def _record_durations(self) -> None:
        """Seconds per job, read by the cost estimate of later fleets of the same tasks and policy (or model)."""
        if self.state.job_seconds:
            setting, policy = self.spec.duration_group
            data = {"setting": setting, "policy": policy, "seconds": self.state.job_seconds}
            (self.run_dir / "durations.json").write_text(json.dumps(data))

    # -- teardown ----------------------------------------------------------------------
    def teardown(self, *, delete_queues: bool) -> None:
        """Terminate the fleet's workers and delete their secrets (and the queues when the work
        is done). After a complete run the workers first get idle_timeout to exit by
        themselves; an interrupt cuts that wait short, never the termination after it."""
        interrupted: KeyboardInterrupt | None = None
        try:
            live = self._live_ids()
        except Exception as exc:  # the launched ids are still known: terminate those
            self.warn(f"could not list the fleet's instances ({type(exc).__name__}); terminating the ones launched")
            live = []
        if delete_queues and live:
            try:
                live = self._wait_for_workers(live)
            except KeyboardInterrupt as exc:
                interrupted = exc
        with interrupts.shielded(self.warn):
            self._terminate_and_forget(live, delete_queues=delete_queues)
        if interrupted is not None:
            raise interrupted

    def _live_ids(self) -> list[str]:
        return [inst["InstanceId"] for inst in instances.live_instances(self.ec2, self.spec.fleet_id)]

    def _wait_for_workers(self, live: list[str]) -> list[str]:
        """The work is done: tell the workers (protocol/stop.py). They drop what they still
        run, upload their logs and shut down within seconds; stragglers (one still booting,
        say) are terminated after STRAGGLER_GRACE."""
        phases.reached(phases.END_WAIT, self.run_dir)
        try:
            stop.announce(self.s3, self.sqs, self.cfg.bucket, self.spec.fleet_id, self.q.work)
        except Exception as ex:  # without the signal workers still leave after idle_timeout
            self.warn(f"could not signal the end of the run to workers ({ex}); they leave when idle")
        deadline = time.monotonic() + STRAGGLER_GRACE
        while live and time.monotonic() < deadline:
            time.sleep(1)
            found = instances.live_instances(self.ec2, self.spec.fleet_id)
            self.cloud.poll([inst["InstanceId"] for inst in found])
            # An instance shutting down has uploaded its log and is leaving by itself.
            live = [inst["InstanceId"] for inst in found if inst["State"]["Name"] != "shutting-down"]
        return live

    def _terminate_and_forget(self, live: list[str], *, delete_queues: bool) -> None:
        """Every step is tried even if one fails; the first failure is raised at the end."""
        failures: list[Exception] = []
        targets = sorted(set(live) | set(self.launched))
        for step in (
            lambda: instances.terminate(self.ec2, targets),
            lambda: self.cloud.poll([]),
            lambda: fleet_secrets.delete_fleet_secrets(self.ssm, self.spec.fleet_id),
            lambda: queues.delete_queues(self.sqs, self.q) if delete_queues and hasattr(self, "q") else None,
        ):
            try:
                step()
            except Exception as exc:
                failures.append(exc)
        self.downloads.shutdown(wait=True, cancel_futures=True)
        if failures:
            raise failures[0]


def _last_line(text: str) -> str:
    """The line of a job's error text that says what went wrong (its last)."""
    lines = [line.strip() for line in text.strip().splitlines() if line.strip()]
    return lines[-1] if lines else ""
