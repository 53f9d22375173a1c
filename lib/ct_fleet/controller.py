"""The run loop: resume, enqueue, launch, track, scale, time out, collect, merge, tear down.

One Controller drives one fleet. It owns no worker state beyond what the queues, S3 and
EC2 report, so a second controller started with the same command adopts the fleet.
Results are copied to runs/<fleet_id>/results/ as they arrive: that directory is the
durable record a local resume reads and the input of the merge.
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from . import cost, fleet, merge, queues, store
from . import secrets as fleet_secrets
from .cloud import Cloud
from .config import START_CONCURRENCY, Ec2Config
from .evalfile import is_finished
from .plan import Job, TaskSpec
from .protocol import DoneMessage, WorkMessage, decode_reports, log_key, result_key

MANIFEST_SCHEMA = 1
FIRST_LAUNCH_CAP = 24
SCALE_UP_LOAD = 0.85
DONE_POLL_PAUSE = 1.0
STRAGGLER_GRACE = 30


@dataclass
class FleetSpec:
    """Everything that defines a fleet; the manifest is this plus bookkeeping."""

    fleet_id: str
    setting: str
    task_spec: str
    policy: str
    model: str
    epochs: int
    tasks: list[TaskSpec]
    jobs: list[Job]
    code_sha: str
    config: Ec2Config
    command: str | None = None
    sandbox: str | None = None
    hourly_price: float = 0.0  # 0 on the embedded cloud

    def work_message(self, job: Job) -> WorkMessage:
        return WorkMessage(
            fleet_id=self.fleet_id,
            job_id=job.job_id,
            sample_id=job.sample_id,
            epoch=job.epoch,
            task_spec=self.task_spec,
            task_args={"policy": self.policy},
            model=self.model,
            code_sha=self.code_sha,
            result_key=result_key(self.fleet_id, job.job_id),
            time_limit=self.config.sample_time_limit,
            kind="command" if self.command else "inspect",
            command=self.command,
            setting=self.setting,
            sandbox=self.sandbox,
        )


@dataclass
class JobState:
    final: dict[str, str] = field(default_factory=dict)  # job id -> outcome
    dead: dict[str, tuple[str, str]] = field(default_factory=dict)  # job id -> (error class, error)
    last_error: dict[str, tuple[str, str]] = field(default_factory=dict)
    attempts: int = 0
    redeliveries: int = 0
    duplicates: int = 0


@dataclass
class Progress:
    total: int
    done: int
    failed: int
    dead: int
    queued: int
    running: int
    workers: int
    elapsed: float
    eta: float | None
    cost: float | None = None
    message: str = ""


class FleetInterrupted(Exception):
    """Ctrl-C: the fleet was stopped, or left running (leave_running) for a later resume."""

    def __init__(self, leave_running: bool) -> None:
        super().__init__("interrupted")
        self.leave_running = leave_running


@dataclass
class RunResult:
    fleet_id: str
    run_dir: Path
    merged: list[merge.MergedTask]
    state: JobState
    jobs: int
    resumed: int
    workers_launched: int
    elapsed: float
    stopped_reason: str | None = None
    dead_report: list[dict[str, Any]] = field(default_factory=list)
    cost: float = 0.0
    enqueued: int = 0
    adopted_workers: int = 0


def first_launch_count(pending: int, cfg: Ec2Config) -> int:
    """Up to 24 workers, fewer when max_workers or the pending work (at starting concurrency) is smaller."""
    per_worker = min(START_CONCURRENCY, cfg.concurrency_per_worker or START_CONCURRENCY)
    return max(1, min(FIRST_LAUNCH_CAP, cfg.max_workers or 1, math.ceil(pending / per_worker)))


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
        on_progress: Callable[[Progress], None] = lambda p: None,
        warn: Callable[[str], None] = print,
        leave_running_on_interrupt: Callable[[], bool] = lambda: False,
    ) -> None:
        self.cloud = cloud
        self.spec = spec
        self.cfg = spec.config
        self.run_dir = run_dir
        self.results_dir = run_dir / "results"
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
        self.state = JobState()
        self.launched: list[str] = []
        self.replacements = 0
        self.launch_times: dict[str, float] = {}
        self.end_times: dict[str, float] = {}
        self.job_seconds: list[float] = []
        self.last_scale_up = 0.0
        self.depths: dict[str, int] = {}
        self.worker_load: dict[str, tuple[float, float]] = {}  # instance -> (load, at)
        self.downloads = ThreadPoolExecutor(max_workers=8)
        self.pending_downloads: dict[str, Future[bool]] = {}

    # -- set-up ------------------------------------------------------------------------
    def completed_results(self) -> set[str]:
        """Jobs with a readable, finished result: on disk already, or in S3 (fetched now)."""
        done = {p.stem for p in self.results_dir.glob("*.eval") if p.stem in self.jobs and is_finished(p)}
        in_s3 = store.list_result_job_ids(self.s3, self.cfg.bucket, self.spec.fleet_id) & set(self.jobs)
        futures = {
            job_id: self.downloads.submit(self._fetch_result, job_id) for job_id in in_s3 - done
        }
        done |= {job_id for job_id, fut in futures.items() if fut.result()}
        return done

    def manifest(self, enqueued: bool) -> dict[str, Any]:
        cfg = {k: v for k, v in asdict(self.cfg).items() if v is not None}
        return {
            "schema": MANIFEST_SCHEMA,
            "fleet_id": self.spec.fleet_id,
            "created_at": time.time(),
            "setting": self.spec.setting,
            "task_spec": self.spec.task_spec,
            "policy": self.spec.policy,
            "model": self.spec.model,
            "epochs": self.spec.epochs,
            "code_sha": self.spec.code_sha,
            "command": self.spec.command,
            "sandbox": self.spec.sandbox,
            "launched_by": self.launched_by,
            "config": cfg,
            "tasks": [asdict(t) for t in self.spec.tasks],
            "jobs": [{"job_id": j.job_id, "sample_id": j.sample_id, "epoch": j.epoch} for j in self.spec.jobs],
            "enqueued": enqueued,
        }

    def _write_manifest(self, enqueued: bool) -> None:
        manifest = self.manifest(enqueued)
        store.put_manifest(self.s3, self.cfg.bucket, self.spec.fleet_id, manifest)
        (self.run_dir / "manifest.json").write_text(json.dumps(manifest, indent=1))

    # -- the run -----------------------------------------------------------------------
    def run(self, code_tarball: Path, user_data_settings: dict[str, str]) -> RunResult:
        start = time.monotonic()
        self.results_dir.mkdir(parents=True, exist_ok=True)
        previous = store.get_manifest(self.s3, self.cfg.bucket, self.spec.fleet_id)
        done = self._resume(previous)
        store.upload_artifact(self.s3, self.cfg.bucket, self.spec.code_sha, code_tarball)
        pending = [job for job_id, job in self.jobs.items() if job_id not in done]
        adopted, enqueued = self._queue(pending, previous)

        stopped_reason = None
        if pending:
            if not adopted:
                self._launch(self._first_launch_count(len(pending)), user_data_settings)
            try:
                stopped_reason = self._track(start, user_data_settings)
            except KeyboardInterrupt:
                leave = self.leave_running_on_interrupt()
                if not leave:
                    self.teardown(delete_queues=False)
                raise FleetInterrupted(leave) from None
        complete = len(self.state.final) + len(self.state.dead) >= len(self.jobs)
        self.teardown(delete_queues=complete)
        self._record_durations()
        return RunResult(
            fleet_id=self.spec.fleet_id,
            run_dir=self.run_dir,
            merged=self._merge(),
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
        )

    def _resume(self, previous: dict[str, Any] | None) -> set[str]:
        """Jobs already done by an earlier run of this fleet (its manifest in S3 or on disk)."""
        if previous is None and not (self.run_dir / "manifest.json").exists():
            return set()
        done = self.completed_results()
        for job_id in done:
            self.state.final[job_id] = "success"
        return done

    def _queue(self, pending: list[Job], previous: dict[str, Any] | None) -> tuple[bool, int]:
        """(adopted, messages sent): adopt a fleet whose workers still run, else enqueue what is left."""
        existing = queues.find_queues(self.sqs, self.spec.fleet_id)
        live = fleet.live_instances(self.ec2, self.spec.fleet_id) if existing else []
        self.q = existing or queues.ensure_queues(
            self.sqs,
            self.spec.fleet_id,
            visibility_timeout=self.cfg.visibility_timeout,
            max_receive_count=self.cfg.max_receive_count,
        )
        if existing and live and previous and previous.get("enqueued"):
            self.launched = [inst["InstanceId"] for inst in live]
            self.warn(f"adopting the running fleet {self.spec.fleet_id}: {len(live)} worker(s) already up")
            return True, 0
        # Work left on an existing queue is sent again rather than purged: a purge may also
        # delete what is sent during the following minute, and a duplicate costs at most a
        # skipped run (the worker finds the result and reports a duplicate).
        self._write_manifest(enqueued=False)
        sent = queues.send_batch(self.sqs, self.q.work, [self.spec.work_message(job).to_json() for job in pending])
        self._write_manifest(enqueued=True)
        return False, sent

    def _merge(self) -> list[merge.MergedTask]:
        results = sorted(self.results_dir.glob("*.eval"))
        if not results:
            return []
        return merge.merge_eval_logs(
            results,
            self.run_dir / "merged",
            sample_ids=list(dict.fromkeys(j.sample_id for j in self.spec.jobs)),
            epochs=self.spec.epochs,
        )

    def _first_launch_count(self, pending: int) -> int:
        return first_launch_count(pending, self.cfg)

    def _launch(self, count: int, settings: dict[str, str]) -> list[str]:
        ami, _ = fleet.resolve_ami(self.ec2, self.ssm, self.cfg)
        group = fleet.ensure_security_group(self.ec2, self.cfg.security_group)
        ids = fleet.launch(
            self.ec2,
            count=count,
            ami=ami,
            config=self.cfg,
            fleet_id=self.spec.fleet_id,
            launched_by=self.launched_by,
            user_data=fleet.render_user_data(settings),
            security_group_id=group,
        )
        # Secrets must exist before a worker asks for them (it waits a while if not).
        fleet_secrets.put_for_instances(
            self.ssm, self.spec.fleet_id, ids, self.secrets, account=self.account, region=self.cloud.region
        )
        self.cloud.after_launch(ids)
        self.launched.extend(ids)
        now = time.time()
        self.launch_times.update({i: now for i in ids})
        return ids

    def cost_so_far(self) -> float:
        return cost.cost_so_far(self.launch_times, time.time(), self.spec.hourly_price, self.end_times)

    # -- tracking ----------------------------------------------------------------------
    def _track(self, start: float, settings: dict[str, str]) -> str | None:
        last_progress = time.monotonic()
        last_activity = time.monotonic()
        last_fleet_check = 0.0
        warned_stale = False
        live: list[str] = list(self.launched)
        while len(self.state.final) + len(self.state.dead) < len(self.jobs):
            messages = queues.receive(self.sqs, self.q.done, wait=1 if self.pending_downloads else 5)
            if len(messages) < queues.BATCH:
                # A part-full batch means the queue is drained: let reports pile up a little
                # so that receives and deletes stay batched (calls per second, not per job).
                time.sleep(DONE_POLL_PAUSE)
            before = len(self.state.final)
            for msg in messages:
                for report in decode_reports(msg["Body"]):
                    self._on_done(report)
            if messages:
                queues.delete_batch(self.sqs, self.q.done, [m["ReceiptHandle"] for m in messages])
                last_activity = time.monotonic()
            self._collect_downloads()
            if len(self.state.final) > before:
                last_progress = time.monotonic()
                warned_stale = False

            now = time.monotonic()
            if now - last_fleet_check >= (self.cfg.check_interval or 5):
                last_fleet_check = now
                live, stop = self._check_fleet(settings)
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

    def _check_fleet(self, settings: dict[str, str]) -> tuple[list[str], str | None]:
        """One look at EC2 and the queues: reap, cost, dead letters, replacements, scaling."""
        live = [inst["InstanceId"] for inst in fleet.live_instances(self.ec2, self.spec.fleet_id)]
        self.cloud.poll(live)
        for gone in set(self.launch_times) - set(live) - set(self.end_times):
            self.end_times[gone] = time.time()
        if self.cfg.max_cost is not None and self.cost_so_far() >= self.cfg.max_cost:
            return live, f"cost so far ${self.cost_so_far():.2f} reached max_cost ${self.cfg.max_cost:.2f}: fleet terminated"
        self.depths = queues.depths(self.sqs, self.q, roles=("work", "dlq"))
        if self.depths.get("dlq") or self.depths.get("dlq_in_flight"):
            self._drain_dlq()
        return live, self._manage_workers(live, settings)

    def _on_done(self, msg: DoneMessage) -> None:
        if msg.type == "heartbeat":
            if msg.load is not None:
                self.worker_load[msg.instance_id] = (msg.load, time.monotonic())
            return
        job_id = msg.job_id or ""
        if job_id not in self.jobs:
            return
        self.state.attempts += 1
        if msg.receive_count > 1:
            self.state.redeliveries += 1
        if msg.outcome == "retry" or msg.outcome == "failed":
            self.state.last_error[job_id] = (msg.error_class or "infra", msg.error or "")
            if msg.outcome == "failed":
                self.state.final[job_id] = "failed"
            return
        if job_id in self.state.final or job_id in self.pending_downloads:
            self.state.duplicates += 1
            return
        if msg.started_at and msg.finished_at and msg.outcome != "skipped_duplicate":
            self.job_seconds.append(msg.finished_at - msg.started_at)
        if msg.outcome == "sample_error":
            self.state.last_error[job_id] = (msg.error_class or "task_error", msg.error or "")
        self.pending_downloads[job_id] = self.downloads.submit(self._fetch_result, job_id)

    def _fetch_result(self, job_id: str) -> bool:
        key = result_key(self.spec.fleet_id, job_id)
        return store.download_result(self.s3, self.cfg.bucket, key, self.results_dir / f"{job_id}.eval")

    def _collect_downloads(self, wait: bool = False) -> None:
        for job_id, fut in list(self.pending_downloads.items()):
            if not (wait or fut.done()):
                continue
            del self.pending_downloads[job_id]
            if fut.result():
                self.state.final[job_id] = "sample_error" if job_id in self.state.last_error else "success"
            else:
                # A result that is not a finished log (a truncated upload): drop it and run again.
                self.warn(f"result of job {job_id} is unreadable; running it again")
                self.s3.delete_object(Bucket=self.cfg.bucket, Key=result_key(self.spec.fleet_id, job_id))
                queues.send_batch(self.sqs, self.q.work, [self.spec.work_message(self.jobs[job_id]).to_json()])

    def _drain_dlq(self) -> None:
        while True:
            messages = queues.receive(self.sqs, self.q.dlq, wait=0)
            if not messages:
                return
            for msg in messages:
                job = WorkMessage.from_json(msg["Body"])
                if job.job_id in self.jobs and job.job_id not in self.state.final:
                    self.state.dead[job.job_id] = self.state.last_error.get(job.job_id, ("infra", "no error reported"))
            queues.delete_batch(self.sqs, self.q.dlq, [m["ReceiptHandle"] for m in messages])

    def _manage_workers(self, live: list[str], settings: dict[str, str]) -> str | None:
        """Replace workers that died with work left; add workers while the fleet is CPU-bound."""
        remaining = len(self.jobs) - len(self.state.final) - len(self.state.dead) - len(self.pending_downloads)
        if remaining <= 0:
            return None
        waiting = self.depths.get("work", 0)
        wanted = self._first_launch_count(remaining)
        # Workers leave only when the queue is empty, so visible work with too few workers
        # means some died (a failed bootstrap, a kill, a spot interruption).
        if waiting and len(live) < wanted:
            if self.replacements >= self.cfg.max_replacements:
                return self._bootstrap_failure() if not live else None
            count = min(wanted - len(live), self.cfg.max_replacements - self.replacements)
            self.replacements += count
            self.warn(
                f"{len(live)} worker(s) up with {waiting} job(s) waiting: launching {count} "
                f"replacement(s) ({self.replacements}/{self.cfg.max_replacements})"
            )
            self._launch(count, settings)
            return None
        if len(live) < (self.cfg.max_workers or 0) and waiting:
            now = time.monotonic()
            fresh = [load for load, at in self.worker_load.values() if now - at < 3 * self.cfg.heartbeat_interval]
            cooled = now - self.last_scale_up >= 2 * self.cfg.heartbeat_interval
            if cooled and fresh and sum(fresh) / len(fresh) >= SCALE_UP_LOAD:
                self.last_scale_up = now
                self._launch(1, settings)
        return None

    def _bootstrap_failure(self) -> str:
        failed = ""
        for instance_id in reversed(self.launched):
            key = log_key(self.spec.fleet_id, instance_id)
            try:
                text = self.s3.get_object(Bucket=self.cfg.bucket, Key=key)["Body"].read().decode(errors="replace")
            except Exception:
                continue
            for line in text.splitlines():
                if "FAILED" in line:
                    failed = line.strip()
            if failed:
                return f"workers keep dying: {failed} (log: s3://{self.cfg.bucket}/{key})"
        return f"workers keep dying after {self.replacements} replacement(s); logs under s3://{self.cfg.bucket}/{self.spec.fleet_id}/logs/"

    def _report(self, start: float, live: list[str]) -> None:
        elapsed = time.monotonic() - start
        finished = len(self.state.final) + len(self.state.dead)
        failed = sum(1 for o in self.state.final.values() if o != "success")
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
            )
        )

    def dead_report(self) -> list[dict[str, Any]]:
        rows = []
        for job_id, (error_class, error) in sorted(self.state.dead.items()):
            job = self.jobs[job_id]
            rows.append(
                {
                    "job_id": job_id,
                    "sample_id": job.sample_id,
                    "epoch": job.epoch,
                    "error_class": error_class,
                    "error": error.strip().splitlines()[-1] if error.strip() else "",
                    "rerun": f"bin/ct-fleet run-job {self.spec.fleet_id} {job_id}",
                }
            )
        return rows

    def _record_durations(self) -> None:
        """Seconds per job, read by the cost estimate of later fleets of this setting and policy."""
        if self.job_seconds:
            data = {"setting": self.spec.setting, "policy": self.spec.policy, "seconds": self.job_seconds}
            (self.run_dir / "durations.json").write_text(json.dumps(data))

    # -- teardown ----------------------------------------------------------------------
    def teardown(self, *, delete_queues: bool) -> None:
        live = [inst["InstanceId"] for inst in fleet.live_instances(self.ec2, self.spec.fleet_id)]
        if delete_queues and live:
            # The work is done: workers see the empty queue, upload their logs and shut down
            # by themselves within idle_timeout. Only stragglers are terminated.
            deadline = time.monotonic() + (self.cfg.idle_timeout or 0) + STRAGGLER_GRACE
            while live and time.monotonic() < deadline:
                time.sleep(1)
                live = [inst["InstanceId"] for inst in fleet.live_instances(self.ec2, self.spec.fleet_id)]
                self.cloud.poll(live)
        fleet.terminate(self.ec2, live)
        self.cloud.poll([])
        fleet_secrets.delete_fleet_secrets(self.ssm, self.spec.fleet_id)
        if delete_queues:
            queues.delete_queues(self.sqs, self.q)
        self.downloads.shutdown(wait=True)

